//! The payload of an Abort frame: who failed, why in words, and, when ranks
//! made different calls, both calls (so every rank can report them typed).
//!
//! Layout: failed rank (u32), report flag (u8), the 48-byte [`CallReport`] if
//! the flag is 1, then the reason (UTF-8, at most 1 KiB).

use super::call::CALL_LEN;
use super::{le, Call, FrameError, FrameKind};

/// Operation `op` was called as `call` by `rank` and as `other_call` by `other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallReport {
    pub op: u64,
    pub rank: u32,
    pub call: Call,
    pub other: u32,
    pub other_call: Call,
}

const REPORT_LEN: usize = 8 + 4 + CALL_LEN + 4 + CALL_LEN;

/// A decoded Abort payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abort {
    pub failed: u32,
    pub report: Option<CallReport>,
    pub reason: String,
}

pub fn encode_abort(a: &Abort) -> Vec<u8> {
    let mut v = a.failed.to_le_bytes().to_vec();
    match &a.report {
        None => v.push(0),
        Some(r) => {
            v.push(1);
            v.extend_from_slice(&r.op.to_le_bytes());
            v.extend_from_slice(&r.rank.to_le_bytes());
            v.extend_from_slice(&Call::encode(Some(&r.call)));
            v.extend_from_slice(&r.other.to_le_bytes());
            v.extend_from_slice(&Call::encode(Some(&r.other_call)));
        }
    }
    v.extend_from_slice(&a.reason.as_bytes()[..a.reason.len().min(1024)]);
    v
}

pub fn decode_abort(p: &[u8]) -> Result<Abort, FrameError> {
    let bad = |reason| FrameError::BadPayload {
        kind: FrameKind::Abort,
        reason,
    };
    if p.len() < 5 {
        return Err(bad("shorter than 5 bytes"));
    }
    let failed = u32::from_le_bytes(le(p, 0));
    let (report, rest) = match p[4] {
        0 => (None, &p[5..]),
        1 if p.len() >= 5 + REPORT_LEN => {
            let r = &p[5..5 + REPORT_LEN];
            let call = |at: usize| -> Result<Call, FrameError> {
                Call::decode(&le(r, at))?.ok_or(bad("call report without a call"))
            };
            let report = CallReport {
                op: u64::from_le_bytes(le(r, 0)),
                rank: u32::from_le_bytes(le(r, 8)),
                call: call(12)?,
                other: u32::from_le_bytes(le(r, 12 + CALL_LEN)),
                other_call: call(16 + CALL_LEN)?,
            };
            (Some(report), &p[5 + REPORT_LEN..])
        }
        1 => return Err(bad("truncated call report")),
        _ => return Err(bad("unknown report flag")),
    };
    Ok(Abort {
        failed,
        report,
        reason: String::from_utf8_lossy(rest).into_owned(),
    })
}
