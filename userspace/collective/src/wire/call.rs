//! The operation signature every data frame carries: which call the chunk
//! belongs to (kind, element type, element count, reduction, root, codec), so
//! that a rank receiving a chunk of a different call fails instead of mixing it in.
//!
//! Encoded in 16 header bytes: kind, dtype, reduce, codec (one byte each),
//! root (u32), count (u64). A kind of 0 means "no call" (control frames).

use std::fmt;

use super::FrameError;
use crate::dtype::{DType, ReduceOp};

/// What was called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CallKind {
    Allreduce = 1,
    Broadcast = 2,
    Allgather = 3,
    ReduceScatter = 4,
    Barrier = 5,
    /// A fixed plan the library runs itself (start-up probes).
    Plan = 6,
}

/// How chunk payloads that cross domains are encoded ([`crate::codec`]; the
/// codec's parameters travel in each payload's own header). Inside a domain
/// payloads are always raw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Codec {
    /// Little-endian elements as they are.
    #[default]
    Raw = 0,
    Bf16 = 1,
    Fp16 = 2,
    Int8 = 3,
    TopK = 4,
    Lz4 = 5,
    Zstd = 6,
}

impl Codec {
    const ALL: [Codec; 7] = [
        Codec::Raw,
        Codec::Bf16,
        Codec::Fp16,
        Codec::Int8,
        Codec::TopK,
        Codec::Lz4,
        Codec::Zstd,
    ];

    /// The signature's codec for `spec` (same id as the payload header's).
    pub fn of(spec: crate::codec::CodecSpec) -> Codec {
        let id = spec.id();
        Codec::ALL
            .into_iter()
            .find(|c| *c as u8 == id)
            .unwrap_or_default()
    }
}

/// One collective call as every rank must make it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Call {
    pub kind: CallKind,
    pub dtype: DType,
    /// Elements in the working buffer.
    pub count: u64,
    pub reduce: ReduceOp,
    /// The root of a broadcast (0 otherwise).
    pub root: u32,
    pub codec: Codec,
}

pub(super) const CALL_LEN: usize = 16;

fn dtype_code(d: DType) -> u8 {
    d as u8
}

fn reduce_code(r: ReduceOp) -> u8 {
    match r {
        ReduceOp::Sum => 1,
        ReduceOp::Avg => 2,
        ReduceOp::Min => 3,
        ReduceOp::Max => 4,
        ReduceOp::Prod => 5,
    }
}

impl Call {
    /// The 16 header bytes of `call` (all zero for none).
    pub(super) fn encode(call: Option<&Call>) -> [u8; CALL_LEN] {
        let mut b = [0u8; CALL_LEN];
        if let Some(c) = call {
            b[0] = c.kind as u8;
            b[1] = dtype_code(c.dtype);
            b[2] = reduce_code(c.reduce);
            b[3] = c.codec as u8;
            b[4..8].copy_from_slice(&c.root.to_le_bytes());
            b[8..16].copy_from_slice(&c.count.to_le_bytes());
        }
        b
    }

    pub(super) fn decode(b: &[u8; CALL_LEN]) -> Result<Option<Call>, FrameError> {
        let bad = FrameError::BadCall;
        let kind = match b[0] {
            0 if b.iter().all(|&x| x == 0) => return Ok(None),
            1 => CallKind::Allreduce,
            2 => CallKind::Broadcast,
            3 => CallKind::Allgather,
            4 => CallKind::ReduceScatter,
            5 => CallKind::Barrier,
            6 => CallKind::Plan,
            _ => return Err(bad("unknown operation kind")),
        };
        let dtype = DType::ALL
            .into_iter()
            .find(|d| dtype_code(*d) == b[1])
            .ok_or(bad("unknown element type"))?;
        let reduce = ReduceOp::ALL
            .into_iter()
            .find(|r| reduce_code(*r) == b[2])
            .ok_or(bad("unknown reduction"))?;
        let codec = Codec::ALL
            .into_iter()
            .find(|c| *c as u8 == b[3])
            .ok_or(bad("unknown codec"))?;
        let mut root = [0u8; 4];
        root.copy_from_slice(&b[4..8]);
        let mut count = [0u8; 8];
        count.copy_from_slice(&b[8..16]);
        Ok(Some(Call {
            kind,
            dtype,
            count: u64::from_le_bytes(count),
            reduce,
            root: u32::from_le_bytes(root),
            codec,
        }))
    }
}

impl fmt::Display for Call {
    /// `allreduce(f32, 4194304, sum)`, `broadcast(f32, 1024, root 2)`, `barrier()`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = format!("{:?}", self.dtype).to_ascii_lowercase();
        let r = format!("{:?}", self.reduce).to_ascii_lowercase();
        match self.kind {
            CallKind::Allreduce => write!(f, "allreduce({d}, {}, {r})", self.count)?,
            CallKind::ReduceScatter => write!(f, "reduce_scatter({d}, {}, {r})", self.count)?,
            CallKind::Broadcast => write!(f, "broadcast({d}, {}, root {})", self.count, self.root)?,
            CallKind::Allgather => write!(f, "allgather({d}, {})", self.count)?,
            CallKind::Barrier => write!(f, "barrier()")?,
            CallKind::Plan => write!(f, "plan({} bytes)", self.count)?,
        }
        match self.codec {
            Codec::Raw => Ok(()),
            c => write!(f, " with {c:?} across domains"),
        }
    }
}
