//! Tar unpacking: `captf_lint::unpack::oci_layout`, or with a `role` line all of `captf lint
//! image oci:<dir>` (`captf_lint::image::lint_image`, which unpacks and runs the image checks on
//! what it unpacked), on an OCI layout the target writes around the input's layers.
//!
//! Invariant: nothing outside the unpack root changes. The target points the temporary folder
//! (where `oci_layout` makes its root) at a sandbox beside sentinel folders and files, and
//! compares them after every input; the root itself must be gone afterwards.
//!
//! The input is a script, one directive a line (a path has no spaces; `\n` in content is a
//! newline; a path or link target longer than 100 bytes is cut):
//!
//! ```text
//! layer [gzip|tar|<media type>]    a new layer (the first is implicit, gzip)
//! dir PATH [MODE]                  a folder (MODE octal)
//! file PATH [MODE [CONTENT]]       a regular file
//! link PATH TARGET                 a symbolic link
//! hard PATH TARGET                 a hard link
//! fifo PATH                        a FIFO
//! owner UID GID                    the owner of the entries that follow
//! config JSON                      the image config's `config` section
//! role cluster|machine|machinepool lint the image for that role (without: only unpack)
//! ```
//!
//! Or, after a first line `%tar` or `%gzip`, the rest is one layer's bytes as they are.

#![no_main]

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use captf_fuzz::{first_line, gzip};
use captf_lint::image::{ImageOptions, lint_image};
use captf_lint::unpack::oci_layout;
use captf_lint::{Options, Role};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The sandbox: `top/up/` and `top/base/outside/` are sentinels; `top/base` is the temporary
/// folder, holding the layout and the unpack roots.
struct Sandbox {
    top: PathBuf,
    base: PathBuf,
    before: Snapshot,
}

type Snapshot = BTreeMap<PathBuf, (String, u32, Vec<u8>)>;

fn sandbox() -> &'static Sandbox {
    static SANDBOX: OnceLock<Sandbox> = OnceLock::new();
    SANDBOX.get_or_init(|| {
        let top = tempfile::Builder::new()
            .prefix("captf-fuzz-tar-")
            .tempdir_in(std::env::temp_dir())
            .expect("a temporary folder")
            .keep();
        let base = top.join("base");
        for (dir, mode) in [
            (top.join("up"), 0o750),
            (base.clone(), 0o755),
            (base.join("outside"), 0o750),
            (base.join("outside/d"), 0o750),
        ] {
            fs::create_dir_all(&dir).expect("sentinel folder");
            fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).expect("mode");
        }
        for file in [
            top.join("up/f"),
            base.join("outside/f"),
            base.join("outside/d/f"),
        ] {
            fs::write(&file, b"sentinel").expect("sentinel file");
            fs::set_permissions(&file, fs::Permissions::from_mode(0o640)).expect("mode");
        }
        tempfile::env::override_temp_dir(&base).expect("the temporary folder is ours");
        let before = snapshot(&top, &base.join("layout"));
        Sandbox { top, base, before }
    })
}

/// Every path under `dir` (links not followed) with its kind, mode and content, but what is
/// under `skip` (the layout, rewritten for every input).
fn snapshot(dir: &Path, skip: &Path) -> Snapshot {
    let mut out = Snapshot::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path == skip {
                continue;
            }
            let Ok(md) = fs::symlink_metadata(&path) else {
                continue;
            };
            let kind = md.file_type();
            let (what, content) = if kind.is_dir() {
                pending.push(path.clone());
                ("dir", Vec::new())
            } else if kind.is_symlink() {
                let target = fs::read_link(&path).unwrap_or_default();
                ("link", target.into_os_string().into_encoded_bytes())
            } else {
                let mut content = Vec::new();
                let _ = fs::File::open(&path).and_then(|mut f| f.read_to_end(&mut content));
                ("file", content)
            };
            let relative = path.strip_prefix(dir).unwrap_or(&path).to_path_buf();
            out.insert(relative, (what.to_owned(), md.mode() & 0o7777, content));
        }
    }
    out
}

struct Layer {
    media_type: String,
    gzip: bool,
    tar: Vec<u8>,
    raw: bool,
}

impl Layer {
    fn new(kind: &str) -> Layer {
        let (media_type, gzip) = match kind {
            "" | "gzip" => (
                "application/vnd.oci.image.layer.v1.tar+gzip".to_owned(),
                true,
            ),
            "tar" => ("application/vnd.oci.image.layer.v1.tar".to_owned(), false),
            other => (other.to_owned(), false),
        };
        Layer {
            media_type,
            gzip,
            tar: Vec::new(),
            raw: false,
        }
    }

    fn bytes(mut self) -> Vec<u8> {
        if !self.raw {
            self.tar.extend_from_slice(&[0; 1024]);
        }
        if self.gzip && !self.raw {
            gzip(&self.tar)
        } else {
            self.tar
        }
    }
}

/// One tar header and its content, the path and link target written as they are.
fn entry(
    layer: &mut Layer,
    kind: tar::EntryType,
    path: &str,
    link: &str,
    mode: u32,
    owner: (u64, u64),
    content: &[u8],
) {
    let mut header = tar::Header::new_gnu();
    {
        let old = header.as_old_mut();
        let n = path.len().min(100);
        old.name[..n].copy_from_slice(&path.as_bytes()[..n]);
        let n = link.len().min(100);
        old.linkname[..n].copy_from_slice(&link.as_bytes()[..n]);
    }
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_uid(owner.0);
    header.set_gid(owner.1);
    header.set_mtime(0);
    header.set_size(content.len() as u64);
    header.set_cksum();
    layer.tar.extend_from_slice(header.as_bytes());
    layer.tar.extend_from_slice(content);
    let pad = (512 - content.len() % 512) % 512;
    layer.tar.extend(std::iter::repeat_n(0, pad));
}

/// The layers, the image config's `config` section and the role a script lints for (none:
/// unpacking only).
fn script(data: &[u8]) -> (Vec<Layer>, Value, Option<Role>) {
    let (first, rest) = first_line(data);
    if first == b"%tar" || first == b"%gzip" {
        let mut layer = Layer::new(if first == b"%tar" { "tar" } else { "gzip" });
        layer.tar = rest.to_vec();
        layer.raw = true;
        return (vec![layer], json!({}), None);
    }
    let text = String::from_utf8_lossy(data);
    let mut layers = vec![Layer::new("gzip")];
    let mut config = json!({});
    let mut role = None;
    let mut owner = (0, 0);
    for line in text.lines() {
        let mut words = line.splitn(4, ' ');
        let (verb, a, b, c) = (
            words.next().unwrap_or_default(),
            words.next().unwrap_or_default(),
            words.next().unwrap_or_default(),
            words.next().unwrap_or_default(),
        );
        let mode = |m: &str, default: u32| u32::from_str_radix(m, 8).unwrap_or(default);
        let Some(layer) = layers.last_mut() else {
            break;
        };
        match verb {
            "layer" => layers.push(Layer::new(a)),
            "dir" => entry(
                layer,
                tar::EntryType::Directory,
                a,
                "",
                mode(b, 0o755),
                owner,
                b"",
            ),
            "file" => {
                let content = c.replace("\\n", "\n");
                let kind = tar::EntryType::Regular;
                entry(
                    layer,
                    kind,
                    a,
                    "",
                    mode(b, 0o644),
                    owner,
                    content.as_bytes(),
                );
            }
            "link" => entry(layer, tar::EntryType::Symlink, a, b, 0o777, owner, b""),
            "hard" => entry(layer, tar::EntryType::Link, a, b, 0o644, owner, b""),
            "fifo" => entry(layer, tar::EntryType::Fifo, a, "", 0o644, owner, b""),
            "owner" => owner = (a.parse().unwrap_or(0), b.parse().unwrap_or(0)),
            "config" => {
                let json = line.strip_prefix("config ").unwrap_or_default();
                config = serde_json::from_str(json).unwrap_or(config);
            }
            "role" => role = a.parse().ok().or(Some(Role::Machine)),
            _ => {}
        }
    }
    (layers, config, role)
}

/// Writes a blob; its descriptor.
fn blob(layout: &Path, media_type: &str, body: &[u8]) -> Value {
    let hex = hex::encode(Sha256::digest(body));
    fs::write(layout.join("blobs/sha256").join(&hex), body).expect("blob");
    json!({"mediaType": media_type, "digest": format!("sha256:{hex}"), "size": body.len()})
}

fuzz_target!(|data: &[u8]| {
    let sandbox = sandbox();
    let (layers, config, role) = script(data);
    let layout = sandbox.base.join("layout");
    let _ = fs::remove_dir_all(&layout);
    fs::create_dir_all(layout.join("blobs/sha256")).expect("layout");
    fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .expect("layout");
    let layers: Vec<Value> = layers
        .into_iter()
        .map(|l| {
            let media_type = l.media_type.clone();
            blob(&layout, &media_type, &l.bytes())
        })
        .collect();
    let config = blob(
        &layout,
        "application/vnd.oci.image.config.v1+json",
        json!({"os": "linux", "architecture": "amd64", "config": config})
            .to_string()
            .as_bytes(),
    );
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config,
        "layers": layers,
    });
    let manifest = blob(
        &layout,
        "application/vnd.oci.image.manifest.v1+json",
        manifest.to_string().as_bytes(),
    );
    let index = json!({"schemaVersion": 2, "manifests": [manifest]});
    fs::write(layout.join("index.json"), index.to_string()).expect("index.json");

    match role {
        // The whole of `captf lint image`.
        Some(role) => {
            let opts = ImageOptions {
                module: Options {
                    role: Some(role),
                    ..Options::default()
                },
                platform: "linux/amd64".to_owned(),
            };
            let report = lint_image(&format!("oci:{}", layout.display()), &opts, false);
            let _ = (
                report.to_text(),
                report.to_json(),
                report.exit_code(&opts.module),
            );
        }
        // Only the unpacking, several times faster.
        None => {
            if let Ok(unpacked) = oci_layout(&layout, "linux/amd64", false) {
                let _ = (unpacked.root(), unpacked.owners().len(), &unpacked.config);
            }
        }
    }

    let after = snapshot(&sandbox.top, &layout);
    if after != sandbox.before {
        let changed: Vec<&PathBuf> = after
            .keys()
            .chain(sandbox.before.keys())
            .filter(|p| after.get(*p) != sandbox.before.get(*p))
            .collect();
        panic!("unpacking changed what is outside its root, or left its root behind: {changed:?}");
    }
});
