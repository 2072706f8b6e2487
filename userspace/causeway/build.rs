//! Builds the eBPF crate (`ebpf/`) for `bpfel-unknown-none` with the nightly
//! toolchain and bpf-linker, and hands its object path to the crate as
//! `CAUSEWAY_EBPF_OBJ`, so that the object is embedded in the binary.
//!
//! The nested cargo gets its own target directory (no lock shared with the
//! outer build) and a clean environment: variables set by the outer cargo or
//! by clippy (`RUSTC`, `RUSTC_WORKSPACE_WRAPPER`, flags) must not leak into a
//! build for another target with another toolchain.

use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
};

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = manifest_dir
        .ancestors()
        .nth(2)
        .expect("userspace/causeway sits two levels below the workspace root")
        .to_path_buf();
    let ebpf_dir = root.join("ebpf");
    let target_dir = root.join("target").join("ebpf");

    for dir in ["ebpf/src", "bpf-maps/src"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    for file in [
        "ebpf/Cargo.toml",
        "ebpf/Cargo.lock",
        "ebpf/.cargo/config.toml",
        "bpf-maps/Cargo.toml",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(file).display());
    }

    let mut cmd = Command::new("rustup");
    cmd.args(["run", "nightly", "cargo", "build", "--release"])
        .arg("--target-dir")
        .arg(&target_dir)
        .current_dir(&ebpf_dir);
    for (key, _) in env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("CARGO_") && key != "CARGO_HOME"
            || key.starts_with("RUSTC")
            || key.starts_with("RUSTUP_TOOLCHAIN")
            || key == "RUSTFLAGS"
            || key == "RUSTDOCFLAGS"
        {
            cmd.env_remove(&key);
        }
    }
    let status = cmd.status().unwrap_or_else(|e| {
        panic!("could not run `rustup run nightly cargo` to build the eBPF programs ({e}); run `cargo xtask setup`")
    });
    if !status.success() {
        panic!(
            "building the eBPF programs in {} failed ({status}); if the nightly toolchain, \
             rust-src or bpf-linker is missing, run `cargo xtask setup`",
            ebpf_dir.display()
        );
    }
    let obj = target_dir.join("bpfel-unknown-none/release/causeway");
    assert!(
        Path::new(&obj).exists(),
        "eBPF build succeeded but {} is missing",
        obj.display()
    );
    println!("cargo:rustc-env=CAUSEWAY_EBPF_OBJ={}", obj.display());
}
