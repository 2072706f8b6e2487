//! Payload codecs for the WAN hop: lossy casts (bf16, fp16), blockwise int8,
//! top-k sparsification (with [`ErrorFeedback`]), and lossless lz4 / zstd.
//!
//! Pure: no I/O, no clock. Every codec turns the little-endian bytes of a
//! chunk into a self-describing payload — a [`HEADER_LEN`]-byte [`Header`]
//! (codec id, parameters, raw length) and a body — and back. A decoder is told
//! the codec it expects and the raw length it may write: a payload of another
//! codec or other parameters is [`CodecError::Mismatch`], never a misdecode,
//! and no decoder allocates more than the destination it was handed
//! (decompression bombs end as [`CodecError::Corrupt`]).
//!
//! Bounds (checked by the tests): bf16 relative error ≤ 2⁻⁸ (round to nearest
//! even gives 2⁻⁹), fp16 relative error ≤ 2⁻¹¹ inside its normal range
//! (overflow to ±Inf past 65504, absolute error ≤ 2⁻²⁵ among subnormals),
//! int8 per-block error ≤ max|x|/254 with nearest rounding (≤ max|x|/127
//! stochastic), lz4 / zstd bit-exact. NaN stays NaN and ±Inf stays ±Inf in
//! every codec (int8 sends such a block raw; top-k keeps them first, they are
//! the largest magnitudes); −0 survives all but int8 (q = 0 decodes to +0).
//!
//! Lossy codecs take `f32` elements only ([`CodecError::UnsupportedType`]).

use std::fmt;

use crate::dtype::DType;

mod cast;
mod feedback;
mod int8;
mod lossless;
#[cfg(test)]
mod tests;
mod topk;

pub use feedback::{encode_in_place, ErrorFeedback, TensorKey, TensorPart};

/// Bytes of the header in front of every encoded payload.
pub const HEADER_LEN: usize = 12;

/// Default int8 block (elements per scale).
pub const DEFAULT_INT8_BLOCK: u32 = 256;

/// How int8 rounds a scaled value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rounding {
    /// To nearest, ties to even.
    Nearest,
    /// Up with probability equal to the fraction (unbiased); the random bits
    /// come from the `seed` given to [`Codec::encode`] and the element index.
    Stochastic,
}

/// A codec and its parameters: what a call asks for and what a payload says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CodecSpec {
    /// No encoding: the elements as they are (no header either).
    #[default]
    None,
    Bf16,
    Fp16,
    /// `block` elements (≥ 1) share one f32 scale.
    Int8 {
        block: u32,
        rounding: Rounding,
    },
    /// Keep the `per_million` / 10⁶ largest magnitudes (at least one element).
    TopK {
        per_million: u32,
    },
    Lz4,
    /// zstd at `level` (1..=19).
    Zstd {
        level: u8,
    },
}

/// Why a payload could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("unknown codec id {0}")]
    UnknownCodec(u8),
    #[error("payload encoded with {got}, expected {expected}")]
    Mismatch { expected: CodecSpec, got: CodecSpec },
    #[error("payload decodes to {got} bytes, expected {expected}")]
    WrongLength { expected: usize, got: usize },
    #[error("corrupt {codec} payload: {reason}")]
    Corrupt {
        codec: CodecSpec,
        reason: &'static str,
    },
    #[error("{codec} cannot encode {dtype:?} elements")]
    UnsupportedType { codec: CodecSpec, dtype: DType },
    #[error("bad codec parameters: {0}")]
    BadParameters(&'static str),
}

/// One codec. `encode` appends a [`Header`] and the body to `out`; `decode`
/// fills exactly `dst` (its length is the raw length the payload must claim).
pub trait Codec {
    fn spec(&self) -> CodecSpec;
    /// Encodes the elements in `src` (little-endian bytes of `dtype`).
    fn encode(
        &self,
        src: &[u8],
        dtype: DType,
        seed: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError>;
    /// Decodes `payload` (header included) into `dst`.
    fn decode(&self, payload: &[u8], dtype: DType, dst: &mut [u8]) -> Result<(), CodecError>;
}

/// The fixed part of every payload: `id, flags, 0, 0, param (u32), raw_len (u32)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub spec: CodecSpec,
    pub raw_len: u32,
}

impl CodecSpec {
    /// Whether decoded bytes equal the encoded ones.
    pub fn is_lossless(self) -> bool {
        matches!(
            self,
            CodecSpec::None | CodecSpec::Lz4 | CodecSpec::Zstd { .. }
        )
    }

    /// The one-byte id carried by the call signature and the payload header.
    pub fn id(self) -> u8 {
        match self {
            CodecSpec::None => 0,
            CodecSpec::Bf16 => 1,
            CodecSpec::Fp16 => 2,
            CodecSpec::Int8 { .. } => 3,
            CodecSpec::TopK { .. } => 4,
            CodecSpec::Lz4 => 5,
            CodecSpec::Zstd { .. } => 6,
        }
    }

    fn flags_param(self) -> (u8, u32) {
        match self {
            CodecSpec::Int8 { block, rounding } => {
                (u8::from(rounding == Rounding::Stochastic), block)
            }
            CodecSpec::TopK { per_million } => (0, per_million),
            CodecSpec::Zstd { level } => (0, u32::from(level)),
            _ => (0, 0),
        }
    }

    /// Checks the parameters (`Int8` block ≥ 1, top-k 1..=10⁶ ppm, zstd 1..=19).
    pub fn validate(self) -> Result<CodecSpec, CodecError> {
        let bad = CodecError::BadParameters;
        match self {
            CodecSpec::Int8 { block: 0, .. } => Err(bad("int8 block must be at least 1")),
            CodecSpec::TopK { per_million } if per_million == 0 || per_million > 1_000_000 => {
                Err(bad("top-k fraction must be in (0, 100 %]"))
            }
            CodecSpec::Zstd { level } if !(1..=19).contains(&level) => {
                Err(bad("zstd level must be 1..=19"))
            }
            s => Ok(s),
        }
    }

    /// The codec behind this spec (`None` for [`CodecSpec::None`]).
    pub fn codec(self) -> Result<Option<Box<dyn Codec + Send + Sync>>, CodecError> {
        Ok(match self.validate()? {
            CodecSpec::None => None,
            CodecSpec::Bf16 => Some(Box::new(cast::Bf16)),
            CodecSpec::Fp16 => Some(Box::new(cast::Fp16)),
            CodecSpec::Int8 { block, rounding } => Some(Box::new(int8::Int8 { block, rounding })),
            CodecSpec::TopK { per_million } => Some(Box::new(topk::TopK { per_million })),
            CodecSpec::Lz4 => Some(Box::new(lossless::Lz4)),
            CodecSpec::Zstd { level } => Some(Box::new(lossless::Zstd { level })),
        })
    }

    /// Parses `none`, `bf16`, `fp16`, `int8`, `int8:BLOCK`, `int8:BLOCK:stochastic`,
    /// `topk:1%` (or `topk:0.01`), `lz4`, `zstd`, `zstd:LEVEL`.
    pub fn parse(s: &str) -> Result<CodecSpec, CodecError> {
        let bad = CodecError::BadParameters;
        let lower = s.trim().to_ascii_lowercase();
        let mut it = lower.split(':');
        let name = it.next().unwrap_or_default();
        let a = it.next();
        let b = it.next();
        if it.next().is_some() {
            return Err(bad("too many ':' fields"));
        }
        let num = |x: &str| x.parse::<u32>().map_err(|_| bad("not a whole number"));
        let spec = match (name, a, b) {
            ("none" | "raw" | "", None, None) => CodecSpec::None,
            ("bf16", None, None) => CodecSpec::Bf16,
            ("fp16" | "f16", None, None) => CodecSpec::Fp16,
            ("int8", a, r) => CodecSpec::Int8 {
                block: a.map_or(Ok(DEFAULT_INT8_BLOCK), num)?,
                rounding: match r {
                    None | Some("nearest") => Rounding::Nearest,
                    Some("stochastic") => Rounding::Stochastic,
                    Some(_) => return Err(bad("int8 rounding is nearest or stochastic")),
                },
            },
            ("topk", Some(f), None) => {
                let frac = match f.strip_suffix('%') {
                    Some(p) => p.parse::<f64>().map(|p| p / 100.0),
                    None => f.parse::<f64>(),
                }
                .map_err(|_| bad("top-k fraction is like 1% or 0.01"))?;
                CodecSpec::TopK {
                    per_million: (frac * 1e6).round().clamp(0.0, 2e6) as u32,
                }
            }
            ("lz4", None, None) => CodecSpec::Lz4,
            ("zstd", l, None) => CodecSpec::Zstd {
                level: l
                    .map_or(Ok(3), num)?
                    .try_into()
                    .map_err(|_| bad("zstd level"))?,
            },
            _ => return Err(bad("unknown codec name")),
        };
        spec.validate()
    }
}

impl fmt::Display for CodecSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecSpec::None => write!(f, "none"),
            CodecSpec::Bf16 => write!(f, "bf16"),
            CodecSpec::Fp16 => write!(f, "fp16"),
            CodecSpec::Int8 { block, rounding } => {
                let r = match rounding {
                    Rounding::Nearest => "nearest",
                    Rounding::Stochastic => "stochastic",
                };
                write!(f, "int8:{block}:{r}")
            }
            CodecSpec::TopK { per_million } => write!(f, "topk:{}%", *per_million as f64 / 1e4),
            CodecSpec::Lz4 => write!(f, "lz4"),
            CodecSpec::Zstd { level } => write!(f, "zstd:{level}"),
        }
    }
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let (flags, param) = self.spec.flags_param();
        let mut b = [0u8; HEADER_LEN];
        b[0] = self.spec.id();
        b[1] = flags;
        b[4..8].copy_from_slice(&param.to_le_bytes());
        b[8..12].copy_from_slice(&self.raw_len.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<(Header, &[u8]), CodecError> {
        let corrupt = |reason| CodecError::Corrupt {
            codec: CodecSpec::None,
            reason,
        };
        if b.len() < HEADER_LEN {
            return Err(corrupt("shorter than the codec header"));
        }
        if b[2] != 0 || b[3] != 0 {
            return Err(corrupt("reserved header bytes set"));
        }
        let param = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let raw_len = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        let flags = b[1];
        let no_flags = |s: CodecSpec| {
            if flags == 0 {
                Ok(s)
            } else {
                Err(corrupt("unknown flags"))
            }
        };
        let spec = match b[0] {
            1 if param == 0 => no_flags(CodecSpec::Bf16)?,
            2 if param == 0 => no_flags(CodecSpec::Fp16)?,
            3 => CodecSpec::Int8 {
                block: param,
                rounding: match flags {
                    0 => Rounding::Nearest,
                    1 => Rounding::Stochastic,
                    _ => return Err(corrupt("unknown int8 rounding")),
                },
            },
            4 => no_flags(CodecSpec::TopK { per_million: param })?,
            5 if param == 0 => no_flags(CodecSpec::Lz4)?,
            6 => no_flags(CodecSpec::Zstd {
                level: u8::try_from(param).map_err(|_| corrupt("zstd level"))?,
            })?,
            1 | 2 | 5 => return Err(corrupt("parameter set on a codec without parameters")),
            id => return Err(CodecError::UnknownCodec(id)),
        };
        let spec = spec.validate().map_err(|_| corrupt("invalid parameters"))?;
        Ok((Header { spec, raw_len }, &b[HEADER_LEN..]))
    }
}

/// Checks a payload's header against the codec `expected` and the raw length
/// `dst_len`, and returns the body.
pub(crate) fn open(
    expected: CodecSpec,
    payload: &[u8],
    dst_len: usize,
) -> Result<&[u8], CodecError> {
    let (h, body) = Header::decode(payload)?;
    if h.spec != expected {
        return Err(CodecError::Mismatch {
            expected,
            got: h.spec,
        });
    }
    if h.raw_len as usize != dst_len {
        return Err(CodecError::WrongLength {
            expected: dst_len,
            got: h.raw_len as usize,
        });
    }
    Ok(body)
}

/// Appends the header for `spec` and `raw_len` bytes to `out`.
pub(crate) fn write_header(
    spec: CodecSpec,
    raw_len: usize,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    let raw_len =
        u32::try_from(raw_len).map_err(|_| CodecError::BadParameters("chunk above 4 GiB"))?;
    out.extend_from_slice(&Header { spec, raw_len }.encode());
    Ok(())
}

/// The prologue of a lossy encode: checks that `src` is f32 elements, appends
/// the header and `body_len(n)` zeroed bytes to `out` (n = the element
/// count), and returns n and that body to fill.
pub(crate) fn begin_f32<'o>(
    codec: CodecSpec,
    dtype: DType,
    src: &[u8],
    body_len: impl FnOnce(usize) -> usize,
    out: &'o mut Vec<u8>,
) -> Result<(usize, &'o mut [u8]), CodecError> {
    let n = need_f32(codec, dtype, src.len())?;
    write_header(codec, src.len(), out)?;
    let at = out.len();
    out.resize(at + body_len(n), 0);
    Ok((n, &mut out[at..]))
}

/// `src` as f32 elements, or the typed refusal of a lossy codec.
pub(crate) fn need_f32(codec: CodecSpec, dtype: DType, len: usize) -> Result<usize, CodecError> {
    if dtype != DType::F32 {
        return Err(CodecError::UnsupportedType { codec, dtype });
    }
    if !len.is_multiple_of(4) {
        return Err(CodecError::WrongLength {
            expected: len.next_multiple_of(4),
            got: len,
        });
    }
    Ok(len / 4)
}

/// Little-endian f32 at element `i` of `b`.
#[inline(always)]
pub(crate) fn f32_at(b: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
}
