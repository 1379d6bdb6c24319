//! Unpacking a module image from an OCI image layout (`oci:<dir>`, as `crane pull
//! --format=oci`, `skopeo copy … oci:<dir>` or `docker buildx … --output type=oci,tar=false`
//! write one) into a folder the image checks read.
//!
//! Only what the checks read keeps its content: the files under `/captf/module`, the JSON
//! indexes of the provider mirror, `/etc/passwd` and `/etc/group`. Every other file is made
//! empty with its mode and owner, so existence, links, permissions and names are all there at
//! a fraction of the size. Layers apply in order with their whiteouts, as a container runtime
//! applies them. Every blob is checked against its digest; nothing of the image is ever run.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::image::ImageConfig;

/// Content kept at most (module files, mirror indexes, 512 bytes per tar header).
pub const MAX_KEPT: u64 = 512 << 20;
/// Layer content read at most, decompressed.
pub const MAX_SCANNED: u64 = 16 << 30;

const INDEX_TYPES: [&str; 2] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];
const OPAQUE: &str = ".wh..wh..opq";
const WHITEOUT: &str = ".wh.";

/// The owner (uid, gid) of each unpacked file, by its path on the host.
pub type Owners = HashMap<PathBuf, (u32, u32)>;

/// An image unpacked into a temporary folder, removed on drop.
pub struct Unpacked {
    root: tempfile::TempDir,
    owners: Owners,
    /// The parts of the image config the checks read; `os` and `architecture` are left out
    /// unless the platform was chosen from an index or asked for explicitly.
    pub config: ImageConfig,
    /// The manifest's digest.
    pub digest: String,
    /// Whether the files carry the image's owners (only root may give files away). When they
    /// do not, [`Unpacked::owners`] says who owns what.
    pub owners_kept: bool,
}

impl Unpacked {
    /// The unpacked root filesystem.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// The owners the image gives its files, whether or not the file system kept them.
    pub fn owners(&self) -> &Owners {
        &self.owners
    }
}

impl Drop for Unpacked {
    fn drop(&mut self) {
        // An image's read-only folders would keep their content from being removed.
        let mut dirs = Vec::new();
        collect_dirs(self.root.path(), &mut dirs);
        for dir in dirs {
            let _ = set_mode(&dir, 0o700);
        }
    }
}

/// Why an image could not be unpacked.
#[derive(Debug, PartialEq, Eq)]
pub enum UnpackError {
    /// Unreadable, not an image, a digest that does not match, or over a size cap (exit 2).
    Unextractable(String),
    /// The index holds no image for the platform (an `image/platform` error).
    NoPlatform {
        /// The platform asked for.
        wanted: String,
        /// The platforms the index holds.
        offered: Vec<String>,
    },
}

impl std::fmt::Display for UnpackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnpackError::Unextractable(why) => f.write_str(why),
            UnpackError::NoPlatform { wanted, offered } => write!(
                f,
                "the image index holds no image for {wanted} (it holds {}); build the image for that platform or pass --platform",
                if offered.is_empty() {
                    "none with a platform".to_owned()
                } else {
                    offered.join(", ")
                }
            ),
        }
    }
}

fn unextractable(why: impl Into<String>) -> UnpackError {
    UnpackError::Unextractable(why.into())
}

/// Unpacks the image of the OCI layout at `layout` for `platform` (`os/arch[/variant]`). A
/// layout of one image is taken as it is, its platform checked only when `explicit`; from an
/// index the image for `platform` is chosen.
pub fn oci_layout(layout: &Path, platform: &str, explicit: bool) -> Result<Unpacked, UnpackError> {
    let layout_file = read_json(&layout.join("oci-layout"), "oci-layout")?;
    if layout_file["imageLayoutVersion"].as_str().is_none() {
        return Err(unextractable(format!(
            "{}: oci-layout has no imageLayoutVersion: not an OCI image layout",
            layout.display()
        )));
    }
    let blobs = Blobs { layout };
    let mut index = read_json(&layout.join("index.json"), "index.json")?;
    let mut chosen_from_index = false;
    let mut levels = 0;
    let manifest = loop {
        levels += 1;
        if levels > 4 {
            return Err(unextractable("index.json: indexes nested too deep"));
        }
        let entries = index["manifests"].as_array().cloned().unwrap_or_default();
        let descriptor = match entries.as_slice() {
            [] => return Err(unextractable("index.json lists no image")),
            [only] if !chosen_from_index && !is_index(only) => only.clone(),
            [only] if is_index(only) => {
                index = blobs.json(only)?;
                chosen_from_index = true;
                continue;
            }
            several => {
                chosen_from_index = true;
                choose(several, platform)?
            }
        };
        if is_index(&descriptor) {
            index = blobs.json(&descriptor)?;
            continue;
        }
        break descriptor;
    };
    let digest = manifest["digest"].as_str().unwrap_or_default().to_owned();
    let manifest = blobs.json(&manifest)?;
    if manifest["config"].is_null() {
        return Err(unextractable(format!(
            "the manifest {digest} names no config: not an OCI or Docker v2 image"
        )));
    }
    let config = blobs.json(&manifest["config"])?;
    let config = image_config(&config, chosen_from_index || explicit);

    let root = tempfile::Builder::new()
        .prefix("captf-lint-image-")
        .tempdir()
        .map_err(|e| unextractable(format!("a temporary folder: {e}")))?;
    let mut unpacked = Unpacked {
        root,
        owners: Owners::new(),
        config,
        digest,
        owners_kept: true,
    };
    let mut budget = Budget::default();
    let mut modes = Vec::new();
    for (n, layer) in manifest["layers"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let what = format!(
            "layer {} ({})",
            n + 1,
            layer["digest"].as_str().unwrap_or("?")
        );
        apply_layer(&blobs, layer, &mut unpacked, &mut budget, &mut modes)
            .map_err(|e| unextractable(format!("{what}: {e}")))?;
    }
    // Folder modes last, deepest first: a read-only folder would refuse what goes into it.
    modes.sort_by_key(|(path, _)| std::cmp::Reverse(path.components().count()));
    let root = unpacked.root.path().to_owned();
    for (path, mode) in modes {
        // A later layer may have made the folder, or a folder above it, a link: its mode is
        // not the mode of what the link points at.
        if real_folder(&root, &path) {
            let _ = set_mode(&path, mode);
        }
    }
    Ok(unpacked)
}

/// Whether `path` is a folder under `root` that is reached without a link: it and every
/// folder between the root and it are real folders.
fn real_folder(root: &Path, path: &Path) -> bool {
    let Ok(relative) = path.strip_prefix(root) else {
        return false;
    };
    let mut at = root.to_path_buf();
    relative.components().all(|c| {
        at.push(c);
        fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir())
    })
}

fn is_index(descriptor: &Value) -> bool {
    descriptor["mediaType"]
        .as_str()
        .is_some_and(|t| INDEX_TYPES.contains(&t))
}

fn platform_of(descriptor: &Value) -> Option<String> {
    let p = &descriptor["platform"];
    let (os, arch) = (p["os"].as_str()?, p["architecture"].as_str()?);
    Some(match p["variant"].as_str() {
        Some(v) => format!("{os}/{arch}/{v}"),
        None => format!("{os}/{arch}"),
    })
}

/// The platform of an index entry that is an image: not an attestation, which build tools
/// list as `unknown/unknown`.
fn image_platform(descriptor: &Value) -> Option<String> {
    platform_of(descriptor).filter(|p| !p.starts_with("unknown/"))
}

/// Every entry of an index that is an image for a platform (`--all-platforms`).
pub fn every_platform(entries: &[Value]) -> Vec<Value> {
    entries
        .iter()
        .filter(|e| image_platform(e).is_some())
        .cloned()
        .collect()
}

/// The platforms of the image in the layout at `layout`, in the index's order; none when the
/// layout holds a single image rather than an index.
pub fn platforms(layout: &Path) -> Result<Vec<String>, UnpackError> {
    let blobs = Blobs { layout };
    let mut index = read_json(&layout.join("index.json"), "index.json")?;
    // As `oci_layout` reads it: one image at the top is taken as it is.
    for level in 0..4 {
        let entries = index["manifests"].as_array().cloned().unwrap_or_default();
        match entries.as_slice() {
            [only] if is_index(only) => index = blobs.json(only)?,
            [only] if level == 0 => return Ok(Vec::new()),
            several => return Ok(several.iter().filter_map(image_platform).collect()),
        }
    }
    Err(unextractable("index.json: indexes nested too deep"))
}

/// The entry of an index for `wanted`; a variant asked for must match, one not asked for
/// matches any.
pub fn choose(entries: &[Value], wanted: &str) -> Result<Value, UnpackError> {
    let offered: Vec<String> = entries.iter().filter_map(image_platform).collect();
    entries
        .iter()
        .find(|e| {
            platform_of(e).is_some_and(|p| {
                p == wanted
                    || (wanted.matches('/').count() == 1 && p.starts_with(&format!("{wanted}/")))
            })
        })
        .cloned()
        .ok_or_else(|| UnpackError::NoPlatform {
            wanted: wanted.to_owned(),
            offered,
        })
}

fn image_config(config: &Value, with_platform: bool) -> ImageConfig {
    let c = &config["config"];
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    let text = |v: &Value| v.as_str().map(str::to_owned);
    ImageConfig {
        user: text(&c["User"]).filter(|u| !u.is_empty()),
        labels: c["Labels"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect(),
        entrypoint: strings(&c["Entrypoint"]),
        cmd: strings(&c["Cmd"]),
        os: text(&config["os"]).filter(|_| with_platform),
        architecture: text(&config["architecture"]).filter(|_| with_platform),
        variant: text(&config["variant"]).filter(|_| with_platform),
    }
}

fn read_json(path: &Path, what: &str) -> Result<Value, UnpackError> {
    let text = fs::read(path).map_err(|e| unextractable(format!("{}: {e}", path.display())))?;
    serde_json::from_slice(&text).map_err(|e| unextractable(format!("{what} is not JSON: {e}")))
}

/// The blobs of a layout, read by digest and checked against it.
struct Blobs<'a> {
    layout: &'a Path,
}

impl Blobs<'_> {
    fn path(&self, descriptor: &Value) -> Result<(PathBuf, String), UnpackError> {
        let digest = descriptor["digest"]
            .as_str()
            .ok_or_else(|| unextractable("a descriptor without a digest"))?;
        let hex = digest
            .strip_prefix("sha256:")
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| unextractable(format!("{digest}: only sha256 digests are read")))?;
        Ok((
            self.layout.join("blobs/sha256").join(hex),
            hex.to_ascii_lowercase(),
        ))
    }

    /// A small JSON blob (a manifest, an index, a config).
    fn json(&self, descriptor: &Value) -> Result<Value, UnpackError> {
        let (path, hex) = self.path(descriptor)?;
        let body =
            fs::read(&path).map_err(|e| unextractable(format!("{}: {e}", path.display())))?;
        if hex::encode(Sha256::digest(&body)) != hex {
            return Err(unextractable(format!(
                "{}: the content does not match its digest",
                path.display()
            )));
        }
        serde_json::from_slice(&body)
            .map_err(|e| unextractable(format!("{}: not JSON: {e}", path.display())))
    }
}

/// What the layers may still add.
#[derive(Default)]
struct Budget {
    kept: u64,
    scanned: u64,
}

/// A reader that hashes what passes (the compressed layer, for its digest).
struct Hashing<R> {
    inner: R,
    hash: Sha256,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
}

/// A reader that refuses to go past [`MAX_SCANNED`] in all (the decompressed layers).
struct Capped<'a, R> {
    inner: R,
    scanned: &'a mut u64,
}

impl<R: Read> Read for Capped<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        *self.scanned += n as u64;
        if *self.scanned > MAX_SCANNED {
            return Err(io::Error::other(format!(
                "the layers hold more than {} GiB: over the scan cap",
                MAX_SCANNED >> 30
            )));
        }
        Ok(n)
    }
}

fn apply_layer(
    blobs: &Blobs<'_>,
    layer: &Value,
    unpacked: &mut Unpacked,
    budget: &mut Budget,
    modes: &mut Vec<(PathBuf, u32)>,
) -> Result<(), String> {
    let media_type = layer["mediaType"].as_str().unwrap_or_default();
    let (path, hex) = blobs.path(layer).map_err(|e| e.to_string())?;
    let file = fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut hashing = Hashing {
        inner: io::BufReader::new(file),
        hash: Sha256::new(),
    };
    {
        let decompressed: Box<dyn Read + '_> = if media_type.contains("zstd") {
            return Err(format!(
                "{media_type}: zstd layers are not read; rebuild the image with gzip layers"
            ));
        } else if media_type.ends_with("gzip") {
            Box::new(flate2::read::GzDecoder::new(&mut hashing))
        } else if media_type.ends_with("tar") {
            Box::new(&mut hashing)
        } else {
            return Err(format!("{media_type:?} is not a layer media type"));
        };
        let capped = Capped {
            inner: decompressed,
            scanned: &mut budget.scanned,
        };
        let mut archive = tar::Archive::new(capped);
        let mut this_layer = HashSet::new();
        let root = unpacked.root.path().to_owned();
        for entry in archive.entries().map_err(|e| e.to_string())? {
            let mut entry = entry.map_err(|e| e.to_string())?;
            let relative = clean(&entry.path().map_err(|e| e.to_string())?)?;
            budget.kept += 512;
            let Some(name) = relative
                .file_name()
                .and_then(|n| n.to_str())
                .map(str::to_owned)
            else {
                continue;
            };
            // Folders are followed through links as the container would see them, and never
            // out of the root.
            let parent = inside(&root, relative.parent().unwrap_or(Path::new("")))?;
            if name == OPAQUE {
                hide_lower(&parent, &this_layer);
                continue;
            }
            if let Some(hidden) = name.strip_prefix(WHITEOUT) {
                // `.wh.`, `.wh..` and `.wh...` name no file: joined to the folder they would
                // hide the folder itself or its parent, which for the root is the temporary
                // folder it sits in.
                if matches!(hidden, "" | "." | "..") {
                    return Err(format!(
                        "{}: a whiteout that names no file",
                        relative.display()
                    ));
                }
                remove(&parent.join(hidden));
                continue;
            }
            let target = parent.join(&name);
            this_layer.insert(target.clone());
            if let Some(dir) = target.parent() {
                fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", relative.display()))?;
            }
            let header = entry.header();
            let mode = header.mode().unwrap_or(0o644) & 0o7777;
            let owner = (header.uid().ok(), header.gid().ok());
            let kind = header.entry_type();
            if kind.is_dir() {
                // Not through a link: a folder entry where a link is replaces the link (as
                // containerd does), and a mode never reaches what the link points at.
                let real_dir = fs::symlink_metadata(&target).is_ok_and(|m| m.is_dir());
                if !real_dir {
                    remove(&target);
                }
                fs::create_dir_all(&target).map_err(|e| format!("{}: {e}", relative.display()))?;
                let _ = set_mode(&target, 0o755);
                modes.push((target.clone(), mode));
            } else if kind.is_symlink() || kind.is_hard_link() {
                let link = entry
                    .link_name()
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("{}: a link without a target", relative.display()))?
                    .into_owned();
                remove(&target);
                if kind.is_symlink() {
                    std::os::unix::fs::symlink(&link, &target)
                        .map_err(|e| format!("{}: {e}", relative.display()))?;
                } else {
                    let link_path = clean(&link)?;
                    let source = inside(&root, link_path.parent().unwrap_or(Path::new("")))?
                        .join(link_path.file_name().unwrap_or_default());
                    fs::hard_link(&source, &target).map_err(|e| {
                        format!(
                            "{} (a hard link to {}): {e}",
                            relative.display(),
                            link.display()
                        )
                    })?;
                }
            } else if kind.is_file() || kind == tar::EntryType::Continuous {
                remove(&target);
                let mut out = fs::File::create(&target)
                    .map_err(|e| format!("{}: {e}", relative.display()))?;
                // Through a link (`/captf/module` → `/opt/module`) the content lands where
                // the checks will read it.
                if kept(&relative) || target.strip_prefix(&root).is_ok_and(kept) {
                    budget.kept += entry.size();
                    if budget.kept > MAX_KEPT {
                        return Err(format!(
                            "the module files and mirror indexes hold more than {} MiB: over the size cap",
                            MAX_KEPT >> 20
                        ));
                    }
                    io::copy(&mut entry, &mut out).map_err(|e| e.to_string())?;
                }
                set_mode(&target, mode).map_err(|e| format!("{}: {e}", relative.display()))?;
            } else {
                // Devices and FIFOs: nothing the checks look at.
                continue;
            }
            let owner = (
                owner.0.and_then(|u| u32::try_from(u).ok()).unwrap_or(0),
                owner.1.and_then(|g| u32::try_from(g).ok()).unwrap_or(0),
            );
            // Only root may give files away; the owners are recorded either way.
            if std::os::unix::fs::lchown(&target, Some(owner.0), Some(owner.1)).is_err() {
                unpacked.owners_kept = false;
            }
            unpacked.owners.insert(target, owner);
        }
        // What the tar format leaves after its end still belongs to the blob's digest.
        let mut rest = archive.into_inner();
        io::copy(&mut rest, &mut io::sink()).map_err(|e| e.to_string())?;
    }
    io::copy(&mut hashing, &mut io::sink()).map_err(|e| e.to_string())?;
    if hex::encode(hashing.hash.finalize()) != hex {
        return Err("the layer does not match its digest".to_owned());
    }
    Ok(())
}

/// An entry's path inside the root: relative, without `.` or `..`.
fn clean(path: &Path) -> Result<PathBuf, String> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                return Err(format!("{}: a path that leaves the root", path.display()));
            }
        }
    }
    Ok(out)
}

/// Whether the checks read this file's content.
fn kept(relative: &Path) -> bool {
    let p = relative.to_string_lossy();
    p.starts_with("captf/module/")
        || (p.starts_with("captf/providers/") && p.ends_with(".json"))
        || p == "etc/passwd"
        || p == "etc/group"
}

/// An opaque whiteout: what lower layers put in `dir` is gone; this layer's entries stay.
fn hide_lower(dir: &Path, this_layer: &HashSet<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if !this_layer.contains(&path) {
            remove(&path);
        }
    }
}

/// The host folder of the image folder `relative`, following the links on the way inside
/// the root: an absolute link starts again at the root, `..` stops at it.
fn inside(root: &Path, relative: &Path) -> Result<PathBuf, String> {
    let mut resolved = PathBuf::new();
    let mut pending: std::collections::VecDeque<std::ffi::OsString> = relative
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p.to_owned()),
            _ => None,
        })
        .collect();
    let mut hops = 0;
    while let Some(part) = pending.pop_front() {
        if part == ".." {
            resolved.pop();
            continue;
        }
        let candidate = resolved.join(&part);
        let host = root.join(&candidate);
        match fs::symlink_metadata(&host) {
            Ok(md) if md.file_type().is_symlink() => {
                hops += 1;
                if hops > 40 {
                    return Err(format!("{}: too many links", relative.display()));
                }
                let target =
                    fs::read_link(&host).map_err(|e| format!("{}: {e}", host.display()))?;
                if target.is_absolute() {
                    resolved = PathBuf::new();
                }
                let parts: Vec<std::ffi::OsString> = target
                    .components()
                    .filter_map(|c| match c {
                        Component::Normal(p) => Some(p.to_owned()),
                        Component::ParentDir => Some("..".into()),
                        _ => None,
                    })
                    .collect();
                for p in parts.into_iter().rev() {
                    pending.push_front(p);
                }
            }
            _ => resolved = candidate,
        }
    }
    Ok(root.join(resolved))
}

fn remove(path: &Path) {
    match fs::symlink_metadata(path) {
        Ok(md) if md.is_dir() => {
            let mut dirs = Vec::new();
            collect_dirs(path, &mut dirs);
            for dir in dirs {
                let _ = set_mode(&dir, 0o700);
            }
            let _ = fs::remove_dir_all(path);
        }
        Ok(_) => {
            let _ = fs::remove_file(path);
        }
        Err(_) => {}
    }
}

fn collect_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    if !fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
        return;
    }
    let _ = set_mode(dir, 0o700);
    out.push(dir.to_owned());
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        collect_dirs(&entry.path(), out);
    }
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}
