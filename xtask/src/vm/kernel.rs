//! Debian kernels for the VM stage: resolved through their meta-packages in
//! a private apt configuration (its own sources, lists and cache under
//! `target/vm/apt/<kernel>/`, so /etc is never touched), downloaded with
//! `apt-get download` (retried), unpacked once and cached under
//! `target/vm/kernels/<version>/`.
//!
//! Versioned package names change with every security update, so only the
//! meta-package names are written here:
//!
//! | `--kernel` | suite | meta-package |
//! |---|---|---|
//! | `6.1` | bookworm + bookworm-security | `linux-image-amd64` |
//! | `6.12` | bookworm-security | `linux-image-6.12-amd64` |
//! | `7.x` | trixie-backports | `linux-image-amd64` |
//!
//! Since 7.x Debian splits the image into `linux-binary-*` (vmlinuz) and
//! `linux-modules-*`: every `linux-{image,binary,modules}-<version>`
//! dependency of the meta-package is followed.

use std::{
    path::{Path, PathBuf},
    process::Command,
    thread,
    time::Duration,
};

use anyhow::{bail, Context, Result};

use crate::cmd;

/// One kernel line the VM stage tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum KernelLine {
    #[value(name = "6.1")]
    V6_1,
    #[value(name = "6.12")]
    V6_12,
    #[value(name = "7.x")]
    V7,
}

impl KernelLine {
    pub const ALL: [KernelLine; 3] = [Self::V6_1, Self::V6_12, Self::V7];

    pub fn name(self) -> &'static str {
        match self {
            Self::V6_1 => "6.1",
            Self::V6_12 => "6.12",
            Self::V7 => "7.x",
        }
    }

    /// The apt source lines (`suite` on its archive) of this kernel line.
    fn sources(self) -> &'static [(&'static str, &'static str)] {
        const DEBIAN: &str = "http://deb.debian.org/debian";
        const SECURITY: &str = "http://deb.debian.org/debian-security";
        match self {
            Self::V6_1 => &[(DEBIAN, "bookworm"), (SECURITY, "bookworm-security")],
            Self::V6_12 => &[(SECURITY, "bookworm-security")],
            Self::V7 => &[(DEBIAN, "trixie-backports")],
        }
    }

    pub fn meta_package(self) -> &'static str {
        match self {
            Self::V6_1 | Self::V7 => "linux-image-amd64",
            Self::V6_12 => "linux-image-6.12-amd64",
        }
    }
}

/// An unpacked kernel: its image and its module tree (normalised to
/// `<root>/lib/modules/<version>`, with `depmod` run).
#[derive(Clone, Debug)]
pub struct Kernel {
    pub line: KernelLine,
    /// `uname -r` of the kernel, e.g. `6.1.0-57-amd64`.
    pub version: String,
    pub vmlinuz: PathBuf,
    /// The unpacked packages' root (`lib/modules/<version>` below it).
    pub root: PathBuf,
}

impl Kernel {
    pub fn modules_dir(&self) -> PathBuf {
        self.root.join("lib/modules").join(&self.version)
    }
}

/// A private apt: `apt-get`/`apt-cache` with their own sources, state and cache.
struct PrivateApt {
    dir: PathBuf,
}

impl PrivateApt {
    fn create(vm_dir: &Path, line: KernelLine) -> Result<Self> {
        let dir = vm_dir.join("apt").join(line.name());
        for sub in ["state/lists/partial", "cache/archives/partial", "parts"] {
            std::fs::create_dir_all(dir.join(sub))
                .with_context(|| format!("creating {}", dir.join(sub).display()))?;
        }
        let keyring = "/usr/share/keyrings/debian-archive-keyring.gpg";
        let sources: String = line
            .sources()
            .iter()
            .map(|(uri, suite)| format!("deb [signed-by={keyring}] {uri} {suite} main\n"))
            .collect();
        write(&dir.join("sources.list"), &sources)?;
        write(&dir.join("status"), "")?;
        Ok(Self { dir })
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        let d = |sub: &str| self.dir.join(sub).display().to_string();
        for (key, value) in [
            ("Dir::Etc::SourceList", d("sources.list")),
            ("Dir::Etc::SourceParts", d("parts")),
            ("Dir::State", d("state")),
            ("Dir::State::status", d("status")),
            ("Dir::Cache", d("cache")),
            ("Debug::NoLocking", "1".into()),
            ("Acquire::Retries", "5".into()),
            // A download into a root-owned directory: no _apt sandbox.
            ("APT::Sandbox::User", "root".into()),
        ] {
            c.arg("-o").arg(format!("{key}={value}"));
        }
        c
    }

    fn update(&self) -> Result<()> {
        retry("apt-get update (private kernel sources)", || {
            quiet_run(self.command("apt-get").args(["update", "-q"]))
        })
    }

    /// The `Depends:` of `package` in this apt's lists.
    fn depends(&self, package: &str) -> Result<Vec<String>> {
        let out = self
            .command("apt-cache")
            .args(["depends", "--important", package])
            .output()
            .with_context(|| format!("running apt-cache depends {package}"))?;
        if !out.status.success() {
            bail!(
                "apt-cache depends {package}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(parse_depends(&String::from_utf8_lossy(&out.stdout)))
    }
}

/// The dependency names in `apt-cache depends` output.
fn parse_depends(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim_start().trim_start_matches('|');
            l.strip_prefix("Depends:")
                .or_else(|| l.strip_prefix("PreDepends:"))
        })
        .map(|name| name.trim().to_string())
        .filter(|name| !name.starts_with('<'))
        .collect()
}

/// Whether `dep` is a versioned piece of the kernel (`linux-image-6.1.0-57-amd64`,
/// `linux-binary-7.3.4+deb13-amd64`, `linux-modules-...`).
fn is_kernel_piece(dep: &str) -> bool {
    ["linux-image-", "linux-binary-", "linux-modules-"]
        .iter()
        .any(|p| {
            dep.strip_prefix(p)
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        })
}

/// Resolves, downloads (if not cached) and unpacks the kernel of `line`.
pub fn fetch(vm_dir: &Path, line: KernelLine) -> Result<Kernel> {
    let apt = PrivateApt::create(vm_dir, line)?;
    let meta = line.meta_package();
    apt.update().with_context(|| {
        format!(
            "kernel {}: could not read the package lists for {meta}",
            line.name()
        )
    })?;
    let mut pieces = Vec::new();
    let mut todo = vec![meta.to_string()];
    while let Some(package) = todo.pop() {
        let deps = apt.depends(&package).with_context(|| {
            format!(
                "kernel {}: package {package} not found in {:?}",
                line.name(),
                line.sources()
            )
        })?;
        for dep in deps.into_iter().filter(|d| is_kernel_piece(d)) {
            if !pieces.contains(&dep) {
                pieces.push(dep.clone());
                todo.push(dep);
            }
        }
    }
    let image = pieces
        .iter()
        .find(|p| p.starts_with("linux-image-"))
        .with_context(|| {
            format!(
                "kernel {}: meta-package {meta} depends on no linux-image-<version> package",
                line.name()
            )
        })?;
    let version = image.trim_start_matches("linux-image-").to_string();
    let kernel_dir = vm_dir.join("kernels").join(&version);
    let root = kernel_dir.join("root");
    let done = kernel_dir.join(".unpacked");
    if !done.exists() {
        let debs = kernel_dir.join("debs");
        let _ = std::fs::remove_dir_all(&kernel_dir);
        std::fs::create_dir_all(&debs).with_context(|| format!("creating {}", debs.display()))?;
        for piece in &pieces {
            retry(&format!("apt-get download {piece}"), || {
                let mut c = apt.command("apt-get");
                c.args(["download", "-q", piece]).current_dir(&debs);
                quiet_run(&mut c)
            })
            .with_context(|| {
                format!("kernel {}: could not download package {piece}", line.name())
            })?;
        }
        for deb in read_dir(&debs)? {
            cmd::run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root))?;
        }
        normalise_modules(&root, &version)?;
        cmd::run(Command::new("depmod").arg("-b").arg(&root).arg(&version))?;
        // The .debs are not needed once unpacked.
        let _ = std::fs::remove_dir_all(&debs);
        write(&done, &pieces.join("\n"))?;
    }
    let vmlinuz = find_vmlinuz(&root, &version)?;
    Ok(Kernel {
        line,
        version,
        vmlinuz,
        root,
    })
}

/// 7.x packages put modules under `usr/lib/modules`; host kmod and the
/// initramfs look under `lib/modules`.
fn normalise_modules(root: &Path, version: &str) -> Result<()> {
    let usr = root.join("usr/lib/modules").join(version);
    let lib = root.join("lib/modules").join(version);
    if usr.is_dir() && !lib.exists() {
        std::fs::create_dir_all(root.join("lib/modules"))?;
        std::fs::rename(&usr, &lib)
            .with_context(|| format!("moving {} to {}", usr.display(), lib.display()))?;
    }
    if !lib.is_dir() {
        bail!("the kernel packages of {version} have no lib/modules/{version}");
    }
    Ok(())
}

fn find_vmlinuz(root: &Path, version: &str) -> Result<PathBuf> {
    let candidates = [
        root.join("boot").join(format!("vmlinuz-{version}")),
        root.join("lib/modules").join(version).join("vmlinuz"),
        root.join("usr/lib/modules").join(version).join("vmlinuz"),
    ];
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .with_context(|| format!("no vmlinuz for {version} under {}", root.display()))
}

fn read_dir(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        out.push(entry?.path());
    }
    out.sort();
    Ok(out)
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Runs `c`, keeping its output unless it fails (then it is the error).
fn quiet_run(c: &mut Command) -> Result<()> {
    let out = c
        .output()
        .with_context(|| format!("starting {:?}", c.get_program()))?;
    if !out.status.success() {
        bail!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Retries a network step 4 times, 5 s apart.
fn retry(what: &str, mut f: impl FnMut() -> Result<()>) -> Result<()> {
    const ATTEMPTS: u32 = 4;
    let mut attempt = 1;
    loop {
        match f() {
            Ok(()) => return Ok(()),
            Err(e) if attempt < ATTEMPTS => {
                eprintln!("vm: {what} failed (attempt {attempt}/{ATTEMPTS}), retrying: {e:#}");
                thread::sleep(Duration::from_secs(5));
                attempt += 1;
            }
            Err(e) => return Err(e.context(format!("{what} failed {ATTEMPTS} times"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depends_are_read_from_apt_cache_output_and_kernel_pieces_recognised() {
        let text = "linux-image-amd64\n  Depends: linux-base-amd64\n  Depends: linux-image-7.3.4+deb13-amd64\n \
                    |Depends: <initramfs-tools>\n  PreDepends: linux-base\n";
        let deps = parse_depends(text);
        assert_eq!(
            deps,
            [
                "linux-base-amd64",
                "linux-image-7.3.4+deb13-amd64",
                "linux-base"
            ]
        );
        let pieces: Vec<_> = deps.iter().filter(|d| is_kernel_piece(d)).collect();
        assert_eq!(pieces, ["linux-image-7.3.4+deb13-amd64"]);
        assert!(is_kernel_piece("linux-modules-7.3.4+deb13-amd64"));
        assert!(is_kernel_piece("linux-binary-7.3.4+deb13-amd64"));
        assert!(!is_kernel_piece("linux-base-7.3.4+deb13-amd64"));
    }
}
