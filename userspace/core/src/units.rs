//! One parser for every quantity a person writes — in a policy file, on the
//! command line or in an environment variable: rates, sizes and durations.
//!
//! | quantity | units (case-insensitive) | scale | bare number |
//! |----------|--------------------------|-------|-------------|
//! | rate     | `bit`, `kbit`, `mbit`, `gbit`, `tbit`; `kibit`, `mibit`, `gibit`, `tibit` | powers of 1000; the `i` forms powers of 1024 (as `tc`) | bit/s |
//! | size     | `b`; `kb`/`k`/`kib`, `mb`/`m`/`mib`, `gb`/`g`/`gib` | powers of 1024 (as `tc`'s sizes) | bytes |
//! | duration | `ns`/`nsec`, `us`/`usec`/`µs`, `ms`/`msec`, `s`/`sec`/`secs`, `min`, `h` | — | refused |
//!
//! - A number may have a decimal fraction (`"1.5gbit"`, `"0.5ms"`); the value
//!   is rounded to the nearest whole bit/s, byte or nanosecond. Digits past
//!   the 18th after the point are ignored. No sign, no exponent.
//! - Whitespace around the number and between number and unit is ignored.
//! - Rates and sizes must be positive (nothing is shaped at 0 bit/s, nothing
//!   fits in 0 bytes); a zero duration is allowed.
//! - Byte rates (`bps`, `kbps`, `mbps`, …) are refused with a hint: `tc` reads
//!   `mbps` as megabytes per second, many people mean megabits, and an 8×
//!   mistake in a shaping rate should not pass silently. Write `mbit`.
//! - A duration needs a unit: `tc` reads a bare number as microseconds, most
//!   other tools as seconds.

use std::{fmt, time::Duration};

/// Which kind of quantity a [`UnitError`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quantity {
    Rate,
    Size,
    Duration,
}

impl Quantity {
    /// What a well-formed value of this kind looks like.
    fn expected(self) -> &'static str {
        match self {
            Self::Rate => {
                "expected bit/s as a number or with a unit bit, kbit, mbit, gbit or tbit \
                 (e.g. \"100mbit\", \"1.5gbit\", \"64000\")"
            }
            Self::Size => {
                "expected bytes as a number or with a unit b, kb, mb or gb \
                 (powers of 1024; e.g. \"64kb\", \"1mb\", \"1500\")"
            }
            Self::Duration => {
                "expected a number with a unit ns, us, ms, s, min or h \
                 (e.g. \"40ms\", \"1.5s\", \"200us\")"
            }
        }
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Rate => "rate",
            Self::Size => "size",
            Self::Duration => "duration",
        })
    }
}

/// Why a text is not a quantity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Problem {
    /// Not a number, or an unknown unit.
    Malformed,
    /// A rate or size that is (or rounds to) zero.
    Zero,
    /// More than `u64::MAX` bit/s, bytes or nanoseconds.
    TooLarge,
    /// `mbps` and friends.
    ByteRate,
    /// A duration without a unit.
    BareDuration,
}

/// A rate, size or duration that could not be parsed. The message names the
/// input and what was expected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("'{input}' is not a {quantity}: {}", self.reason())]
pub struct UnitError {
    input: String,
    quantity: Quantity,
    problem: Problem,
}

impl UnitError {
    fn new(input: &str, quantity: Quantity, problem: Problem) -> Self {
        Self {
            input: input.to_string(),
            quantity,
            problem,
        }
    }

    /// The text that was refused, as given.
    pub fn input(&self) -> &str {
        &self.input
    }

    /// What the text was meant to be.
    pub fn quantity(&self) -> Quantity {
        self.quantity
    }

    fn reason(&self) -> String {
        match self.problem {
            Problem::Malformed => self.quantity.expected().to_string(),
            Problem::Zero => format!("a {} must be greater than zero", self.quantity),
            Problem::TooLarge => format!("it is too large ({})", self.quantity.expected()),
            Problem::ByteRate => "byte rates are ambiguous (tc reads \"mbps\" as megabytes/s): \
                                  write bit/s, e.g. \"100mbit\" (= 12.5 megabytes/s)"
                .to_string(),
            Problem::BareDuration => {
                format!("a duration needs a unit: {}", self.quantity.expected())
            }
        }
    }
}

const RATE_UNITS: &[(&str, u64)] = &[
    ("bit", 1),
    ("kbit", 1_000),
    ("mbit", 1_000_000),
    ("gbit", 1_000_000_000),
    ("tbit", 1_000_000_000_000),
    ("kibit", 1 << 10),
    ("mibit", 1 << 20),
    ("gibit", 1 << 30),
    ("tibit", 1 << 40),
];

const BYTE_RATE_UNITS: &[&str] = &[
    "bps", "kbps", "mbps", "gbps", "tbps", "kibps", "mibps", "gibps", "tibps",
];

const SIZE_UNITS: &[(&str, u64)] = &[
    ("b", 1),
    ("k", 1 << 10),
    ("kb", 1 << 10),
    ("kib", 1 << 10),
    ("m", 1 << 20),
    ("mb", 1 << 20),
    ("mib", 1 << 20),
    ("g", 1 << 30),
    ("gb", 1 << 30),
    ("gib", 1 << 30),
];

const NS_PER_S: u64 = 1_000_000_000;

const DURATION_UNITS: &[(&str, u64)] = &[
    ("ns", 1),
    ("nsec", 1),
    ("us", 1_000),
    ("usec", 1_000),
    ("\u{b5}s", 1_000),  // micro sign
    ("\u{3bc}s", 1_000), // greek small mu
    ("ms", 1_000_000),
    ("msec", 1_000_000),
    ("s", NS_PER_S),
    ("sec", NS_PER_S),
    ("secs", NS_PER_S),
    ("min", 60 * NS_PER_S),
    ("h", 3_600 * NS_PER_S),
];

/// Parses a rate into bit/s: `"50mbit"`, `"1gbit"`, `"800kbit"`,
/// `"1.5gbit"`, `"200000bit"`, `"200000"`.
pub fn parse_rate_bps(s: &str) -> Result<u64, UnitError> {
    let err = |problem| UnitError::new(s, Quantity::Rate, problem);
    let (number, unit) = split(s);
    if BYTE_RATE_UNITS.contains(&unit.as_str()) {
        return Err(err(Problem::ByteRate));
    }
    let scale = scale_of(RATE_UNITS, &unit, 1).ok_or_else(|| err(Problem::Malformed))?;
    positive(scaled_decimal(number, scale)).map_err(err)
}

/// Parses a size into bytes: `"512kb"`, `"1mb"`, `"64kib"`, `"1500b"`, `"1500"`.
pub fn parse_bytes(s: &str) -> Result<u64, UnitError> {
    let err = |problem| UnitError::new(s, Quantity::Size, problem);
    let (number, unit) = split(s);
    let scale = scale_of(SIZE_UNITS, &unit, 1).ok_or_else(|| err(Problem::Malformed))?;
    positive(scaled_decimal(number, scale)).map_err(err)
}

/// Parses a duration: `"40ms"`, `"1.5s"`, `"200us"`, `"10ns"`.
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    let err = |problem| UnitError::new(s, Quantity::Duration, problem);
    let (number, unit) = split(s);
    if unit.is_empty() && !number.is_empty() {
        return Err(err(Problem::BareDuration));
    }
    let scale = scale_of(DURATION_UNITS, &unit, 0).ok_or_else(|| err(Problem::Malformed))?;
    scaled_decimal(number, scale)
        .map(Duration::from_nanos)
        .map_err(err)
}

/// Writes a rate in the largest unit that divides it exactly, so that
/// [`parse_rate_bps`] reads back the same number: `200000000` → `"200mbit"`,
/// `1500000000` → `"1500mbit"`, `1234` → `"1234bit"`.
pub fn format_rate_bps(bps: u64) -> String {
    let units = [
        ("tbit", 1_000_000_000_000),
        ("gbit", 1_000_000_000),
        ("mbit", 1_000_000),
        ("kbit", 1_000),
    ];
    units
        .iter()
        .find(|(_, scale)| bps != 0 && bps.is_multiple_of(*scale))
        .map_or_else(
            || format!("{bps}bit"),
            |(unit, scale)| format!("{}{unit}", bps / scale),
        )
}

/// Splits `" 1.5 GBit "` into the number `"1.5"` and the lower-case unit
/// `"gbit"`.
fn split(s: &str) -> (&str, String) {
    let trimmed = s.trim();
    let at = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(at);
    (number, unit.trim().to_lowercase())
}

/// The scale of `unit` in `table`; an empty unit means `bare` (0: refused).
fn scale_of(table: &[(&str, u64)], unit: &str, bare: u64) -> Option<u64> {
    if unit.is_empty() {
        return (bare != 0).then_some(bare);
    }
    table.iter().find(|(u, _)| *u == unit).map(|(_, s)| *s)
}

/// `digits[.digits]` × `scale`, rounded to the nearest integer.
fn scaled_decimal(number: &str, scale: u64) -> Result<u64, Problem> {
    const MAX_FRACTION_DIGITS: usize = 18;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let all_digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty() || !all_digits(whole) || !all_digits(fraction) {
        return Err(Problem::Malformed);
    }
    let scale = u128::from(scale);
    let whole = whole.trim_start_matches('0');
    let whole: u128 = if whole.is_empty() {
        0
    } else if whole.len() > 30 {
        return Err(Problem::TooLarge);
    } else {
        whole.parse().map_err(|_| Problem::Malformed)?
    };
    let fraction = &fraction[..fraction.len().min(MAX_FRACTION_DIGITS)];
    let fraction_part = if fraction.is_empty() {
        0
    } else {
        let digits: u128 = fraction.parse().map_err(|_| Problem::Malformed)?;
        let denominator = 10u128.pow(fraction.len() as u32);
        (digits * scale + denominator / 2) / denominator
    };
    whole
        .checked_mul(scale)
        .and_then(|w| w.checked_add(fraction_part))
        .and_then(|total| u64::try_from(total).ok())
        .ok_or(Problem::TooLarge)
}

fn positive(value: Result<u64, Problem>) -> Result<u64, Problem> {
    value.and_then(|v| if v == 0 { Err(Problem::Zero) } else { Ok(v) })
}

#[cfg(test)]
#[path = "units_tests.rs"]
mod tests;
