//! Rates and sizes as TOML values: an integer (bit/s, bytes) or a string
//! read by the one units parser ([`crate::units`]).

use crate::units::{parse_bytes, parse_rate_bps};

/// Parses a rate: bit/s as a number, or a string with a unit (`"100mbit"`).
pub fn parse_rate(value: &toml::Value) -> Result<u64, String> {
    match value {
        toml::Value::Integer(n) if *n > 0 => Ok(*n as u64),
        toml::Value::Integer(n) => Err(format!("{n} is not a positive rate")),
        toml::Value::String(s) => parse_rate_bps(s).map_err(|e| e.to_string()),
        other => Err(format!(
            "expected a rate such as \"100mbit\", found {}",
            other.type_str()
        )),
    }
}

/// Parses a size: bytes as a number, or a string with a unit (`"64kb"`).
pub fn parse_size(value: &toml::Value) -> Result<u64, String> {
    match value {
        toml::Value::Integer(n) if *n > 0 => Ok(*n as u64),
        toml::Value::Integer(n) => Err(format!("{n} is not a positive size")),
        toml::Value::String(s) => parse_bytes(s).map_err(|e| e.to_string()),
        other => Err(format!(
            "expected a size such as \"64kb\", found {}",
            other.type_str()
        )),
    }
}
