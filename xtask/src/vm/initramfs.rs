//! The guest's initramfs: busybox (static), the kernel modules the tests
//! need (preloaded in dependency order: nothing loads modules on demand in
//! the guest), and an `/init` that mounts the host's root over 9p
//! (read-only, at the same paths) and runs the guest script inside it.
//!
//! Module dependencies are resolved on the host by kmod (`modprobe -d
//! <unpacked kernel> -S <version> --show-depends`); compressed modules
//! (`.ko.xz`, `.ko.zst`) are unpacked on the host, so busybox's `insmod`
//! loads plain `.ko` files.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context, Result};

use super::kernel::Kernel;

/// What the guest needs: 9p for the host root, then what the tests use.
/// A module built into a kernel is skipped; one neither built in nor
/// shipped fails the build if it is `required`.
const MODULES: &[(&str, bool)] = &[
    ("virtio_pci", true),
    ("9pnet_virtio", true),
    ("9p", true),
    ("af_packet", true),
    ("veth", true),
    // The userspace emulator's testbed bridges each domain's hosts.
    ("bridge", true),
    // The collective engine's default congestion control across domains.
    ("tcp_bbr", false),
    ("sch_htb", true),
    ("sch_tbf", true),
    ("sch_netem", true),
    ("sch_fq", true),
    ("sch_fq_codel", true),
    ("sch_prio", true),
    ("sch_ingress", true),
    ("cls_bpf", true),
    ("act_bpf", false),
    ("ifb", false),
    ("sch_cake", false),
    // kTLS for the collective library's TLS links (`ktls::` tests), and the
    // AES-GCM the kernel then allocates (nothing autoloads it in the guest).
    ("tls", false),
    ("ctr", false),
    ("ghash_generic", false),
    ("gcm", false),
    ("aesni_intel", false),
    ("ghash_clmulni_intel", false),
    // Soft-RoCE for the RDMA transport's tests (`rdma::`): without
    // crc32_generic `rdma link add` fails with ENOENT; 7.x splits out
    // ib_uverbs_support. Dependencies (ib_core, …) come with --show-depends.
    ("crc32_generic", false),
    ("crc32_pclmul", false),
    ("ib_core", false),
    ("ib_uverbs_support", false),
    ("ib_uverbs", false),
    ("rdma_ucm", false),
    ("rdma_rxe", false),
];

/// The busybox applets `/init` uses before the host root is mounted.
const APPLETS: &[&str] = &[
    "sh", "mount", "mkdir", "insmod", "chroot", "poweroff", "echo", "cat", "sleep",
];

/// Builds (or reuses) the initramfs of `kernel`; returns its path.
pub fn build(kernel: &Kernel) -> Result<PathBuf> {
    let out = kernel
        .root
        .parent()
        .unwrap_or(&kernel.root)
        .join("initramfs.cpio");
    let stage = kernel
        .root
        .parent()
        .unwrap_or(&kernel.root)
        .join("initramfs");
    let _ = fs::remove_dir_all(&stage);
    for dir in ["bin", "proc", "sys", "dev", "host", "modules"] {
        fs::create_dir_all(stage.join(dir))?;
    }
    let busybox = Path::new("/bin/busybox");
    if !is_static(busybox) {
        bail!(
            "{} is not the static busybox (apt package busybox-static; run `cargo xtask setup`)",
            busybox.display()
        );
    }
    fs::copy(busybox, stage.join("bin/busybox")).context("copying busybox")?;
    for applet in APPLETS {
        std::os::unix::fs::symlink("busybox", stage.join("bin").join(applet))?;
    }
    let order = stage_modules(kernel, &stage.join("modules"))?;
    fs::write(stage.join("modules.order"), order.join("\n") + "\n")?;
    let init = stage.join("init");
    fs::write(&init, INIT)?;
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&init, fs::Permissions::from_mode(0o755))?;
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cd '{}' && find . | cpio -o -H newc --quiet > '{}'",
            stage.display(),
            out.display()
        ))
        .status()
        .context("running cpio (apt package cpio)")?;
    if !status.success() {
        bail!("packing {} with cpio failed: {status}", out.display());
    }
    Ok(out)
}

fn is_static(path: &Path) -> bool {
    Command::new("file")
        .arg("-L")
        .arg(path)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("statically linked"))
        .unwrap_or_else(|_| path.exists())
}

/// Copies (and unpacks) every needed module into `dir`; returns the file
/// names in load order.
fn stage_modules(kernel: &Kernel, dir: &Path) -> Result<Vec<String>> {
    let builtin =
        fs::read_to_string(kernel.modules_dir().join("modules.builtin")).unwrap_or_default();
    let mut order: Vec<String> = Vec::new();
    for (module, required) in MODULES {
        if is_builtin(&builtin, module) {
            continue;
        }
        let out = Command::new("modprobe")
            .arg("-d")
            .arg(&kernel.root)
            .args(["-S", &kernel.version, "--show-depends", module])
            .output()
            .context("running modprobe (apt package kmod)")?;
        if !out.status.success() {
            // 7.x packages ship no modules.builtin text: a module they do
            // not ship is taken as built in (a missing 9p fails the boot
            // with "mounting the host root over 9p failed").
            if builtin.is_empty() {
                eprintln!("vm: kernel {}: module {module} not shipped, taken as built in (no modules.builtin)", kernel.version);
                continue;
            }
            if *required {
                bail!(
                    "kernel {}: module {module} is neither built in nor shipped: {}",
                    kernel.version,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            eprintln!(
                "vm: kernel {}: optional module {module} not shipped",
                kernel.version
            );
            continue;
        }
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Some(path) = line.strip_prefix("insmod ") else {
                continue; // `builtin X`
            };
            let path = Path::new(path.split_whitespace().next().unwrap_or_default());
            let name = unpacked_name(path);
            if !order.contains(&name) {
                unpack(path, &dir.join(&name))?;
                order.push(name);
            }
        }
    }
    Ok(order)
}

fn is_builtin(builtin: &str, module: &str) -> bool {
    builtin.lines().any(|l| {
        Path::new(l)
            .file_name()
            .and_then(|f| f.to_str())
            .is_some_and(|f| {
                f.trim_end_matches(".ko").replace('-', "_") == module.replace('-', "_")
            })
    })
}

fn unpacked_name(path: &Path) -> String {
    let name = path
        .file_name()
        .and_then(|f| f.to_str())
        .unwrap_or("module.ko");
    name.trim_end_matches(".xz")
        .trim_end_matches(".zst")
        .trim_end_matches(".gz")
        .to_string()
}

fn unpack(from: &Path, to: &Path) -> Result<()> {
    let tool = match from.extension().and_then(|e| e.to_str()) {
        Some("xz") => Some("xz"),
        Some("zst") => Some("zstd"),
        Some("gz") => Some("gzip"),
        _ => None,
    };
    let Some(tool) = tool else {
        fs::copy(from, to).with_context(|| format!("copying {}", from.display()))?;
        return Ok(());
    };
    let out = Command::new(tool)
        .arg("-dc")
        .arg(from)
        .output()
        .with_context(|| format!("running {tool} (apt package {tool})"))?;
    if !out.status.success() {
        bail!("{tool} -dc {} failed", from.display());
    }
    fs::write(to, out.stdout).with_context(|| format!("writing {}", to.display()))
}

/// The guest's `/init`. The kernel hands `cw_script=`, `cw_out=` and `cw_root=` (the
/// checkout) from
/// its command line to init as environment variables. The last line on the
/// console is `CW-VM-EXIT <status>`, which the host reads.
const INIT: &str = r#"#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
while read m; do
  insmod "/modules/$m" 2>/dev/null || echo "vm-init: insmod $m failed"
done < /modules.order
status=100
if mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose hostroot /host; then
  mount -t proc proc /host/proc
  mount -t sysfs sys /host/sys
  mount -t devtmpfs dev /host/dev
  # A view of the host root without the guest's own mounts, so that a
  # checkout under /tmp, /run or /var/tmp (hidden by their tmpfs below) is
  # bound back at its own path.
  mkdir -p /hostview
  mount -o bind /host /hostview
  mkdir -p /host/dev/shm /host/dev/pts
  mount -t tmpfs shm /host/dev/shm
  mount -t devpts pts /host/dev/pts
  mount -t tmpfs tmp /host/tmp
  mount -t tmpfs run /host/run
  mount -t tmpfs vartmp /host/var/tmp
  mount -t bpf bpf /host/sys/fs/bpf
  case "$cw_root" in
    /tmp/*|/run/*|/var/tmp/*)
      mkdir -p "/host$cw_root"
      mount -o bind "/hostview$cw_root" "/host$cw_root" ;;
  esac
  mount -t 9p -o trans=virtio,version=9p2000.L,rw,msize=262144 vmout "/host$cw_out"
  chroot /host /bin/sh "$cw_script"
  status=$?
else
  echo "vm-init: mounting the host root over 9p failed"
fi
echo "CW-VM-EXIT $status"
poweroff -f
sleep 5
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_modules_are_matched_by_name_with_dashes_or_underscores() {
        let builtin = "kernel/net/packet/af_packet.ko\nkernel/drivers/virtio/virtio_pci.ko\n";
        assert!(is_builtin(builtin, "af_packet"));
        assert!(is_builtin(builtin, "virtio_pci"));
        assert!(!is_builtin(builtin, "virtio_pci_modern_dev"));
        assert!(!is_builtin(builtin, "veth"));
    }

    #[test]
    fn compressed_modules_are_staged_under_their_plain_name() {
        assert_eq!(unpacked_name(Path::new("/m/kernel/9p.ko.xz")), "9p.ko");
        assert_eq!(unpacked_name(Path::new("/m/kernel/veth.ko.zst")), "veth.ko");
        assert_eq!(unpacked_name(Path::new("/m/kernel/veth.ko")), "veth.ko");
    }
}
