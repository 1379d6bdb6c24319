//! The image user (`config.User` against the image's /etc/passwd and
//! /etc/group) and what it may read and run.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use crate::report::{Finding, Severity};
use crate::rules::{IMAGE_MODULE_READABLE, IMAGE_USER_ROOT, IMAGE_USER_UNRESOLVED};

use super::paths::{Resolved, resolve, walk};
use super::{MODULE, PROVIDERS, image_finding};
use crate::unpack::Owners;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct User {
    uid: u32,
    gids: BTreeSet<u32>,
}

/// The fsGroup the Job's pod runs with (supplementary group of the runner).
const FS_GROUP: u32 = 65532;

fn read_db(root: &Path, path: &str) -> Vec<Vec<String>> {
    let text = match resolve(root, path) {
        Resolved::Found(p, _) => fs::read_to_string(p).unwrap_or_default(),
        _ => String::new(),
    };
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| l.split(':').map(str::to_owned).collect())
        .collect()
}

/// Resolves `config.User`. `Ok(None)` = root; `Err(name)` = a name that is
/// not in the image's /etc/passwd (or /etc/group).
fn resolve_user(root: &Path, spec: Option<&str>) -> Result<Option<User>, String> {
    let spec = spec.unwrap_or("").trim();
    if spec.is_empty() {
        return Ok(None);
    }
    let (user, group) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let passwd = read_db(root, "/etc/passwd");
    let groups = read_db(root, "/etc/group");
    let (uid, primary, name) = match user.parse::<u32>() {
        Ok(uid) => {
            let entry = passwd
                .iter()
                .find(|e| e.get(2).and_then(|s| s.parse().ok()) == Some(uid));
            (
                uid,
                entry.and_then(|e| e.get(3)?.parse().ok()).unwrap_or(uid),
                entry.and_then(|e| e.first().cloned()),
            )
        }
        Err(_) => {
            let entry = passwd
                .iter()
                .find(|e| e.first().map(String::as_str) == Some(user))
                .ok_or_else(|| user.to_owned())?;
            (
                entry
                    .get(2)
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| user.to_owned())?,
                entry.get(3).and_then(|s| s.parse().ok()).unwrap_or(0),
                Some(user.to_owned()),
            )
        }
    };
    if uid == 0 {
        return Ok(None);
    }
    let mut gids = BTreeSet::from([FS_GROUP]);
    match group {
        Some(g) => match g.parse::<u32>() {
            Ok(gid) => {
                gids.insert(gid);
            }
            Err(_) => {
                let gid = groups
                    .iter()
                    .find(|e| e.first().map(String::as_str) == Some(g))
                    .and_then(|e| e.get(2)?.parse().ok())
                    .ok_or_else(|| g.to_owned())?;
                gids.insert(gid);
            }
        },
        None => {
            gids.insert(primary);
        }
    }
    if let Some(name) = name {
        for e in &groups {
            if e.get(3)
                .is_some_and(|members| members.split(',').any(|m| m == name))
                && let Some(gid) = e.get(2).and_then(|s| s.parse().ok())
            {
                gids.insert(gid);
            }
        }
    }
    Ok(Some(User { uid, gids }))
}

#[derive(Clone, Copy)]
pub(super) enum Access {
    Read,
    Exec,
}

/// The owner (uid, gid) of the file at host path `path`: as the unpacker recorded it when it
/// could not give the files away (`owners`), else as the file system says.
#[cfg(unix)]
pub(super) fn owner(path: &Path, md: &fs::Metadata, owners: Option<&Owners>) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    owners
        .and_then(|o| o.get(path).copied())
        .unwrap_or((md.uid(), md.gid()))
}

#[cfg(not(unix))]
pub(super) fn owner(_: &Path, _: &fs::Metadata, _: Option<&Owners>) -> (u32, u32) {
    (0, 0)
}

#[cfg(unix)]
pub(super) fn allowed(
    md: &fs::Metadata,
    (uid, gid): (u32, u32),
    user: Option<&User>,
    access: Access,
) -> bool {
    use std::os::unix::fs::MetadataExt;
    let mode = md.mode();
    let bit = match access {
        Access::Read => 4,
        Access::Exec => 1,
    };
    let Some(user) = user else {
        // root: read always; exec when any x bit is set (dirs always traversable).
        return matches!(access, Access::Read) || md.is_dir() || mode & 0o111 != 0;
    };
    let shift = if uid == user.uid {
        6
    } else if user.gids.contains(&gid) {
        3
    } else {
        0
    };
    mode & (bit << shift) != 0
}

#[cfg(not(unix))]
pub(super) fn allowed(_: &fs::Metadata, _: (u32, u32), _: Option<&User>, _: Access) -> bool {
    true
}

/// User: resolves `config.User` (`spec`), with a finding when the image runs
/// as root or the user is not in the image (then an unknown non-root user is
/// assumed, uid `u32::MAX`).
pub(super) fn check_user(root: &Path, spec: Option<&str>, out: &mut Vec<Finding>) -> Option<User> {
    match resolve_user(root, spec) {
        Ok(None) => {
            out.push(image_finding(
                IMAGE_USER_ROOT,
                Severity::Warning,
                "",
                "the image runs as root; set USER to a non-root uid such as 65532".to_owned(),
            ));
            None
        }
        Ok(Some(u)) => Some(u),
        Err(name) => {
            out.push(image_finding(
                IMAGE_USER_UNRESOLVED,
                Severity::Warning,
                "",
                format!(
                    "user {name:?} is not in the image's /etc/passwd (or /etc/group); permission checks assume an unknown non-root user: use a numeric USER"
                ),
            ));
            Some(User {
                uid: u32::MAX,
                gids: BTreeSet::from([FS_GROUP]),
            })
        }
    }
}

/// Readability for a numeric non-root user.
pub(super) fn check_readable(
    root: &Path,
    user: Option<&User>,
    owners: Option<&Owners>,
    out: &mut Vec<Finding>,
) {
    if let Some(u) = user.filter(|u| u.uid != u32::MAX) {
        let mut unreadable = Vec::new();
        let mut paths = vec!["/captf".to_owned()];
        for top in [MODULE, PROVIDERS] {
            if matches!(resolve(root, top), Resolved::Found(..)) {
                paths.push(top.to_owned());
                walk(root, top, &mut paths);
            }
        }
        for p in &paths {
            let Resolved::Found(hp, _) = resolve(root, p) else {
                continue;
            };
            let Ok(md) = fs::metadata(&hp) else { continue };
            let by = owner(&hp, &md, owners);
            let ok = if md.is_dir() {
                allowed(&md, by, Some(u), Access::Exec)
                    && (p == "/captf" || allowed(&md, by, Some(u), Access::Read))
            } else {
                allowed(&md, by, Some(u), Access::Read)
            };
            if !ok {
                unreadable.push(p.clone());
            }
        }
        if !unreadable.is_empty() {
            let shown: Vec<_> = unreadable.iter().take(5).cloned().collect();
            out.push(image_finding(
                IMAGE_MODULE_READABLE,
                Severity::Warning,
                "",
                format!(
                    "uid {} cannot read/traverse {} path(s): {}{}; make module and mirror files world-readable (0644 files, 0755 dirs)",
                    u.uid,
                    unreadable.len(),
                    shown.join(", "),
                    if unreadable.len() > 5 { ", ..." } else { "" }
                ),
            ));
        }
    }
}
