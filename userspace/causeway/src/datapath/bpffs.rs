//! Making sure the pin root is on a BPF filesystem, mounting one if needed.

use std::path::Path;

use nix::{
    mount::{mount, MsFlags},
    sys::statfs::{statfs, BPF_FS_MAGIC},
};

use super::DatapathError;

/// Where the kernel's bpffs is conventionally mounted.
pub const SYS_BPFFS: &str = "/sys/fs/bpf";

/// Whether `path` lies on a bpffs.
pub fn is_bpffs(path: &Path) -> bool {
    statfs(path).is_ok_and(|s| s.filesystem_type() == BPF_FS_MAGIC)
}

/// Makes `root` an existing directory on a bpffs: mounts the bpffs at
/// `/sys/fs/bpf` when `root` is below it and nothing is mounted there, or
/// at `root` itself when `root` is elsewhere and not on a bpffs.
pub fn ensure(root: &Path) -> Result<(), DatapathError> {
    let sys = Path::new(SYS_BPFFS);
    if root.starts_with(sys) && !is_bpffs(sys) {
        mount_bpffs(sys)?;
    }
    std::fs::create_dir_all(root)
        .map_err(|source| DatapathError::io("create the pin directory", root, source))?;
    if !is_bpffs(root) {
        mount_bpffs(root)?;
    }
    Ok(())
}

fn mount_bpffs(path: &Path) -> Result<(), DatapathError> {
    mount(
        Some("bpf"),
        path,
        Some("bpf"),
        MsFlags::empty(),
        None::<&str>,
    )
    .map_err(|errno| DatapathError::Bpffs {
        path: path.to_path_buf(),
        reason: format!("mount -t bpf failed: {errno} (mounting needs CAP_SYS_ADMIN)"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tmp_is_not_bpffs() {
        assert!(!is_bpffs(Path::new("/tmp")));
        assert!(!is_bpffs(Path::new("/nonexistent/causeway")));
    }
}
