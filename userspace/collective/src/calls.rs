//! Per-call options: the codec of what crosses domains, and the tensor key of
//! its error feedback.
//!
//! Only payloads between ranks of different domains are encoded; inside a
//! domain everything is raw and reductions run in full precision. Lossless
//! codecs (lz4, zstd) apply to every operation. Lossy ones (bf16, fp16, int8,
//! top-k) apply to f32 allreduce and reduce-scatter only, where every rank
//! still ends bit-identical: a sender overwrites what it sends with the value
//! the receiver decodes, so both sides of the cross-domain exchange reduce
//! the same two decoded halves. A lossy allreduce across domains therefore
//! runs the hierarchical algorithm with two equal domains (the one exchange
//! per shard); any other shape is [`CollectiveError::InvalidArgument`], as is a
//! lossy codec on broadcast, allgather or a non-f32 buffer.

use crate::codec::{CodecSpec, TensorKey};
use crate::comm::Communicator;
use crate::dtype::{DType, Element, ReduceOp};
use crate::engine::JobKind;
use crate::error::{Rank, Result};
use crate::schedule::OpKind;

/// Options of one call. The default takes the communicator's
/// [`Options::wan_codec`](crate::Options::wan_codec) (`CAUSEWAY_WAN_CODEC`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallOptions {
    /// The codec across domains (`None`: the communicator's default).
    pub codec: Option<CodecSpec>,
    /// Keep what a lossy codec drops and send it with this tensor's next call
    /// ([`crate::codec::ErrorFeedback`]); every rank must pass the same key.
    pub feedback: Option<TensorKey>,
}

impl CallOptions {
    pub fn codec(codec: CodecSpec) -> Self {
        CallOptions {
            codec: Some(codec),
            feedback: None,
        }
    }
    pub fn with_feedback(mut self, key: TensorKey) -> Self {
        self.feedback = Some(key);
        self
    }
}

/// What the engine is told about the codec of a job.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CallCodec {
    pub spec: CodecSpec,
    pub feedback: Option<TensorKey>,
}

impl Communicator {
    /// The codec a call without options uses: the configured default, except
    /// that a lossy default does not apply to broadcast, allgather, plans or
    /// buffers other than f32 (an integer allreduce stays exact).
    pub(crate) fn default_codec(&self, kind: &JobKind, dtype: DType) -> CallCodec {
        let spec = self.options().wan_codec;
        let applies = match kind {
            JobKind::Op(OpKind::Allreduce | OpKind::ReduceScatter) => {
                dtype == DType::F32 || spec.is_lossless()
            }
            JobKind::Op(OpKind::Broadcast { .. } | OpKind::Allgather) => spec.is_lossless(),
            _ => false,
        };
        CallCodec {
            spec: if applies { spec } else { CodecSpec::None },
            feedback: None,
        }
    }

    fn call_codec(&self, kind: &JobKind, dtype: DType, o: &CallOptions) -> CallCodec {
        match o.codec {
            Some(spec) => CallCodec {
                spec,
                feedback: o.feedback,
            },
            None => CallCodec {
                feedback: o.feedback,
                ..self.default_codec(kind, dtype)
            },
        }
    }

    /// [`allreduce`](Self::allreduce) with per-call options.
    pub fn allreduce_with<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
        o: &CallOptions,
    ) -> Result<()> {
        let kind = JobKind::Op(OpKind::Allreduce);
        let c = self.call_codec(&kind, T::DTYPE, o);
        self.in_place_with(kind, op, buf, c)
    }

    /// [`reduce_scatter_in_place`](Self::reduce_scatter_in_place) with per-call options.
    pub fn reduce_scatter_in_place_with<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
        o: &CallOptions,
    ) -> Result<()> {
        let kind = JobKind::Op(OpKind::ReduceScatter);
        let c = self.call_codec(&kind, T::DTYPE, o);
        self.in_place_with(kind, op, buf, c)
    }

    /// [`allgather_in_place`](Self::allgather_in_place) with per-call options (lossless codecs).
    pub fn allgather_in_place_with<T: Element>(
        &self,
        buf: &mut [T],
        o: &CallOptions,
    ) -> Result<()> {
        if !buf.len().is_multiple_of(self.world_size()) {
            return Err(crate::CollectiveError::InvalidArgument(format!(
                "allgather: {} elements is not a multiple of the world size",
                buf.len()
            )));
        }
        let kind = JobKind::Op(OpKind::Allgather);
        let c = self.call_codec(&kind, T::DTYPE, o);
        self.in_place_with(kind, ReduceOp::Sum, buf, c)
    }

    /// [`broadcast`](Self::broadcast) with per-call options (lossless codecs).
    pub fn broadcast_with<T: Element>(
        &self,
        buf: &mut [T],
        root: Rank,
        o: &CallOptions,
    ) -> Result<()> {
        if root >= self.world_size() {
            return Err(crate::CollectiveError::InvalidArgument(format!(
                "root {root} ≥ world size {}",
                self.world_size()
            )));
        }
        let kind = JobKind::Op(OpKind::Broadcast { root });
        let c = self.call_codec(&kind, T::DTYPE, o);
        self.in_place_with(kind, ReduceOp::Sum, buf, c)
    }

    /// Forgets the error-feedback residual of tensor `key` (all with `None`),
    /// in order with the calls submitted before. Local: each rank resets its own.
    pub fn reset_feedback(&self, key: Option<TensorKey>) -> Result<()> {
        self.in_place_with(
            JobKind::ResetFeedback(key),
            ReduceOp::Sum,
            &mut [0u8; 0],
            CallCodec::default(),
        )
    }
}
