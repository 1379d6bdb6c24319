//! A small deterministic OCI image writer: layers as **uncompressed** tar archives (mtime 0,
//! entries sorted by path, numeric owners, no user or group names), a config and a manifest,
//! written into a content-addressed [`Store`] and laid out as an OCI image layout that
//! `crane push` sends to a registry ([`Crane`]).
//!
//! The same inputs give the same digests, so a registry that already holds a blob is not
//! sent it again, and a layer whose inputs did not change is not written again: the store
//! keys each written layer by a hash of its inputs (host files by path, size, inode and
//! modification time, not by content, so a 100 MB engine is not read to find it unchanged).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub const LAYER_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar";
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";

/// Bump when the tar encoding changes: cached layers of older encodings are then rebuilt.
const LAYER_FORMAT: &str = "captf-oci-layer-v2";

/// What a regular file holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Content {
    Bytes(Vec<u8>),
    /// Streamed from this host file when the layer is written.
    Host(PathBuf),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    File(Content),
    Dir,
    /// A symbolic link to this target (taken literally, absolute or relative).
    Symlink(String),
    /// A hard link to the entry at this path in the same layer.
    HardLink(String),
}

/// One entry of a layer. Paths are relative to the image root (a leading `/` is dropped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub kind: Kind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

impl Entry {
    fn new(path: &str, kind: Kind, mode: u32) -> Entry {
        Entry {
            path: path.to_owned(),
            kind,
            mode,
            uid: 0,
            gid: 0,
        }
    }

    /// A regular file, mode 0644, owned by root.
    pub fn file(path: &str, bytes: impl Into<Vec<u8>>) -> Entry {
        Entry::new(path, Kind::File(Content::Bytes(bytes.into())), 0o644)
    }

    /// A regular file streamed from `host`, mode 0644, owned by root.
    pub fn host_file(path: &str, host: impl Into<PathBuf>) -> Entry {
        Entry::new(path, Kind::File(Content::Host(host.into())), 0o644)
    }

    /// A directory, mode 0755, owned by root.
    pub fn dir(path: &str) -> Entry {
        Entry::new(path, Kind::Dir, 0o755)
    }

    pub fn symlink(path: &str, target: &str) -> Entry {
        Entry::new(path, Kind::Symlink(target.to_owned()), 0o777)
    }

    /// A second name of the file at `target` (its mode and owner are the target's).
    pub fn hard_link(path: &str, target: &str) -> Entry {
        Entry::new(path, Kind::HardLink(target.to_owned()), 0o644)
    }

    pub fn mode(mut self, mode: u32) -> Entry {
        self.mode = mode;
        self
    }

    pub fn owner(mut self, uid: u32, gid: u32) -> Entry {
        self.uid = uid;
        self.gid = gid;
        self
    }
}

/// An ordered set of entries, keyed by path (a later entry of the same path replaces the
/// earlier one). Missing parent directories are written as root-owned 0755 directories.
#[derive(Clone, Debug, Default)]
pub struct Layer {
    /// Shown in the image history and in errors.
    pub name: String,
    entries: BTreeMap<String, Entry>,
    /// Host files added by [`Layer::host_tree`] with more than one name, by (device, inode):
    /// a second name becomes a hard link, as on the host.
    host_links: BTreeMap<(u64, u64), String>,
}

impl Layer {
    pub fn new(name: &str) -> Layer {
        Layer {
            name: name.to_owned(),
            entries: BTreeMap::new(),
            host_links: BTreeMap::new(),
        }
    }

    pub fn push(&mut self, entry: Entry) -> anyhow::Result<&mut Layer> {
        let path = normalize(&entry.path)
            .with_context(|| format!("layer {}: entry {:?}", self.name, entry.path))?;
        let kind = match entry.kind {
            Kind::HardLink(target) => Kind::HardLink(
                normalize(&target)
                    .with_context(|| format!("layer {}: hard link {path}", self.name))?,
            ),
            other => other,
        };
        self.entries.insert(
            path.clone(),
            Entry {
                path,
                kind,
                ..entry
            },
        );
        Ok(self)
    }

    /// Adds the host directory `host` as `dest` (and everything under it), skipping the paths
    /// `skip` returns true for (a skipped directory is not walked). Modes are normalized, so
    /// the host's umask does not change the digest: directories 0755, files 0755 when the
    /// host file is executable by its owner, else 0644. Symlinks are kept as they are.
    pub fn host_tree(
        &mut self,
        dest: &str,
        host: &Path,
        uid: u32,
        gid: u32,
        skip: &dyn Fn(&Path) -> bool,
    ) -> anyhow::Result<&mut Layer> {
        let meta = std::fs::symlink_metadata(host)
            .with_context(|| format!("layer {}: reading {}", self.name, host.display()))?;
        let entry = if meta.is_dir() {
            Entry::dir(dest)
        } else if meta.file_type().is_symlink() {
            let target = std::fs::read_link(host)?;
            let target = target
                .to_str()
                .with_context(|| format!("{}: link target is not UTF-8", host.display()))?;
            Entry::symlink(dest, target)
        } else if meta.is_file()
            && meta.nlink() > 1
            && let Some(first) = self.host_links.get(&(meta.dev(), meta.ino()))
        {
            Entry::hard_link(dest, first)
        } else if meta.is_file() {
            if meta.nlink() > 1 {
                self.host_links
                    .insert((meta.dev(), meta.ino()), dest.to_owned());
            }
            let mode = if meta.mode() & 0o100 != 0 {
                0o755
            } else {
                0o644
            };
            Entry::host_file(dest, host).mode(mode)
        } else {
            anyhow::bail!(
                "layer {}: {} is neither a file, a directory nor a symlink",
                self.name,
                host.display()
            );
        };
        self.push(entry.owner(uid, gid))?;
        if meta.is_dir() {
            let mut children: Vec<PathBuf> = std::fs::read_dir(host)
                .with_context(|| format!("layer {}: listing {}", self.name, host.display()))?
                .map(|e| e.map(|e| e.path()))
                .collect::<Result<_, _>>()?;
            children.sort();
            for child in children {
                if skip(&child) {
                    continue;
                }
                let name = child
                    .file_name()
                    .and_then(|n| n.to_str())
                    .with_context(|| format!("{}: file name is not UTF-8", child.display()))?
                    .to_owned();
                self.host_tree(
                    &format!("{}/{name}", dest.trim_end_matches('/')),
                    &child,
                    uid,
                    gid,
                    skip,
                )?;
            }
        }
        Ok(self)
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    pub fn get(&self, path: &str) -> Option<&Entry> {
        normalize(path).ok().and_then(|p| self.entries.get(&p))
    }

    /// The entries to write, in order: every path with its implicit parents, and each group of
    /// hard links rewritten so that the first of them in path order holds the data (a tar
    /// reader needs a link's target before the link).
    fn plan(&self) -> anyhow::Result<Vec<Entry>> {
        let mut all = self.entries.clone();
        for path in self.entries.keys() {
            let mut parent = Path::new(path).parent();
            while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
                let p = p.to_str().context("path")?;
                let dir = all.entry(p.to_owned()).or_insert_with(|| Entry::dir(p));
                anyhow::ensure!(
                    dir.kind == Kind::Dir,
                    "layer {}: {p} has entries under it but is not a directory",
                    self.name
                );
                parent = Path::new(p).parent();
            }
        }
        // Each hard link group, keyed by the regular file that holds the data.
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (path, entry) in &all {
            if let Kind::HardLink(_) = entry.kind {
                let mut target = path.clone();
                let mut hops = 0;
                while let Some(Kind::HardLink(next)) = all.get(&target).map(|e| &e.kind) {
                    target = next.clone();
                    hops += 1;
                    anyhow::ensure!(
                        hops <= all.len(),
                        "layer {}: hard link loop at {path}",
                        self.name
                    );
                }
                match all.get(&target).map(|e| &e.kind) {
                    Some(Kind::File(_)) => groups.entry(target).or_default().push(path.clone()),
                    _ => anyhow::bail!(
                        "layer {}: hard link {path} does not lead to a regular file of the layer",
                        self.name
                    ),
                }
            }
        }
        for (holder, links) in groups {
            let first = links
                .iter()
                .chain(std::iter::once(&holder))
                .min()
                .context("group")?
                .clone();
            let data = all.get(&holder).context("holder")?.clone();
            for name in links.iter().chain(std::iter::once(&holder)) {
                let entry = if *name == first {
                    Entry {
                        path: name.clone(),
                        ..data.clone()
                    }
                } else {
                    Entry::hard_link(name, &first)
                };
                all.insert(name.clone(), entry);
            }
        }
        Ok(all.into_values().collect())
    }

    /// A hash of everything the layer's bytes depend on.
    fn key(&self) -> anyhow::Result<String> {
        let mut hash = Sha256::new();
        hash.update(LAYER_FORMAT);
        for e in self.plan()? {
            let kind = match &e.kind {
                Kind::File(Content::Bytes(b)) => {
                    format!("bytes {}", hex::encode(Sha256::digest(b)))
                }
                Kind::File(Content::Host(p)) => {
                    let m = std::fs::metadata(p)
                        .with_context(|| format!("layer {}: reading {}", self.name, p.display()))?;
                    format!(
                        "host {} {} {} {} {}.{}",
                        p.display(),
                        m.dev(),
                        m.ino(),
                        m.len(),
                        m.mtime(),
                        m.mtime_nsec()
                    )
                }
                Kind::Dir => "dir".to_owned(),
                Kind::Symlink(t) => format!("symlink {t}"),
                Kind::HardLink(t) => format!("link {t}"),
            };
            let line = format!("{:?} {} {} {} {kind}\n", e.path, e.mode, e.uid, e.gid);
            hash.update(line.as_bytes());
        }
        Ok(hex::encode(hash.finalize()))
    }

    /// Writes the layer as a tar archive into `out`.
    pub fn write_tar<W: Write>(&self, out: W) -> anyhow::Result<W> {
        let mut tar = tar::Builder::new(out);
        let plan = self.plan()?;
        let owners: BTreeMap<&str, (u32, u32, u32)> = plan
            .iter()
            .filter(|e| !matches!(e.kind, Kind::HardLink(_)))
            .map(|e| (e.path.as_str(), (e.mode, e.uid, e.gid)))
            .collect();
        for e in &plan {
            let mut header = tar::Header::new_gnu();
            header.set_mode(e.mode);
            header.set_uid(u64::from(e.uid));
            header.set_gid(u64::from(e.gid));
            header.set_mtime(0);
            let what = || format!("layer {}: writing {}", self.name, e.path);
            match &e.kind {
                Kind::File(Content::Bytes(bytes)) => {
                    header.set_entry_type(tar::EntryType::Regular);
                    header.set_size(bytes.len() as u64);
                    tar.append_data(&mut header, &e.path, bytes.as_slice())
                        .with_context(what)?;
                }
                Kind::File(Content::Host(host)) => {
                    let file = File::open(host)
                        .with_context(|| format!("{}: opening {}", what(), host.display()))?;
                    let len = file.metadata()?.len();
                    header.set_entry_type(tar::EntryType::Regular);
                    header.set_size(len);
                    let mut reader = Counted {
                        inner: file.take(len),
                        read: 0,
                    };
                    tar.append_data(&mut header, &e.path, &mut reader)
                        .with_context(what)?;
                    // A file that shrank while being read would leave a corrupt archive.
                    anyhow::ensure!(
                        reader.read == len,
                        "{}: {} changed while it was read ({} of {len} bytes)",
                        what(),
                        host.display(),
                        reader.read
                    );
                }
                Kind::Dir => {
                    header.set_entry_type(tar::EntryType::Directory);
                    header.set_size(0);
                    tar.append_data(&mut header, format!("{}/", e.path), io::empty())
                        .with_context(what)?;
                }
                Kind::Symlink(target) => {
                    header.set_entry_type(tar::EntryType::Symlink);
                    header.set_size(0);
                    tar.append_link(&mut header, &e.path, target)
                        .with_context(what)?;
                }
                Kind::HardLink(target) => {
                    // The link shares its target's inode, and containerd (like Docker's
                    // applier) chmods and chowns that inode to the link header's values:
                    // they must be the target's, or the link strips the target's modes.
                    if let Some((mode, uid, gid)) = owners.get(target.as_str()) {
                        header.set_mode(*mode);
                        header.set_uid(u64::from(*uid));
                        header.set_gid(u64::from(*gid));
                    }
                    header.set_entry_type(tar::EntryType::Link);
                    header.set_size(0);
                    tar.append_link(&mut header, &e.path, target)
                        .with_context(what)?;
                }
            }
        }
        Ok(tar.into_inner()?)
    }
}

/// `a/b/c` from `/a/b/c`, `./a/b/c/` or `a//b`; refuses `..` and the empty path.
fn normalize(path: &str) -> anyhow::Result<String> {
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => anyhow::bail!("{path:?}: `..` is not allowed in an image path"),
            p => parts.push(p),
        }
    }
    anyhow::ensure!(!parts.is_empty(), "{path:?}: empty image path");
    Ok(parts.join("/"))
}

struct Counted<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

/// Hashes and counts what passes through.
struct Hashing<W> {
    inner: W,
    hash: Sha256,
    len: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The image config fields a container runtime reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    pub user: Option<String>,
    pub env: Vec<String>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub working_dir: Option<String>,
    pub labels: BTreeMap<String, String>,
}

/// Layers (bottom first) and a config, for linux/amd64.
#[derive(Clone, Debug, Default)]
pub struct Image {
    pub layers: Vec<Layer>,
    pub config: Config,
}

impl Image {
    /// The entry at `path` in the topmost layer that has it.
    pub fn entry(&self, path: &str) -> Option<&Entry> {
        self.layers.iter().rev().find_map(|l| l.get(path))
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Descriptor {
    #[serde(rename = "mediaType")]
    pub media_type: String,
    pub digest: String,
    pub size: u64,
}

/// An image in a [`Store`].
#[derive(Clone, Debug)]
pub struct Written {
    pub manifest: Descriptor,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
}

impl Written {
    /// `sha256:...` of the manifest: what a registry serves the image by.
    pub fn digest(&self) -> &str {
        &self.manifest.digest
    }

    /// Bytes of the config and every layer.
    pub fn size(&self) -> u64 {
        self.config.size + self.layers.iter().map(|l| l.size).sum::<u64>()
    }
}

/// A content-addressed blob store: `<root>/blobs/sha256/<hex>`, plus `<root>/layers/<key>`
/// naming the blob a layer's inputs gave. Writes go through a temporary file and a rename,
/// so processes sharing a store never see half a blob.
#[derive(Clone, Debug)]
pub struct Store {
    root: PathBuf,
}

static TEMP: AtomicU64 = AtomicU64::new(0);

impl Store {
    /// Opens (creates) the store, removing what writers that died a day ago left in `tmp`.
    pub fn open(root: &Path) -> anyhow::Result<Store> {
        for dir in ["blobs/sha256", "layers", "tmp"] {
            std::fs::create_dir_all(root.join(dir))
                .with_context(|| format!("creating {}", root.join(dir).display()))?;
        }
        let day = std::time::Duration::from_secs(24 * 3600);
        for entry in std::fs::read_dir(root.join("tmp"))?.flatten() {
            let stale = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > day));
            if stale {
                let path = entry.path();
                let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
            }
        }
        Ok(Store {
            root: root.to_owned(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn blob_path(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
        self.root.join("blobs/sha256").join(hex)
    }

    /// A fresh path under `<root>/tmp` (same file system as the blobs, for the rename).
    pub fn temp_path(&self, what: &str) -> PathBuf {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        self.root.join("tmp").join(format!(
            "{what}-{}-{}-{nanos}",
            std::process::id(),
            TEMP.fetch_add(1, Ordering::Relaxed)
        ))
    }

    fn has(&self, d: &Descriptor) -> bool {
        std::fs::metadata(self.blob_path(&d.digest)).is_ok_and(|m| m.len() == d.size)
    }

    pub fn put_bytes(&self, media_type: &str, bytes: &[u8]) -> anyhow::Result<Descriptor> {
        let d = Descriptor {
            media_type: media_type.to_owned(),
            digest: format!("sha256:{}", hex::encode(Sha256::digest(bytes))),
            size: bytes.len() as u64,
        };
        if !self.has(&d) {
            let tmp = self.temp_path("blob");
            std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
            self.commit(&tmp, &d.digest)?;
        }
        Ok(d)
    }

    fn commit(&self, tmp: &Path, digest: &str) -> anyhow::Result<()> {
        let dest = self.blob_path(digest);
        std::fs::rename(tmp, &dest)
            .with_context(|| format!("moving {} to {}", tmp.display(), dest.display()))
    }

    /// The layer's blob: from the cache when its inputs are unchanged, else written now.
    pub fn put_layer(&self, layer: &Layer) -> anyhow::Result<Descriptor> {
        let key = layer.key()?;
        let record = self.root.join("layers").join(&key);
        if let Ok(bytes) = std::fs::read(&record)
            && let Ok(d) = serde_json::from_slice::<Descriptor>(&bytes)
            && self.has(&d)
        {
            return Ok(d);
        }
        let tmp = self.temp_path("layer");
        let file = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        let out = Hashing {
            inner: BufWriter::with_capacity(1 << 20, file),
            hash: Sha256::new(),
            len: 0,
        };
        let written = layer.write_tar(out).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })?;
        let Hashing {
            inner, hash, len, ..
        } = written;
        // No fsync: the store is a cache, and a 100 MB layer would wait for the disk.
        inner
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("layer {}: writing {}", layer.name, tmp.display()))?;
        let d = Descriptor {
            media_type: LAYER_MEDIA_TYPE.to_owned(),
            digest: format!("sha256:{}", hex::encode(hash.finalize())),
            size: len,
        };
        self.commit(&tmp, &d.digest)?;
        let tmp = self.temp_path("record");
        std::fs::write(&tmp, serde_json::to_vec(&d)?)?;
        std::fs::rename(&tmp, &record)?;
        Ok(d)
    }

    /// Writes (or finds) every blob of `image`.
    pub fn put_image(&self, image: &Image) -> anyhow::Result<Written> {
        let layers = image
            .layers
            .iter()
            .map(|l| self.put_layer(l))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let config = config_json(image, &layers);
        let config = self.put_bytes(CONFIG_MEDIA_TYPE, &serde_json::to_vec(&config)?)?;
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": config,
            "layers": layers,
        });
        let manifest = self.put_bytes(MANIFEST_MEDIA_TYPE, &serde_json::to_vec(&manifest)?)?;
        Ok(Written {
            manifest,
            config,
            layers,
        })
    }

    /// Lays `image` out as an OCI image layout in `dir` (created; must not exist), its blobs
    /// hard links into the store.
    pub fn layout(&self, image: &Written, dir: &Path) -> anyhow::Result<()> {
        let blobs = dir.join("blobs/sha256");
        std::fs::create_dir_all(&blobs).with_context(|| format!("creating {}", blobs.display()))?;
        std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
        let index = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": INDEX_MEDIA_TYPE,
            "manifests": [image.manifest],
        });
        std::fs::write(dir.join("index.json"), serde_json::to_vec(&index)?)?;
        for d in std::iter::once(&image.manifest)
            .chain(std::iter::once(&image.config))
            .chain(&image.layers)
        {
            let src = self.blob_path(&d.digest);
            let dest = self.blob_path_in(dir, &d.digest);
            if dest.exists() {
                continue;
            }
            std::fs::hard_link(&src, &dest)
                .or_else(|_| std::os::unix::fs::symlink(&src, &dest))
                .with_context(|| format!("linking {} to {}", dest.display(), src.display()))?;
        }
        Ok(())
    }

    fn blob_path_in(&self, dir: &Path, digest: &str) -> PathBuf {
        dir.join("blobs/sha256")
            .join(digest.strip_prefix("sha256:").unwrap_or(digest))
    }
}

/// The OCI image config: no creation time, so it depends on the layers and fields only.
fn config_json(image: &Image, layers: &[Descriptor]) -> serde_json::Value {
    let c = &image.config;
    let mut config = serde_json::Map::new();
    if let Some(user) = &c.user {
        config.insert("User".into(), user.clone().into());
    }
    if !c.env.is_empty() {
        config.insert("Env".into(), c.env.clone().into());
    }
    if !c.entrypoint.is_empty() {
        config.insert("Entrypoint".into(), c.entrypoint.clone().into());
    }
    if !c.cmd.is_empty() {
        config.insert("Cmd".into(), c.cmd.clone().into());
    }
    if let Some(dir) = &c.working_dir {
        config.insert("WorkingDir".into(), dir.clone().into());
    }
    if !c.labels.is_empty() {
        config.insert(
            "Labels".into(),
            serde_json::to_value(&c.labels).unwrap_or_default(),
        );
    }
    let history: Vec<serde_json::Value> = image
        .layers
        .iter()
        .map(|l| serde_json::json!({"created_by": format!("captf-testenv: {}", l.name)}))
        .collect();
    serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {
            "type": "layers",
            "diff_ids": layers.iter().map(|l| l.digest.clone()).collect::<Vec<_>>(),
        },
        "history": history,
    })
}

/// `crane`, optionally with its own Docker config folder (registry credentials).
#[derive(Clone, Debug)]
pub struct Crane {
    pub path: PathBuf,
    pub docker_config: Option<PathBuf>,
}

impl Crane {
    pub fn new(path: &Path) -> Crane {
        Crane {
            path: path.to_owned(),
            docker_config: None,
        }
    }

    /// Runs crane (plain HTTP allowed: the test registries have no TLS) and returns stdout.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<Vec<u8>> {
        let mut command = Command::new(&self.path);
        command.arg("--insecure").args(args).stdin(Stdio::null());
        if let Some(dir) = &self.docker_config {
            command.env("DOCKER_CONFIG", dir);
        }
        let out = command.output().with_context(|| {
            format!(
                "running {} (build it with `hack/build-tools.sh crane`)",
                self.path.display()
            )
        })?;
        anyhow::ensure!(
            out.status.success(),
            "crane {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(out.stdout)
    }

    /// Pushes the single image of the OCI layout `layout` as `reference` and returns the
    /// manifest digest the registry stored it under.
    pub fn push(&self, layout: &Path, reference: &str) -> anyhow::Result<String> {
        let layout_arg = layout.to_str().context("layout path is not UTF-8")?;
        let out = self
            .run(&["push", layout_arg, reference])
            .with_context(|| format!("pushing {reference}"))?;
        let out = String::from_utf8_lossy(&out);
        let digest = out
            .trim()
            .rsplit_once('@')
            .map(|(_, d)| d.to_owned())
            .with_context(|| format!("crane push {reference} printed no digest: {out:?}"))?;
        Ok(digest)
    }

    pub fn manifest(&self, reference: &str) -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::from_slice(
            &self.run(&["manifest", reference])?,
        )?)
    }

    pub fn config(&self, reference: &str) -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::from_slice(&self.run(&["config", reference])?)?)
    }

    /// Writes the image's flattened file system as a tar archive to `dest`.
    pub fn export(&self, reference: &str, dest: &Path) -> anyhow::Result<()> {
        let dest = dest.to_str().context("export path is not UTF-8")?;
        self.run(&["export", reference, dest])?;
        Ok(())
    }
}

/// Writes `image` into `store` and pushes it to `reference` through a temporary layout;
/// returns the manifest digest, checked against the one the registry reports.
pub fn push(
    store: &Store,
    crane: &Crane,
    image: &Image,
    reference: &str,
) -> anyhow::Result<Written> {
    let written = store
        .put_image(image)
        .with_context(|| format!("writing the image {reference}"))?;
    let dir = store.temp_path("layout");
    let result = store
        .layout(&written, &dir)
        .and_then(|()| crane.push(&dir, reference));
    let _ = std::fs::remove_dir_all(&dir);
    let digest = result?;
    anyhow::ensure!(
        digest == written.manifest.digest,
        "the registry stored {reference} as {digest}, but its manifest is {}",
        written.manifest.digest
    );
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(tar_bytes: &[u8]) -> Vec<(String, tar::EntryType, u32, u64, u64, String)> {
        let mut archive = tar::Archive::new(tar_bytes);
        archive
            .entries()
            .expect("entries")
            .map(|e| {
                let e = e.expect("entry");
                let h = e.header();
                let link = e
                    .link_name()
                    .ok()
                    .flatten()
                    .map(|l| l.display().to_string())
                    .unwrap_or_default();
                (
                    e.path().expect("path").display().to_string(),
                    h.entry_type(),
                    h.mode().expect("mode"),
                    h.uid().expect("uid"),
                    h.mtime().expect("mtime"),
                    link,
                )
            })
            .collect()
    }

    #[test]
    fn layers_are_sorted_with_parents_and_links_after_their_data() {
        let mut layer = Layer::new("t");
        layer
            .push(Entry::hard_link("/a/link", "/z/file"))
            .and_then(|l| l.push(Entry::file("/z/file", "x").mode(0o755).owner(7, 8)))
            .and_then(|l| l.push(Entry::symlink("b", "/z/file")))
            .and_then(|l| l.push(Entry::dir("tmp").mode(0o1777)))
            .expect("entries");
        let bytes = layer.write_tar(Vec::new()).expect("tar");
        let got = entries(&bytes);
        let names: Vec<&str> = got.iter().map(|e| e.0.as_str()).collect();
        // Directories end in `/`, as GNU tar writes them.
        assert_eq!(names, ["a/", "a/link", "b", "tmp/", "z/", "z/file"]);
        assert_eq!(
            got[1].1,
            tar::EntryType::Regular,
            "data goes to the first name"
        );
        assert_eq!((got[1].2, got[1].3), (0o755, 7));
        assert_eq!(got[5].1, tar::EntryType::Link);
        assert_eq!(got[5].5, "a/link");
        // The link carries its target's mode and owner: appliers chmod the shared inode to it.
        assert_eq!((got[5].2, got[5].3), (0o755, 7));
        assert_eq!(got[3].2, 0o1777);
        assert!(got.iter().all(|e| e.4 == 0), "mtime 0");
        assert_eq!(bytes, layer.write_tar(Vec::new()).expect("again"));
    }

    #[test]
    fn long_paths_and_bad_links_are_handled() {
        let long = format!("captf/providers/{}/file", "x".repeat(120));
        let mut layer = Layer::new("t");
        layer.push(Entry::file(&long, "y")).expect("entry");
        let got = entries(&layer.write_tar(Vec::new()).expect("tar"));
        assert_eq!(got.last().map(|e| e.0.clone()), Some(long));

        let mut bad = Layer::new("bad");
        bad.push(Entry::hard_link("a", "missing")).expect("entry");
        assert!(bad.write_tar(Vec::new()).is_err());
        assert!(Layer::new("x").push(Entry::file("../etc", "")).is_err());
    }

    #[test]
    fn the_store_reuses_layers_and_gives_stable_digests() {
        let dir = std::env::temp_dir().join(format!("captf-oci-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::open(&dir).expect("store");
        let host = dir.join("engine");
        std::fs::write(&host, vec![7u8; 3000]).expect("host file");
        let mut layer = Layer::new("engine");
        layer
            .push(Entry::host_file("captf/runtime", &host).mode(0o755))
            .expect("entry");
        let image = Image {
            layers: vec![layer],
            config: Config {
                user: Some("65532:65532".into()),
                ..Config::default()
            },
        };
        let first = store.put_image(&image).expect("first");
        let second = store.put_image(&image).expect("second");
        assert_eq!(first.digest(), second.digest());
        assert_eq!(first.layers[0].size % 512, 0);
        let blob = std::fs::read(store.blob_path(&first.layers[0].digest)).expect("blob");
        assert_eq!(
            first.layers[0].digest,
            format!("sha256:{}", hex::encode(Sha256::digest(&blob)))
        );
        let out = dir.join("layout");
        store.layout(&first, &out).expect("layout");
        let index: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("index.json")).expect("index"))
                .expect("json");
        assert_eq!(index["manifests"][0]["digest"], first.digest());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
