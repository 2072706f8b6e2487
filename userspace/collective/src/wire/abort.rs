//! The payload of an Abort frame: who failed, why in words, how that was
//! decided and by whom (a [`Verdict`], so every rank can weigh it), and, when
//! ranks made different calls, both calls (so every rank can report them typed).
//!
//! Layout: failed rank (u32), flags (u8: bit 0 a call report, bit 1 a
//! verdict), the 48-byte [`CallReport`] if bit 0, the 9-byte verdict if bit 1
//! (observer u32, how u8: 1 connection closed, 2 silent, 3 no progress, 4
//! failed; how long in ms u32), then the reason (UTF-8, at most 1 KiB).

use std::time::Duration;

use super::call::CALL_LEN;
use super::{le, Call, FrameError, FrameKind};
use crate::blame::{How, Verdict};

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
const VERDICT_LEN: usize = 4 + 1 + 4;

/// A decoded Abort payload. A `verdict`'s culprit is `failed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abort {
    pub failed: u32,
    pub report: Option<CallReport>,
    pub verdict: Option<Verdict>,
    pub reason: String,
}

fn how_code(h: How) -> (u8, u32) {
    let ms = |d: Duration| u32::try_from(d.as_millis()).unwrap_or(u32::MAX);
    match h {
        How::ConnectionClosed => (1, 0),
        How::Silent(d) => (2, ms(d)),
        How::NoProgress(d) => (3, ms(d)),
        How::Failed => (4, 0),
    }
}

pub fn encode_abort(a: &Abort) -> Vec<u8> {
    let mut v = a.failed.to_le_bytes().to_vec();
    v.push(u8::from(a.report.is_some()) | (u8::from(a.verdict.is_some()) << 1));
    match &a.report {
        None => {}
        Some(r) => {
            v.extend_from_slice(&r.op.to_le_bytes());
            v.extend_from_slice(&r.rank.to_le_bytes());
            v.extend_from_slice(&Call::encode(Some(&r.call)));
            v.extend_from_slice(&r.other.to_le_bytes());
            v.extend_from_slice(&Call::encode(Some(&r.other_call)));
        }
    }
    if let Some(d) = &a.verdict {
        let (code, ms) = how_code(d.how);
        v.extend_from_slice(&(d.observer as u32).to_le_bytes());
        v.push(code);
        v.extend_from_slice(&ms.to_le_bytes());
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
    let flags = p[4];
    if flags > 3 {
        return Err(bad("unknown report flag"));
    }
    let mut rest = &p[5..];
    let report = if flags & 1 == 1 {
        let r = rest.get(..REPORT_LEN).ok_or(bad("truncated call report"))?;
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
        rest = &rest[REPORT_LEN..];
        Some(report)
    } else {
        None
    };
    let verdict = if flags & 2 == 2 {
        let d = rest.get(..VERDICT_LEN).ok_or(bad("truncated verdict"))?;
        let after = Duration::from_millis(u64::from(u32::from_le_bytes(le(d, 5))));
        let how = match d[4] {
            1 => How::ConnectionClosed,
            2 => How::Silent(after),
            3 => How::NoProgress(after),
            4 => How::Failed,
            _ => return Err(bad("unknown verdict")),
        };
        rest = &rest[VERDICT_LEN..];
        Some(Verdict {
            culprit: failed as usize,
            observer: u32::from_le_bytes(le(d, 0)) as usize,
            how,
        })
    } else {
        None
    };
    Ok(Abort {
        failed,
        report,
        verdict,
        reason: String::from_utf8_lossy(rest).into_owned(),
    })
}
