//! Blockwise int8: each block of `block` elements is sent as one f32 scale
//! (max|x| / 127) and one signed byte per element, q = round(x / scale).
//!
//! A block whose largest magnitude is not finite (NaN, ±Inf) or so small that
//! 127 / max|x| would overflow is sent raw instead (scale = [`RAW`], then the
//! f32 elements), so special values pass exactly. An all-zero block decodes
//! to +0 (int8 has no −0).
//!
//! The loops are written for the vectoriser (one branch-free pass per block
//! for the maximum, one for scale, round and store): the block maximum is an
//! integer max over the magnitude bits (integer order is float order for
//! non-NaN values); the scaled value is clamped to ±127 and rounded to nearest
//! even by adding 1.5·2²³, whose low mantissa byte is then the i8 itself (no
//! float-to-int conversion, which Rust saturates and the vectoriser handles
//! poorly); stochastic rounding takes its random bits from a counter hash of
//! (seed, element index), so there is no loop-carried state.

use super::{need_f32, open, write_header, Codec, CodecError, CodecSpec, Rounding};
use crate::dtype::DType;

/// The scale that marks a raw block (a NaN bit pattern).
const RAW: u32 = 0xffff_ffff;
/// Blocks whose max|x| is below this are sent raw (127 / max would overflow).
const TINY: f32 = 1e-30;
/// 1.5 · 2²³: adding it rounds |v| < 2²² to the nearest integer (ties even),
/// left in the low mantissa bits.
const MAGIC: f32 = 12_582_912.0;

pub(super) struct Int8 {
    pub block: u32,
    pub rounding: Rounding,
}

/// A uniform value in [0, 1) from (seed, index): murmur3's finaliser.
#[inline(always)]
fn uniform(seed: u32, i: u32) -> f32 {
    let mut h = i.wrapping_mul(0x9e37_79b1) ^ seed;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    (h >> 8) as f32 * (1.0 / 16_777_216.0)
}

/// `v` clamped to ±127 and rounded to the nearest integer (ties even), as the
/// bits of an i8: adding 1.5·2²³ leaves the rounded integer in the low
/// mantissa bits (two's complement), so there is no float-to-int conversion.
#[inline(always)]
fn q8(v: f32) -> u8 {
    (v.clamp(-127.0, 127.0) + MAGIC).to_bits() as u8
}

/// q[k] = q8(f(x[k], k)) over one block: one branch-free pass (typed when
/// `x` is aligned, as chunks are; byte-wise otherwise).
#[inline(always)]
fn quantize(x: &[u8], q: &mut [u8], f: impl Fn(f32, u32) -> f32) {
    #[cfg(target_endian = "little")]
    if let Ok(xs) = bytemuck::try_cast_slice::<u8, f32>(x) {
        for (k, (o, &v)) in q.iter_mut().zip(xs).enumerate() {
            *o = q8(f(v, k as u32));
        }
        return;
    }
    for (k, (o, b)) in q.iter_mut().zip(x.chunks_exact(4)).enumerate() {
        *o = q8(f(f32::from_le_bytes([b[0], b[1], b[2], b[3]]), k as u32));
    }
}

fn max_abs_bits(x: &[u8]) -> u32 {
    #[cfg(target_endian = "little")]
    if let Ok(w) = bytemuck::try_cast_slice::<u8, u32>(x) {
        return w.iter().map(|b| b & 0x7fff_ffff).fold(0, u32::max);
    }
    x.chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff)
        .fold(0, u32::max)
}

impl Codec for Int8 {
    fn spec(&self) -> CodecSpec {
        CodecSpec::Int8 {
            block: self.block,
            rounding: self.rounding,
        }
    }

    fn encode(
        &self,
        src: &[u8],
        dtype: DType,
        seed: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        need_f32(self.spec(), dtype, src.len())?;
        write_header(self.spec(), src.len(), out)?;
        let block = self.block as usize;
        let seed = (seed ^ (seed >> 32)) as u32;
        for (bi, x) in src.chunks(4 * block).enumerate() {
            let m = x.len() / 4;
            let max = f32::from_bits(max_abs_bits(x));
            let at = out.len();
            if !max.is_finite() || (max != 0.0 && max < TINY) {
                out.extend_from_slice(&RAW.to_le_bytes());
                out.extend_from_slice(x);
                continue;
            }
            let scale = max / 127.0;
            let inv = if max == 0.0 { 0.0 } else { 127.0 / max };
            out.resize(at + 4 + m, 0);
            let (s, q) = out[at..].split_at_mut(4);
            s.copy_from_slice(&scale.to_le_bytes());
            match self.rounding {
                Rounding::Nearest => quantize(x, q, |v, _| v * inv),
                Rounding::Stochastic => {
                    let base = (bi * block) as u32;
                    quantize(x, q, |v, k| {
                        v * inv + uniform(seed, base.wrapping_add(k)) - 0.5
                    });
                }
            }
        }
        Ok(())
    }

    fn decode(&self, payload: &[u8], dtype: DType, dst: &mut [u8]) -> Result<(), CodecError> {
        need_f32(self.spec(), dtype, dst.len())?;
        let mut body = open(self.spec(), payload, dst.len())?;
        let corrupt = |reason| CodecError::Corrupt {
            codec: self.spec(),
            reason,
        };
        for o in dst.chunks_mut(4 * self.block as usize) {
            let m = o.len() / 4;
            let Some((s, rest)) = body.split_first_chunk::<4>() else {
                return Err(corrupt("truncated before a block scale"));
            };
            let bits = u32::from_le_bytes(*s);
            if bits == RAW {
                let raw = rest.get(..4 * m).ok_or(corrupt("truncated raw block"))?;
                o.copy_from_slice(raw);
                body = &rest[4 * m..];
                continue;
            }
            let scale = f32::from_bits(bits);
            if !scale.is_finite() || scale < 0.0 {
                return Err(corrupt("block scale is not a finite magnitude"));
            }
            let q = rest.get(..m).ok_or(corrupt("truncated block"))?;
            for (b, &v) in o.chunks_exact_mut(4).zip(q) {
                b.copy_from_slice(&(f32::from(v as i8) * scale).to_le_bytes());
            }
            body = &rest[m..];
        }
        if !body.is_empty() {
            return Err(corrupt("bytes after the last block"));
        }
        Ok(())
    }
}
