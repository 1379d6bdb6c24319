//! `captf runner copy DST`: the init container copies the running executable into the shared
//! `runner` volume (distroless images have no `cp`).

use std::path::Path;

use crate::error::{Error, Result};

/// Copies the current executable to `dst` with mode 0755: written next to `dst` first, then
/// renamed, so the main container never sees half a binary.
pub fn copy_self(dst: &Path) -> Result<()> {
    let exe = std::env::current_exe().map_err(|e| Error::io("locating", "/proc/self/exe", e))?;
    copy_executable(&exe, dst)
}

/// Copies `src` to `dst` with mode 0755 (via a temporary file in `dst`'s folder).
pub fn copy_executable(src: &Path, dst: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let name = dst
        .file_name()
        .ok_or_else(|| Error::Usage(format!("{} names no file", dst.display())))?;
    let tmp = dst.with_file_name(format!(".{}.tmp", name.to_string_lossy()));
    std::fs::copy(src, &tmp).map_err(|e| Error::io("copying to", &tmp, e))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| Error::io("setting the mode of", &tmp, e))?;
    std::fs::rename(&tmp, dst).map_err(|e| Error::io("renaming to", dst, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn copies_with_mode_0755() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dst = tmp.path().join("runner");
        copy_self(&dst).expect("copied");
        let meta = std::fs::metadata(&dst).expect("meta");
        assert_eq!(meta.permissions().mode() & 0o777, 0o755);
        let exe = std::env::current_exe().expect("exe");
        assert_eq!(meta.len(), std::fs::metadata(exe).expect("meta").len());
        let err = copy_self(&tmp.path().join("missing/runner")).expect_err("no folder");
        assert_eq!(err.category(), "Io");
    }
}
