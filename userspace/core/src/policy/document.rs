//! The policy file as TOML: serde structures that keep the position of every
//! value, so that checks made after parsing can name the line.
//!
//! Unknown fields are refused (`deny_unknown_fields`); wrong value types are
//! refused by toml itself, with the span of the offending value.

use serde::Deserialize;
use toml::Spanned;

/// The whole file: `[[class]]` and `[[rule]]` tables.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPolicy {
    #[serde(default, rename = "class")]
    pub classes: Vec<Spanned<RawClass>>,
    #[serde(default, rename = "rule")]
    pub rules: Vec<Spanned<RawRule>>,
    /// The link's shaping (`shaping.rs`).
    #[serde(default)]
    pub shaping: Option<Spanned<super::shaping::RawLinkShaping>>,
    /// `"pass"` (the default) or `"drop"`: frames the parser cannot fully read.
    #[serde(default)]
    pub unclassified: Option<Spanned<String>>,
    /// Admitted source prefixes and the ports they protect.
    #[serde(default)]
    pub admission: Option<Spanned<RawAdmission>>,
}

/// The `[admission]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdmission {
    /// Prefixes (or bare addresses) allowed to reach `ports`.
    #[serde(default)]
    pub prefixes: Vec<Spanned<String>>,
    /// Ports or `"lo-hi"` ranges: the training and probe ports.
    pub ports: Vec<Spanned<toml::Value>>,
}

/// One `[[class]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClass {
    pub id: Spanned<i64>,
    pub name: Spanned<String>,
    /// The class's egress shaping (`shaping.rs`).
    #[serde(default)]
    pub shaping: Option<Spanned<super::shaping::RawClassShaping>>,
}

/// One `[[rule]]` table. Absent match fields match anything.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRule {
    /// Lower wins; unique in the file.
    pub priority: Spanned<u32>,
    /// Name of a `[[class]]`.
    pub class: Spanned<String>,
    pub src: Option<Spanned<String>>,
    pub dst: Option<Spanned<String>>,
    /// Name (`"udp"`) or number.
    pub protocol: Option<Spanned<toml::Value>>,
    /// Port number or `"lo-hi"` range.
    pub src_port: Option<Spanned<toml::Value>>,
    pub dst_port: Option<Spanned<toml::Value>>,
    /// Number (0..=63) or name (`"ef"`, `"af41"`, `"cs6"`), or a list of them.
    pub dscp: Option<Spanned<toml::Value>>,
    /// `"pass"` (the default) or `"drop"`.
    pub action: Option<Spanned<String>>,
}

/// What toml's error says, on one line; where toml says nothing (a file
/// cut after `key =`) or only what token it wanted, what is missing.
pub(super) fn syntax_message(text: &str, err: &toml::de::Error) -> String {
    let mut offset = err.span().map_or(0, |s| s.start).min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let before = text.get(line_start..offset).unwrap_or("");
    let rest_of_line = text[offset..].lines().next().unwrap_or("");
    let value_missing = rest_of_line.trim().is_empty() || rest_of_line.trim().starts_with('#');
    if let Some(key) = before
        .trim_end()
        .strip_suffix('=')
        .map(str::trim)
        .filter(|_| value_missing)
    {
        if !key.is_empty() && !key.contains(['"', '\'', '=']) {
            return format!("`{key}` has no value: write one after `=`");
        }
    }
    let message: Vec<&str> = err
        .message()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if message.is_empty() {
        if text[offset..].trim().is_empty() {
            "the file ends in the middle of a table or value".to_string()
        } else {
            "this is not valid TOML".to_string()
        }
    } else {
        message.join("; ")
    }
}
