//! Top-k sparsification: keep the k = ⌈n · per_million / 10⁶⌉ elements of
//! largest magnitude (at least one), send `k: u32`, the k indices (u32,
//! strictly ascending) and the k values (f32, exact bits); the rest decode to 0.
//!
//! The selection is deterministic: the threshold is the k-th largest
//! magnitude (`select_nth_unstable` over the magnitude bits, O(n)); every
//! element above it is kept, then elements equal to it in index order until
//! there are k. NaN counts as the largest magnitude. Pair it with
//! [`super::ErrorFeedback`] so that what is dropped is sent later.

use super::{need_f32, open, write_header, Codec, CodecError, CodecSpec};
use crate::dtype::DType;

pub(super) struct TopK {
    pub per_million: u32,
}

/// How many of `n` elements `per_million` keeps.
pub(super) fn kept(n: usize, per_million: u32) -> usize {
    let k = (n as u128 * u128::from(per_million)).div_ceil(1_000_000) as usize;
    k.clamp(1, n.max(1)).min(n)
}

impl Codec for TopK {
    fn spec(&self) -> CodecSpec {
        CodecSpec::TopK {
            per_million: self.per_million,
        }
    }

    fn encode(
        &self,
        src: &[u8],
        dtype: DType,
        _seed: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        let n = need_f32(self.spec(), dtype, src.len())?;
        write_header(self.spec(), src.len(), out)?;
        let k = kept(n, self.per_million);
        let mags: Vec<u32> = src
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff)
            .collect();
        let thr = if k == 0 {
            u32::MAX
        } else {
            let mut sel = mags.clone();
            *sel.select_nth_unstable(n - k).1
        };
        let above = mags.iter().filter(|&&m| m > thr).count();
        let mut ties = k.saturating_sub(above);
        let at = out.len();
        out.resize(at + 4 + 8 * k, 0);
        let (count, rest) = out[at..].split_at_mut(4);
        count.copy_from_slice(&(k as u32).to_le_bytes());
        let (idx, vals) = rest.split_at_mut(4 * k);
        let mut j = 0;
        for (i, &m) in mags.iter().enumerate() {
            let take = m > thr || (m == thr && ties > 0);
            if !take {
                continue;
            }
            if m == thr {
                ties -= 1;
            }
            idx[4 * j..4 * j + 4].copy_from_slice(&(i as u32).to_le_bytes());
            vals[4 * j..4 * j + 4].copy_from_slice(&src[4 * i..4 * i + 4]);
            j += 1;
        }
        debug_assert_eq!(j, k);
        Ok(())
    }

    fn decode(&self, payload: &[u8], dtype: DType, dst: &mut [u8]) -> Result<(), CodecError> {
        let n = need_f32(self.spec(), dtype, dst.len())?;
        let body = open(self.spec(), payload, dst.len())?;
        let corrupt = |reason| CodecError::Corrupt {
            codec: self.spec(),
            reason,
        };
        let (count, rest) = body
            .split_first_chunk::<4>()
            .ok_or(corrupt("no element count"))?;
        let k = u32::from_le_bytes(*count) as usize;
        if k != kept(n, self.per_million) {
            return Err(corrupt("element count does not match the fraction"));
        }
        if rest.len() != 8 * k {
            return Err(corrupt("body length does not match the element count"));
        }
        let (idx, vals) = rest.split_at(4 * k);
        dst.fill(0);
        let mut next = 0usize;
        for (i, v) in idx.chunks_exact(4).zip(vals.chunks_exact(4)) {
            let i = u32::from_le_bytes([i[0], i[1], i[2], i[3]]) as usize;
            if i < next || i >= n {
                return Err(corrupt("index out of order or out of range"));
            }
            dst[4 * i..4 * i + 4].copy_from_slice(v);
            next = i + 1;
        }
        Ok(())
    }
}
