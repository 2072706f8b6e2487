use super::*;
use crate::blame::{How, Verdict};
use proptest::prelude::*;
use std::time::Duration;

const MAX: u32 = 1 << 20;

fn allreduce() -> Call {
    Call {
        kind: CallKind::Allreduce,
        dtype: crate::dtype::DType::F32,
        count: 4_194_304,
        reduce: crate::dtype::ReduceOp::Sum,
        root: 0,
        codec: Codec::Raw,
    }
}

fn data(len: u32) -> FrameHeader {
    FrameHeader {
        kind: FrameKind::Data,
        op: 7,
        lane: 3,
        step: 2,
        offset: 4096,
        len,
        call: Some(allreduce()),
    }
}

fn frame_bytes(h: &FrameHeader, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    write_frame(&mut v, h, payload).expect("write to Vec");
    v
}

#[test]
fn round_trip() {
    let pool = BufferPool::new(2);
    let bytes = frame_bytes(&data(5), b"hello");
    let f = read_frame(&mut &bytes[..], MAX, &pool).expect("valid frame");
    assert_eq!(f.header, data(5));
    assert_eq!(&f.payload[..], b"hello");
}

#[test]
fn clean_eof_is_closed_and_partial_header_is_truncated() {
    let pool = BufferPool::new(2);
    assert!(matches!(
        read_frame(&mut &[][..], MAX, &pool),
        Err(ReadError::Closed)
    ));
    let bytes = frame_bytes(&data(5), b"hello");
    for cut in 1..bytes.len() {
        let err = read_frame(&mut &bytes[..cut], MAX, &pool).expect_err("truncated");
        assert!(
            matches!(err, ReadError::Frame(FrameError::Truncated { got, .. }) if got == cut),
            "cut {cut}: {err:?}"
        );
    }
}

#[test]
fn oversized_is_refused_before_reading_payload() {
    let pool = BufferPool::new(2);
    // Only the header is present: the decoder must not wait for or allocate 4 GiB.
    let h = data(u32::MAX).encode();
    let err = read_frame(&mut &h[..], MAX, &pool).expect_err("oversized");
    assert!(matches!(
        err,
        ReadError::Frame(FrameError::Oversized {
            len: u32::MAX,
            max: MAX
        })
    ));
    assert_eq!(pool.allocations(), 0);
}

#[test]
fn each_header_field_is_checked() {
    let good = data(0).encode();
    let mut b = good;
    b[0] = b'X';
    assert!(matches!(
        FrameHeader::decode(&b, MAX),
        Err(FrameError::BadMagic(_))
    ));
    let mut b = good;
    b[4] = 9;
    assert_eq!(
        FrameHeader::decode(&b, MAX),
        Err(FrameError::UnsupportedVersion(9))
    );
    let mut b = good;
    b[20] ^= 1;
    assert_eq!(FrameHeader::decode(&b, MAX), Err(FrameError::BadChecksum));
    // Valid checksums over bad fields still fail on the field.
    let reseal = |mut b: [u8; HEADER_LEN]| {
        let c = fnv1a(&b[..CHECK_AT]);
        b[CHECK_AT..].copy_from_slice(&c.to_le_bytes());
        b
    };
    let mut b = good;
    b[5] = 99;
    assert_eq!(
        FrameHeader::decode(&reseal(b), MAX),
        Err(FrameError::UnknownKind(99))
    );
    let mut b = good;
    b[6] = 1;
    assert_eq!(
        FrameHeader::decode(&reseal(b), MAX),
        Err(FrameError::Reserved(1))
    );
}

#[test]
fn hello_round_trip_and_bad_payloads() {
    let h = Hello {
        session: 42,
        rank: 3,
        world: 8,
        index: 1,
        role: ConnRole::TcpControl,
        shm: Some(("/dev/shm/a".into(), "/dev/shm/b".into())),
    };
    assert_eq!(Hello::decode(&h.encode()), Ok(h.clone()));
    let plain = Hello { shm: None, ..h };
    assert_eq!(Hello::decode(&plain.encode()), Ok(plain.clone()));
    let enc = plain.encode();
    assert!(Hello::decode(&enc[..10]).is_err());
    let mut bad_role = enc.clone();
    bad_role[20] = 7;
    assert!(Hello::decode(&bad_role).is_err());
    let mut bad_path = enc;
    bad_path.extend_from_slice(&[200, 0, b'x']);
    assert!(Hello::decode(&bad_path).is_err());
    assert!(decode_abort(&[1, 2]).is_err());
    let plain = Abort {
        failed: 5,
        report: None,
        verdict: None,
        reason: "gone".into(),
    };
    assert_eq!(decode_abort(&encode_abort(&plain)), Ok(plain));
    for how in [
        How::ConnectionClosed,
        How::Silent(Duration::from_millis(3001)),
        How::NoProgress(Duration::from_secs(5)),
        How::Failed,
    ] {
        let judged = Abort {
            failed: 2,
            report: None,
            verdict: Some(Verdict {
                culprit: 2,
                observer: 0,
                how,
            }),
            reason: "peer rank 2 stopped responding".into(),
        };
        let bytes = encode_abort(&judged);
        assert_eq!(decode_abort(&bytes), Ok(judged));
        assert!(decode_abort(&bytes[..10]).is_err(), "truncated verdict");
    }
    let report = CallReport {
        op: 9,
        rank: 0,
        call: allreduce(),
        other: 3,
        other_call: Call {
            dtype: crate::dtype::DType::I32,
            ..allreduce()
        },
    };
    let typed = Abort {
        failed: 3,
        report: Some(report),
        verdict: Some(Verdict {
            culprit: 3,
            observer: 0,
            how: How::Failed,
        }),
        reason: "operation 9 differs".into(),
    };
    let bytes = encode_abort(&typed);
    assert_eq!(decode_abort(&bytes), Ok(typed));
    assert!(decode_abort(&bytes[..20]).is_err(), "truncated report");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Garbage never panics, never allocates beyond the limit, and either decodes
    /// a frame whose payload fits or returns a typed error.
    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let pool = BufferPool::new(2);
        let mut r = &bytes[..];
        for _ in 0..4 {
            match read_frame(&mut r, 64, &pool) {
                Ok(f) => prop_assert!(f.payload.len() <= 64),
                Err(_) => break,
            }
        }
        let _ = Hello::decode(&bytes);
        let _ = decode_abort(&bytes);
    }

    /// A valid header with random corruption of one byte is either rejected or
    /// (for payload-only fields there are none) decodes to itself.
    #[test]
    fn corrupted_headers_are_rejected(pos in 0usize..HEADER_LEN, flip in 1u8..=255, len in 0u32..64) {
        let mut b = data(len).encode();
        b[pos] ^= flip;
        prop_assert!(FrameHeader::decode(&b, MAX).is_err());
    }

    #[test]
    fn headers_round_trip(
        op: u64, lane: u32, step: u32, offset: u64, len in 0u32..=MAX,
        kind in 0usize..6, dtype in 0usize..7, reduce in 0usize..5, count: u64, root: u32,
    ) {
        let kinds = [
            CallKind::Allreduce, CallKind::Broadcast, CallKind::Allgather,
            CallKind::ReduceScatter, CallKind::Barrier, CallKind::Plan,
        ];
        let call = Call {
            kind: kinds[kind],
            dtype: crate::dtype::DType::ALL[dtype],
            count,
            reduce: crate::dtype::ReduceOp::ALL[reduce],
            root,
            codec: Codec::Raw,
        };
        let h = FrameHeader { kind: FrameKind::Data, op, lane, step, offset, len, call: Some(call) };
        prop_assert_eq!(FrameHeader::decode(&h.encode(), MAX), Ok(h));
    }
}

#[test]
fn the_call_signature_is_checked_and_named() {
    let good = data(8).encode();
    let reseal = |mut b: [u8; HEADER_LEN]| {
        let c = fnv1a(&b[..CHECK_AT]);
        b[CHECK_AT..].copy_from_slice(&c.to_le_bytes());
        b
    };
    for (at, what) in [
        (36, "unknown operation kind"),
        (37, "unknown element type"),
        (38, "unknown reduction"),
        (39, "unknown codec"),
    ] {
        let mut b = good;
        b[at] = 0xee;
        assert_eq!(
            FrameHeader::decode(&reseal(b), MAX),
            Err(FrameError::BadCall(what))
        );
    }
    // A control frame carries no call: all sixteen bytes zero.
    let hello = FrameHeader::control(FrameKind::Hello, 3);
    assert_eq!(FrameHeader::decode(&hello.encode(), MAX), Ok(hello));
    let mut b = hello.encode();
    b[44] = 1;
    assert_eq!(
        FrameHeader::decode(&reseal(b), MAX),
        Err(FrameError::BadCall("unknown operation kind"))
    );
    assert_eq!(allreduce().to_string(), "allreduce(f32, 4194304, sum)");
    let bcast = Call {
        kind: CallKind::Broadcast,
        root: 2,
        count: 1024,
        ..allreduce()
    };
    assert_eq!(bcast.to_string(), "broadcast(f32, 1024, root 2)");
}

/// A stream that has sent `bytes` and then would block forever.
struct ThenSilent<'a>(&'a [u8]);

impl std::io::Read for ThenSilent<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        assert!(
            !self.0.is_empty(),
            "read past what the peer sent: would hang"
        );
        let n = buf.len().min(self.0.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

#[test]
fn a_foreign_protocol_is_refused_after_five_bytes() {
    let pool = BufferPool::new(1);
    let err = read_frame(&mut ThenSilent(b"GET /"), MAX, &pool).expect_err("not ours");
    assert!(
        matches!(err, ReadError::Frame(FrameError::BadMagic(_))),
        "{err}"
    );
    let mut old = data(0).encode();
    old[4] = 1;
    let err = read_frame(&mut ThenSilent(&old[..5]), MAX, &pool).expect_err("version 1");
    assert!(
        matches!(err, ReadError::Frame(FrameError::UnsupportedVersion(1))),
        "{err}"
    );
}

/// A stream that takes at most `most` bytes per call and counts the calls.
struct Stingy {
    out: Vec<u8>,
    most: usize,
    calls: usize,
}

impl Write for Stingy {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[io::IoSlice::new(b)])
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.calls += 1;
        let mut n = 0;
        for b in bufs {
            let take = b.len().min(self.most - n);
            self.out.extend_from_slice(&b[..take]);
            n += take;
            if n == self.most {
                break;
            }
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Small frames are gathered, a large one leaves with them in one vectored
/// write, and partial writes still put every byte on the stream in order.
#[test]
fn frame_writer_gathers_small_frames_and_writes_large_ones_vectored() {
    let pool = BufferPool::new(4);
    let frames: Vec<(FrameHeader, Vec<u8>)> = [10u32, 0, 5000, 100, 70_000, 3]
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            let mut h = data(len);
            h.step = i as u32;
            (h, (0..len).map(|k| (k % 251) as u8 ^ i as u8).collect())
        })
        .collect();
    for most in [usize::MAX, 7, 4096] {
        let mut w = FrameWriter::new(
            Stingy {
                out: Vec::new(),
                most,
                calls: 0,
            },
            64 << 10,
        );
        for (h, p) in &frames[..4] {
            w.frame(h, p).expect("frame");
        }
        assert_eq!(w.inner.calls, 0, "small frames are gathered");
        w.frame(&frames[4].0, &frames[4].1).expect("large frame");
        if most == usize::MAX {
            assert_eq!(w.inner.calls, 1, "one vectored write");
        }
        w.frame(&frames[5].0, &frames[5].1).expect("frame");
        w.flush().expect("flush");
        let mut r = io::Cursor::new(std::mem::take(&mut w.inner.out));
        for (h, p) in &frames {
            let f = read_frame(&mut r, MAX, &pool).expect("read back");
            assert_eq!((f.header, &f.payload[..]), (*h, &p[..]), "most {most}");
        }
        assert!(matches!(
            read_frame(&mut r, MAX, &pool),
            Err(ReadError::Closed)
        ));
    }
}

/// A batch of frames (large and small mixed) leaves in one vectored write
/// with what was gathered before it, in order, and partial writes still put
/// every byte on the stream.
#[test]
fn frame_writer_writes_a_batch_of_frames_in_one_vectored_write() {
    let pool = BufferPool::new(4);
    let frames: Vec<(FrameHeader, Vec<u8>)> = [7u32, 70_000, 12, 0, 40_000, 20_000, 5]
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            let mut h = data(len);
            h.step = i as u32;
            (
                h,
                (0..len).map(|k| (k % 253) as u8 ^ (i as u8 * 3)).collect(),
            )
        })
        .collect();
    for most in [usize::MAX, 5, 65_536] {
        let mut w = FrameWriter::new(
            Stingy {
                out: Vec::new(),
                most,
                calls: 0,
            },
            64 << 10,
        );
        w.frames(&frames[..1]).expect("gathered");
        assert_eq!(w.inner.calls, 0, "a small frame is gathered");
        w.frames(&frames[1..]).expect("batch");
        if most == usize::MAX {
            assert_eq!(w.inner.calls, 1, "one vectored write for the batch");
        }
        w.flush().expect("flush");
        let mut r = io::Cursor::new(std::mem::take(&mut w.inner.out));
        for (h, p) in &frames {
            let f = read_frame(&mut r, MAX, &pool).expect("read back");
            assert_eq!((f.header, &f.payload[..]), (*h, &p[..]), "most {most}");
        }
        assert!(matches!(
            read_frame(&mut r, MAX, &pool),
            Err(ReadError::Closed)
        ));
    }
}

#[test]
fn wan_rate_round_trips_and_rejects_what_it_cannot_mean() {
    let w = WanRate {
        window: 8_765_432_109,
        bytes: 5_000_000,
        interval_us: 200_000,
        limited: true,
        queued: true,
        clear: false,
    };
    assert_eq!(WanRate::decode(&w.encode()), Ok(w));
    let c = WanRate {
        queued: false,
        clear: true,
        ..w
    };
    assert_eq!(WanRate::decode(&c.encode()), Ok(c));
    let bad = |p: &[u8]| match WanRate::decode(p) {
        Err(FrameError::BadPayload { kind, reason }) => {
            assert_eq!(kind, FrameKind::WanRate);
            reason
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(bad(&w.encode()[..23]), "not 24 bytes");
    let mut p = w.encode();
    p[16..20].copy_from_slice(&0u32.to_le_bytes());
    assert_eq!(bad(&p), "empty interval");
    let mut p = w.encode();
    p[20] = 8;
    assert_eq!(bad(&p), "unknown flags");
    p[20] = 6;
    assert_eq!(bad(&p), "queued and clear");
    // The kind itself is known to the header parser.
    let h = FrameHeader::control(FrameKind::WanRate, WanRate::LEN as u32);
    let b = frame_bytes(&h, &w.encode());
    assert_eq!(
        FrameHeader::decode(&b[..HEADER_LEN], 1 << 20).map(|h| h.kind),
        Ok(FrameKind::WanRate)
    );
}

#[test]
fn wan_sending_round_trips_and_rejects_anything_but_one_flag_byte() {
    for s in [WanSending(true), WanSending(false)] {
        assert_eq!(WanSending::decode(&s.encode()), Ok(s));
    }
    for p in [&[][..], &[2], &[1, 0], &[0xff]] {
        assert_eq!(
            WanSending::decode(p),
            Err(FrameError::BadPayload {
                kind: FrameKind::WanSending,
                reason: "not one byte of 0 or 1"
            }),
            "{p:?}"
        );
    }
    let h = FrameHeader::control(FrameKind::WanSending, WanSending::LEN as u32);
    let b = frame_bytes(&h, &WanSending(true).encode());
    assert_eq!(
        FrameHeader::decode(&b[..HEADER_LEN], 1 << 20).map(|h| h.kind),
        Ok(FrameKind::WanSending)
    );
}
