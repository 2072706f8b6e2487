//! Top-k sparsification: keep the k = ⌈n · per_million / 10⁶⌉ elements of
//! largest magnitude (at least one), send `k: u32`, the k indices (u32,
//! strictly ascending) and the k values (f32, exact bits); the rest decode to 0.
//!
//! The selection is deterministic: the threshold is the k-th largest
//! magnitude (a radix select over the magnitude bits, O(n): `kth_largest`);
//! every element above it is kept, then elements equal to it in index order
//! until there are k. NaN counts as the largest magnitude. Pair it with
//! [`super::ErrorFeedback`] so that what is dropped is sent later.

use std::borrow::Cow;

use super::{begin_f32, need_f32, open, Codec, CodecError, CodecSpec};
use crate::dtype::DType;

pub(super) struct TopK {
    pub per_million: u32,
}

/// How many of `n` elements `per_million` keeps.
pub(super) fn kept(n: usize, per_million: u32) -> usize {
    let k = (n as u128 * u128::from(per_million)).div_ceil(1_000_000) as usize;
    k.clamp(1, n.max(1)).min(n)
}

/// Elements per group of the pick pass (see [`TopK::encode`]).
const GROUP: usize = 16;
/// Histogram bins of the selection: the top bits of the 31-bit magnitude
/// (8 exponent bits and 2 mantissa bits: quarter octaves).
const BIN_BITS: u32 = 10;
const MAG: u32 = 0x7fff_ffff;

/// The f32 bits of `src` (little-endian bytes): borrowed when aligned (chunks
/// of a buffer are), copied otherwise.
fn words(src: &[u8]) -> Cow<'_, [u32]> {
    #[cfg(target_endian = "little")]
    if let Ok(w) = bytemuck::try_cast_slice::<u8, u32>(src) {
        return Cow::Borrowed(w);
    }
    Cow::Owned(
        src.chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    )
}

/// The k-th largest magnitude (1 ≤ k ≤ n) of the f32 bits `w` (magnitude
/// bits in integer order: NaN above ±Inf), and how many elements equal to it
/// are kept (k minus those above it).
///
/// A radix select: one pass histograms the top [`BIN_BITS`] of every
/// magnitude (four interleaved histograms, so that runs of equal bins do not
/// serialise on one counter), the bins are walked down from the top to the one
/// holding the k-th largest, and an exact selection runs over that bin's
/// elements only.
fn kth_largest(w: &[u32], k: usize) -> (u32, usize) {
    const BINS: usize = 1 << BIN_BITS;
    let shift = 31 - BIN_BITS;
    let bin_of = |x: u32| ((x & MAG) >> shift) as usize & (BINS - 1);
    let mut hist = [[0u32; 4]; BINS];
    let mut quads = w.chunks_exact(4);
    for q in &mut quads {
        for (lane, &x) in q.iter().enumerate() {
            hist[bin_of(x)][lane] += 1;
        }
    }
    for &x in quads.remainder() {
        hist[bin_of(x)][0] += 1;
    }
    let mut above = 0usize;
    let mut bin = BINS;
    while bin > 0 {
        bin -= 1;
        let c = hist[bin].iter().map(|&c| c as usize).sum::<usize>();
        if above + c >= k {
            break;
        }
        above += c;
    }
    let mut cand: Vec<u32> = w
        .iter()
        .map(|&x| x & MAG)
        .filter(|&m| bin_of(m) == bin)
        .collect();
    // 1 ≤ k − above ≤ cand.len() by the walk above (k ≤ n).
    if cand.is_empty() {
        return (u32::MAX, 0); // not reached: k ≤ n
    }
    let at = cand.len().saturating_sub(k - above);
    let thr = *cand.select_nth_unstable(at).1;
    let over = cand.iter().filter(|&&m| m > thr).count();
    (thr, k - above - over)
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
        let keep = |n| kept(n, self.per_million);
        let (n, body) = begin_f32(self.spec(), dtype, src, |n| 4 + 8 * keep(n), out)?;
        let k = keep(n);
        let (count, rest) = body.split_at_mut(4);
        count.copy_from_slice(&(k as u32).to_le_bytes());
        if k == 0 {
            return Ok(());
        }
        let w = words(src);
        let (thr, mut ties) = kth_largest(&w, k);
        let (idx, vals) = rest.split_at_mut(4 * k);
        let mut j = 0;
        for (g, xs) in w.chunks(GROUP).enumerate() {
            // Most groups hold nothing to keep: one vectorised test skips them.
            if !xs.iter().fold(false, |any, &x| any | (x & MAG >= thr)) {
                continue;
            }
            for (i, &x) in xs.iter().enumerate() {
                let m = x & MAG;
                if m > thr || (m == thr && ties > 0) {
                    ties -= usize::from(m == thr);
                    let i = (g * GROUP + i) as u32;
                    idx[4 * j..4 * j + 4].copy_from_slice(&i.to_le_bytes());
                    vals[4 * j..4 * j + 4].copy_from_slice(&x.to_le_bytes());
                    j += 1;
                }
            }
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The kept indices by definition: by magnitude bits (descending), ties
    /// in index order, the first k, in ascending order.
    fn reference(x: &[f32], k: usize) -> Vec<u32> {
        let mut order: Vec<usize> = (0..x.len()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(x[i].to_bits() & MAG), i));
        let mut kept: Vec<u32> = order[..k].iter().map(|&i| i as u32).collect();
        kept.sort_unstable();
        kept
    }

    fn value() -> impl Strategy<Value = f32> {
        prop_oneof![
            // Few distinct values: many ties, across and inside bins.
            prop::sample::select(vec![
                0.0,
                -0.0,
                1.0,
                -1.0,
                1.0000001,
                1.5,
                -2.0,
                1e-40,
                f32::INFINITY,
                f32::NEG_INFINITY,
                f32::NAN,
            ]),
            any::<f32>(),
            -1.0f32..1.0,
        ]
    }

    proptest! {
        #[test]
        fn selection_matches_a_full_sort(x in prop::collection::vec(value(), 1..3000), ppm in 1u32..=1_000_000) {
            let src: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
            let k = kept(x.len(), ppm);
            let mut out = Vec::new();
            TopK { per_million: ppm }.encode(&src, DType::F32, 0, &mut out).unwrap();
            let body = &out[crate::codec::HEADER_LEN + 4..];
            let idx: Vec<u32> = body[..4 * k]
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            prop_assert_eq!(idx, reference(&x, k));
        }
    }
}
