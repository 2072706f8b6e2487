//! bf16 and fp16: every f32 cast to 16 bits, round to nearest even.
//!
//! bf16 is a branch-free bit loop (the compiler vectorises it; `half::bf16`
//! is the reference it is tested against); fp16 goes through `half`'s slice
//! conversion, which uses the CPU's F16C instructions when present, in blocks
//! of [`BLOCK`] elements through aligned stack buffers (chunks on the wire
//! are not aligned).

use half::f16;
use half::slice::HalfFloatSliceExt;

use super::{begin_f32, f32_at, need_f32, open, Codec, CodecError, CodecSpec};
use crate::dtype::DType;

const BLOCK: usize = 512;

pub(super) struct Bf16;
pub(super) struct Fp16;

/// f32 bits → bf16 bits, round to nearest even; a NaN stays a (quiet) NaN.
#[inline(always)]
pub(super) fn bf16_bits(b: u32) -> u16 {
    let nan = (b & 0x7fff_ffff) > 0x7f80_0000;
    let rounded = (b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16) as u16;
    let quiet = ((b >> 16) as u16) | 0x0040;
    if nan {
        quiet
    } else {
        rounded
    }
}

impl Codec for Bf16 {
    fn spec(&self) -> CodecSpec {
        CodecSpec::Bf16
    }

    fn encode(
        &self,
        src: &[u8],
        dtype: DType,
        _seed: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        let (_, dst) = begin_f32(self.spec(), dtype, src, |n| 2 * n, out)?;
        // Aligned (the usual case, and little-endian): typed slices vectorise best.
        #[cfg(target_endian = "little")]
        if let (Ok(x), Ok(o)) = (
            bytemuck::try_cast_slice::<u8, u32>(src),
            bytemuck::try_cast_slice_mut::<u8, u16>(&mut *dst),
        ) {
            for (o, &b) in o.iter_mut().zip(x) {
                *o = bf16_bits(b);
            }
            return Ok(());
        }
        for (o, i) in dst.chunks_exact_mut(2).zip(src.chunks_exact(4)) {
            let b = u32::from_le_bytes([i[0], i[1], i[2], i[3]]);
            o.copy_from_slice(&bf16_bits(b).to_le_bytes());
        }
        Ok(())
    }

    fn decode(&self, payload: &[u8], dtype: DType, dst: &mut [u8]) -> Result<(), CodecError> {
        let n = need_f32(self.spec(), dtype, dst.len())?;
        let body = open(self.spec(), payload, dst.len())?;
        if body.len() != 2 * n {
            return Err(CodecError::Corrupt {
                codec: self.spec(),
                reason: "body is not two bytes per element",
            });
        }
        for (o, i) in dst.chunks_exact_mut(4).zip(body.chunks_exact(2)) {
            let b = u32::from(u16::from_le_bytes([i[0], i[1]])) << 16;
            o.copy_from_slice(&b.to_le_bytes());
        }
        Ok(())
    }
}

impl Codec for Fp16 {
    fn spec(&self) -> CodecSpec {
        CodecSpec::Fp16
    }

    fn encode(
        &self,
        src: &[u8],
        dtype: DType,
        _seed: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        let (_, dst) = begin_f32(self.spec(), dtype, src, |n| 2 * n, out)?;
        #[cfg(target_endian = "little")]
        if let (Ok(x), Ok(o)) = (
            bytemuck::try_cast_slice::<u8, f32>(src),
            bytemuck::try_cast_slice_mut::<u8, f16>(&mut *dst),
        ) {
            o.convert_from_f32_slice(x);
            return Ok(());
        }
        let mut xs = [0f32; BLOCK];
        let mut hs = [f16::ZERO; BLOCK];
        for (o, i) in dst.chunks_mut(2 * BLOCK).zip(src.chunks(4 * BLOCK)) {
            let m = i.len() / 4;
            for (k, x) in xs[..m].iter_mut().enumerate() {
                *x = f32_at(i, k);
            }
            hs[..m].convert_from_f32_slice(&xs[..m]);
            for (b, h) in o.chunks_exact_mut(2).zip(&hs[..m]) {
                b.copy_from_slice(&h.to_bits().to_le_bytes());
            }
        }
        Ok(())
    }

    fn decode(&self, payload: &[u8], dtype: DType, dst: &mut [u8]) -> Result<(), CodecError> {
        let n = need_f32(self.spec(), dtype, dst.len())?;
        let body = open(self.spec(), payload, dst.len())?;
        if body.len() != 2 * n {
            return Err(CodecError::Corrupt {
                codec: self.spec(),
                reason: "body is not two bytes per element",
            });
        }
        #[cfg(target_endian = "little")]
        if let (Ok(h), Ok(o)) = (
            bytemuck::try_cast_slice::<u8, f16>(body),
            bytemuck::try_cast_slice_mut::<u8, f32>(dst),
        ) {
            h.convert_to_f32_slice(o);
            return Ok(());
        }
        let mut xs = [0f32; BLOCK];
        let mut hs = [f16::ZERO; BLOCK];
        for (o, i) in dst.chunks_mut(4 * BLOCK).zip(body.chunks(2 * BLOCK)) {
            let m = i.len() / 2;
            for (h, b) in hs[..m].iter_mut().zip(i.chunks_exact(2)) {
                *h = f16::from_bits(u16::from_le_bytes([b[0], b[1]]));
            }
            hs[..m].convert_to_f32_slice(&mut xs[..m]);
            for (b, x) in o.chunks_exact_mut(4).zip(&xs[..m]) {
                b.copy_from_slice(&x.to_le_bytes());
            }
        }
        Ok(())
    }
}
