//! Argument helpers shared by the collective's binaries (`--key value` pairs).
//! Only with the `cli` feature (the binaries'); not part of the library's API.

use anyhow::{bail, Context, Result};

/// Prints `line` and a newline on stdout, returning the write's error instead
/// of panicking as `println!` does: the binaries keep SIGPIPE ignored (for
/// their sockets), so a closed stdout (`| head -1`) is an `EPIPE` here, which
/// `cli_main` turns into a quiet exit.
pub fn outln(line: impl std::fmt::Display) -> std::io::Result<()> {
    use std::io::Write as _;
    writeln!(std::io::stdout().lock(), "{line}")
}

/// Prints the library's `tracing` events on stderr: a WAN path that went
/// down, a refused peer, a failed communicator, the no-TLS warning. The
/// level comes from `RUST_LOG` (default `warn`). Every binary calls it first.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

pub struct Args(Vec<(String, String)>);

impl Args {
    /// Parses `--key value` pairs; `allowed` lists the keys this binary knows.
    pub fn parse(allowed: &[&str], usage: &str) -> Result<Self> {
        let raw: Vec<String> = std::env::args().skip(1).collect();
        if raw.iter().any(|a| a == "--help" || a == "-h") {
            println!("{usage}");
            std::process::exit(0);
        }
        let mut out = Vec::new();
        let mut it = raw.into_iter();
        while let Some(k) = it.next() {
            let Some(key) = k.strip_prefix("--") else {
                bail!("unexpected argument {k:?}\n{usage}")
            };
            if !allowed.contains(&key) {
                bail!("unknown option --{key}\n{usage}");
            }
            let v = it
                .next()
                .with_context(|| format!("--{key} needs a value"))?;
            out.push((key.to_string(), v));
        }
        Ok(Args(out))
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn num<T: std::str::FromStr>(&self, key: &str, default: T) -> Result<T> {
        match self.get(key) {
            Some(v) => v
                .parse()
                .map_err(|_| anyhow::anyhow!("--{key} {v:?} is not a number")),
            None => Ok(default),
        }
    }
}

/// Parses sizes like `4K`, `64kb`, `1mb`, `1G` or plain bytes
/// (`causeway_core::units`, powers of 1024).
pub fn parse_size(s: &str) -> Result<usize> {
    let bytes = causeway_core::units::parse_bytes(s)?;
    usize::try_from(bytes).with_context(|| format!("{s:?} does not fit in memory"))
}
