//! Module images as local folders.
//!
//! An image reference maps to `<images>/<registry>/<repository>/<tag>` (a digest reference
//! `repo@sha256:<hex>` maps to `<images>/<registry>/<repository>/sha256-<hex>`; no tag means
//! `latest`; a reference without a registry is under `docker.io`, and a Docker Hub name without
//! a namespace under `library/`). The folder holds `rootfs/`, whose top-level entries appear at
//! `/` in the container (each top-level directory as an overlay over the host's directory of the
//! same name, each top-level file bind-mounted), and an optional `config.json` with `env`,
//! `entrypoint`, `cmd`, `workingDir` and `labels`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Context;
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// `config.json` of an image folder.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageConfig {
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default)]
    pub entrypoint: Vec<String>,
    #[serde(default)]
    pub cmd: Vec<String>,
    #[serde(default)]
    pub working_dir: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// A resolved image.
#[derive(Clone, Debug)]
pub struct Image {
    pub rootfs: PathBuf,
    pub config: ImageConfig,
    /// `<registry>/<repository>@sha256:<hex>`, the hex being a digest of the folder's content.
    pub image_id: String,
}

/// Splits a reference into (registry, repository, tag-or-digest folder name).
pub fn parse_reference(reference: &str) -> anyhow::Result<(String, String, String)> {
    anyhow::ensure!(
        !reference.is_empty() && !reference.contains(char::is_whitespace),
        "invalid image reference {reference:?}"
    );
    let (name, version) = if let Some((name, digest)) = reference.split_once('@') {
        (name, digest.replace(':', "-"))
    } else {
        let last_slash = reference.rfind('/').map_or(0, |i| i + 1);
        match reference[last_slash..].rfind(':') {
            Some(i) => (
                &reference[..last_slash + i],
                reference[last_slash + i + 1..].to_owned(),
            ),
            None => (reference, "latest".to_owned()),
        }
    };
    let (registry, repository) = match name.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (first.to_owned(), rest.to_owned())
        }
        Some(_) => ("docker.io".to_owned(), name.to_owned()),
        None => ("docker.io".to_owned(), format!("library/{name}")),
    };
    anyhow::ensure!(
        !repository
            .split('/')
            .any(|p| p.is_empty() || p == ".." || p == ".")
            && !version.contains('/')
            && version != "..",
        "invalid image reference {reference:?}"
    );
    Ok((registry, repository, version))
}

/// Resolves references to folders and caches their digests.
#[derive(Debug)]
pub struct Images {
    root: PathBuf,
    digests: Mutex<BTreeMap<PathBuf, (Fingerprint, String)>>,
}

type Fingerprint = Vec<(PathBuf, u64, i64)>;

impl Images {
    pub fn new(root: PathBuf) -> Self {
        Images {
            root,
            digests: Mutex::new(BTreeMap::new()),
        }
    }

    /// The folder a reference maps to (whether or not it exists). A registry's port is
    /// written `host_port`: the folder becomes an overlay mount's lower directory, in which a
    /// colon separates layers.
    pub fn folder(&self, reference: &str) -> anyhow::Result<PathBuf> {
        let (registry, repository, version) = parse_reference(reference)?;
        Ok(self
            .root
            .join(registry.replace(':', "_"))
            .join(repository)
            .join(version))
    }

    /// Resolves a reference; an error means "image pull failed" and says why.
    pub fn resolve(&self, reference: &str) -> anyhow::Result<Image> {
        let folder = self.folder(reference)?;
        let rootfs = folder.join("rootfs");
        anyhow::ensure!(
            rootfs.is_dir(),
            "image {reference} not found: no folder {} (see docs/development.md, \"Images on the process node\")",
            rootfs.display()
        );
        let config = match std::fs::read(folder.join("config.json")) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .with_context(|| format!("{}/config.json", folder.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => ImageConfig::default(),
            Err(e) => return Err(e.into()),
        };
        let digest = self.digest(&folder)?;
        let (registry, repository, _) = parse_reference(reference)?;
        Ok(Image {
            rootfs,
            config,
            image_id: format!("{registry}/{repository}@sha256:{digest}"),
        })
    }

    fn digest(&self, folder: &Path) -> anyhow::Result<String> {
        let mut files = Vec::new();
        walk(folder, folder, &mut files)?;
        let fingerprint: Fingerprint = files
            .iter()
            .map(|(rel, meta)| (rel.clone(), meta.0, meta.1))
            .collect();
        if let Ok(cache) = self.digests.lock()
            && let Some((fp, digest)) = cache.get(folder)
            && *fp == fingerprint
        {
            return Ok(digest.clone());
        }
        let mut hasher = Sha256::new();
        for (rel, _) in &files {
            let path = folder.join(rel);
            hasher.update(rel.to_string_lossy().as_bytes());
            hasher.update([0]);
            let meta = std::fs::symlink_metadata(&path)?;
            if meta.file_type().is_symlink() {
                hasher.update(std::fs::read_link(&path)?.to_string_lossy().as_bytes());
            } else if meta.is_file() {
                use std::os::unix::fs::PermissionsExt;
                hasher.update(meta.permissions().mode().to_le_bytes());
                let mut file = std::fs::File::open(&path)?;
                std::io::copy(&mut file, &mut hasher)?;
            }
            hasher.update([0]);
        }
        let digest = hex::encode(hasher.finalize());
        if let Ok(mut cache) = self.digests.lock() {
            cache.insert(folder.to_owned(), (fingerprint, digest.clone()));
        }
        Ok(digest)
    }
}

/// Every entry below `dir` with (size, mtime), sorted by relative path.
fn walk(base: &Path, dir: &Path, out: &mut Vec<(PathBuf, (u64, i64))>) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path)?;
        let rel = path.strip_prefix(base)?.to_owned();
        out.push((rel, (meta.size(), meta.mtime())));
        if meta.is_dir() {
            walk(base, &path, out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::{Images, parse_reference};

    #[test]
    fn references_map_to_folders() {
        let cases = [
            (
                "captf.local/modules/noop-cluster:v1",
                ("captf.local", "modules/noop-cluster", "v1"),
            ),
            ("captf.local/captf", ("captf.local", "captf", "latest")),
            ("localhost:5000/a/b:1.2", ("localhost:5000", "a/b", "1.2")),
            ("alpine", ("docker.io", "library/alpine", "latest")),
            ("team/tool:3", ("docker.io", "team/tool", "3")),
            ("r.io/x@sha256:abcd", ("r.io", "x", "sha256-abcd")),
        ];
        for (reference, (registry, repository, version)) in cases {
            let got = parse_reference(reference).expect(reference);
            assert_eq!(
                got,
                (
                    registry.to_owned(),
                    repository.to_owned(),
                    version.to_owned()
                ),
                "{reference}"
            );
        }
        for bad in ["", "a b", "r.io/../x:1", "r.io/x:..", "r.io//x"] {
            assert!(parse_reference(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn folders_hold_no_colon() {
        let images = Images::new(PathBuf::from("/images"));
        let folder = images
            .folder("127.0.0.1:5000/modules/m@sha256:abcd")
            .expect("folder");
        assert_eq!(
            folder,
            PathBuf::from("/images/127.0.0.1_5000/modules/m/sha256-abcd")
        );
    }
}
