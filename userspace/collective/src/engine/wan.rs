//! The codec of one call's payloads between domains: encodes what a send
//! carries across the WAN (chunk by chunk, on the engine thread, while the
//! connection's writer thread is still sending the previous chunk) and decodes
//! what arrives, into pooled buffers of at most one frame.

use crate::calls::CallCodec;
use crate::codec::{
    encode_in_place, Codec, CodecError, CodecSpec, ErrorFeedback, Header, TensorKey, TensorPart,
};
use crate::dtype::DType;
use crate::error::{CollectiveError, Rank, Result};
use crate::exec::SendChunk;
use crate::pool::{BufferPool, PooledBuf};

pub(super) struct WanCodec {
    codec: Box<dyn Codec + Send + Sync>,
    spec: CodecSpec,
    feedback: Option<TensorKey>,
    /// The largest chunk a payload may claim to decode to.
    max_raw: usize,
    /// Encoding scratch, reused.
    enc: Vec<u8>,
}

/// Stochastic rounding's seed for a send: the same on every run of the same call.
pub(super) fn seed(op: u64, s: &SendChunk, me: Rank) -> u64 {
    op.rotate_left(32)
        ^ ((s.lane as u64) << 40)
        ^ ((s.step as u64) << 20)
        ^ s.offset
        ^ ((me as u64) << 56)
}

impl WanCodec {
    /// `None` for no codec; chunks are at most `max_raw` bytes.
    pub fn new(c: CallCodec, max_raw: usize) -> Result<Option<WanCodec>> {
        let codec = c
            .spec
            .codec()
            .map_err(|e| CollectiveError::InvalidArgument(e.to_string()))?;
        Ok(codec.map(|codec| WanCodec {
            codec,
            spec: c.spec,
            feedback: c.feedback,
            max_raw,
            enc: Vec::new(),
        }))
    }

    /// Encodes `bytes`. A lossy codec overwrites them with what the receiver
    /// will decode, so both sides reduce the same values; with a feedback key
    /// and `part` = (elements in the buffer, first element of `bytes`) the
    /// residual of that tensor part is added first and updated.
    pub fn encode(
        &mut self,
        bytes: &mut [u8],
        part: Option<(usize, usize)>,
        dtype: DType,
        seed: u64,
        feedback: &mut ErrorFeedback,
        pool: &BufferPool,
    ) -> std::result::Result<PooledBuf, CodecError> {
        self.enc.clear();
        match (self.spec.is_lossless(), self.feedback, part) {
            (true, _, _) => self.codec.encode(bytes, dtype, seed, &mut self.enc)?,
            (false, Some(key), Some((total, at))) => {
                let part = TensorPart { key, total, at };
                feedback.encode(part, self.codec.as_ref(), bytes, seed, &mut self.enc)?
            }
            (false, _, _) => encode_in_place(self.codec.as_ref(), bytes, seed, &mut self.enc)?,
        }
        let mut p = pool.take(self.enc.len());
        p.copy_from_slice(&self.enc);
        Ok(p)
    }

    /// Decodes `payload` into a pooled chunk of the length its header claims
    /// (refused above one frame: no allocation the peer chooses).
    pub fn decode(
        &self,
        payload: &[u8],
        dtype: DType,
        pool: &BufferPool,
    ) -> std::result::Result<PooledBuf, CodecError> {
        let (h, _) = Header::decode(payload)?;
        let raw = h.raw_len as usize;
        if raw > self.max_raw {
            return Err(CodecError::WrongLength {
                expected: self.max_raw,
                got: raw,
            });
        }
        let mut out = pool.take(raw);
        self.codec.decode(payload, dtype, &mut out)?;
        Ok(out)
    }
}
