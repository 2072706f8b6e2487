//! Error feedback: what a lossy codec dropped from a tensor is kept (the
//! residual) and added to the same tensor's next encoding, so nothing is lost
//! for good, only delayed (Seide et al. 2014; Karimireddy et al. 2019).
//!
//! Residuals are keyed per tensor ([`TensorKey`], chosen by the caller) and
//! cover the whole tensor; a chunk at element offset `at` uses its part. A
//! tensor whose length changes starts from a zero residual; [`ErrorFeedback::reset`]
//! drops one.

use std::collections::HashMap;

use super::{Codec, CodecError};
use crate::dtype::DType;

/// Names a tensor across calls (e.g. a parameter's index).
pub type TensorKey = u64;

/// Which part of which tensor a chunk is: elements `at..` of tensor `key`,
/// which has `total` elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorPart {
    pub key: TensorKey,
    pub total: usize,
    pub at: usize,
}

/// Residuals of every tensor encoded with feedback so far.
#[derive(Debug, Default)]
pub struct ErrorFeedback {
    residuals: HashMap<TensorKey, Vec<f32>>,
}

/// Encodes `x` (f32 bytes) into `out`, then overwrites `x` with what the
/// receiver will decode: the sender reduces with the same value as everyone.
pub fn encode_in_place(
    codec: &dyn Codec,
    x: &mut [u8],
    seed: u64,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    let start = out.len();
    codec.encode(x, DType::F32, seed, out)?;
    codec.decode(&out[start..], DType::F32, x)
}

impl ErrorFeedback {
    pub fn new() -> Self {
        Self::default()
    }

    /// Encodes the elements `x` (f32 bytes) of `part` with its residual added;
    /// `x` becomes the decoded value, the residual what was lost (`x + r − decoded`).
    pub fn encode(
        &mut self,
        part: TensorPart,
        codec: &dyn Codec,
        x: &mut [u8],
        seed: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        let TensorPart { key, total, at } = part;
        let n = x.len() / 4;
        if at.checked_add(n).is_none_or(|end| end > total) || !x.len().is_multiple_of(4) {
            return Err(CodecError::WrongLength {
                expected: total.saturating_sub(at) * 4,
                got: x.len(),
            });
        }
        let r = self.residuals.entry(key).or_default();
        if r.len() != total {
            *r = vec![0.0; total];
        }
        let r = &mut r[at..at + n];
        for (b, ri) in x.chunks_exact_mut(4).zip(r.iter()) {
            let v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]) + ri;
            b.copy_from_slice(&v.to_le_bytes());
        }
        let before: Vec<f32> = x
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        encode_in_place(codec, x, seed, out)?;
        for ((ri, b), v) in r.iter_mut().zip(x.chunks_exact(4)).zip(before) {
            let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            let lost = v - d;
            // A non-finite value is not fed back (it would poison every later call).
            *ri = if lost.is_finite() { lost } else { 0.0 };
        }
        Ok(())
    }

    /// Forgets tensor `key`'s residual; true if there was one.
    pub fn reset(&mut self, key: TensorKey) -> bool {
        self.residuals.remove(&key).is_some()
    }

    /// Forgets every residual.
    pub fn clear(&mut self) {
        self.residuals.clear();
    }

    /// Tensor `key`'s residual, if any.
    pub fn residual(&self, key: TensorKey) -> Option<&[f32]> {
        self.residuals.get(&key).map(Vec::as_slice)
    }
}
