//! Rates and sizes as written in policy files and on the command line:
//! rates in bit/s with `bit`, `kbit`, `mbit`, `gbit`, `tbit` (powers of
//! 1000, as `tc` writes them); sizes in bytes with `kb`/`k`/`kib`, `mb`/`m`/`mib`
//! (powers of 1024) or `b`.

/// Parses a rate: bit/s as a number, or a string with a unit.
pub fn parse_rate(value: &toml::Value) -> Result<u64, String> {
    match value {
        toml::Value::Integer(n) if *n > 0 => Ok(*n as u64),
        toml::Value::Integer(n) => Err(format!("{n} is not a positive rate")),
        toml::Value::String(s) => parse_rate_str(s),
        other => Err(format!(
            "expected a rate such as \"100mbit\", found {}",
            other.type_str()
        )),
    }
}

/// Parses `"100mbit"`, `"1.5gbit"`, `"64000"`, … into bit/s.
pub fn parse_rate_str(text: &str) -> Result<u64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let units = [
        ("tbit", 1e12),
        ("gbit", 1e9),
        ("mbit", 1e6),
        ("kbit", 1e3),
        ("bit", 1.0),
    ];
    let (number, scale) = units
        .iter()
        .find_map(|(u, s)| lower.strip_suffix(u).map(|n| (n, *s)))
        .unwrap_or((lower.as_str(), 1.0));
    let value: f64 = number.trim().parse().map_err(|_| {
        format!("'{text}' is not a rate: write e.g. \"100mbit\", \"1gbit\" or bit/s as a number")
    })?;
    let bits = value * scale;
    if !(bits.is_finite() && (1.0..1.8e19).contains(&bits)) {
        return Err(format!("'{text}' is not a usable rate"));
    }
    Ok(bits.round() as u64)
}

/// Parses a size: bytes as a number, or `"64kb"`, `"1mb"`, `"1500b"`.
pub fn parse_size(value: &toml::Value) -> Result<u64, String> {
    match value {
        toml::Value::Integer(n) if *n > 0 => Ok(*n as u64),
        toml::Value::Integer(n) => Err(format!("{n} is not a positive size")),
        toml::Value::String(s) => parse_size_str(s),
        other => Err(format!(
            "expected a size such as \"64kb\", found {}",
            other.type_str()
        )),
    }
}

/// Parses `"64kb"`, `"64kib"`, `"1mb"`, `"1500b"`, `"1500"` into bytes.
pub fn parse_size_str(text: &str) -> Result<u64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let units = [
        ("kib", 1u64 << 10),
        ("mib", 1 << 20),
        ("kb", 1 << 10),
        ("mb", 1 << 20),
        ("k", 1 << 10),
        ("m", 1 << 20),
        ("b", 1),
    ];
    let (number, scale) = units
        .iter()
        .find_map(|(u, s)| lower.strip_suffix(u).map(|n| (n, *s)))
        .unwrap_or((lower.as_str(), 1));
    let n: u64 = number
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a size: write e.g. \"64kb\" or bytes as a number"))?;
    n.checked_mul(scale)
        .filter(|b| *b > 0)
        .ok_or_else(|| format!("'{text}' is not a usable size"))
}
