//! Argument helpers shared by the collective's binaries (`--key value` pairs).
//! Only with the `cli` feature (the binaries'); not part of the library's API.

use anyhow::{bail, Context, Result};

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

/// Parses sizes like `4K`, `1M`, `256M`, `1G` or plain bytes.
pub fn parse_size(s: &str) -> Result<usize> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let n: usize = num.parse().with_context(|| format!("bad size {s:?}"))?;
    Ok(n * mult)
}
