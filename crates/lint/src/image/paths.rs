//! Path resolution inside the unpacked image root, following symlinks the
//! way the container would.

use std::fs;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub(super) enum Resolved {
    /// Final host path (exists).
    Found(PathBuf, String),
    /// Some component does not exist (image path reached).
    Missing(String),
    /// Too many symlinks.
    Loop,
}

fn split(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::to_owned)
        .collect()
}

/// Resolves an absolute image path inside `root`, following symlinks the way
/// the container would (absolute link targets are relative to the root).
pub(super) fn resolve(root: &Path, image_path: &str) -> Resolved {
    let mut todo: Vec<String> = split(image_path);
    todo.reverse();
    let mut cur: Vec<String> = Vec::new();
    let mut hops = 0;
    while let Some(c) = todo.pop() {
        if c == ".." {
            cur.pop();
            continue;
        }
        cur.push(c);
        let host = root.join(cur.join("/"));
        match fs::symlink_metadata(&host) {
            Ok(md) if md.file_type().is_symlink() => {
                hops += 1;
                if hops > 40 {
                    return Resolved::Loop;
                }
                let Ok(target) = fs::read_link(&host) else {
                    return Resolved::Missing(format!("/{}", cur.join("/")));
                };
                let target = target.to_string_lossy().into_owned();
                cur.pop();
                if target.starts_with('/') {
                    cur.clear();
                }
                let mut parts = split(&target);
                parts.reverse();
                todo.extend(parts);
            }
            Ok(_) => {}
            Err(_) => return Resolved::Missing(format!("/{}", cur.join("/"))),
        }
    }
    let image = format!("/{}", cur.join("/"));
    Resolved::Found(root.join(cur.join("/")), image)
}

pub(super) fn host(root: &Path, image_path: &str) -> PathBuf {
    root.join(image_path.trim_start_matches('/'))
}

/// Lists every entry under `dir` (image path), not following symlinks.
pub(super) fn walk(root: &Path, dir: &str, out: &mut Vec<String>) {
    let Ok(entries) = fs::read_dir(host(root, dir)) else {
        return;
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in names {
        let path = format!("{}/{name}", dir.trim_end_matches('/'));
        let is_dir = fs::symlink_metadata(host(root, &path)).is_ok_and(|m| m.is_dir());
        out.push(path.clone());
        if is_dir {
            walk(root, &path, out);
        }
    }
}
