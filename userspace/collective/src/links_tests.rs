//! Queueing data frames on a peer's connections.

use std::sync::mpsc::{channel, Receiver};

use super::*;

/// A link with one latency and one bulk connection; their queues' ends.
fn link() -> (PeerLink, Receiver<Out>, Receiver<Out>) {
    let (lat, lat_rx) = channel();
    let (bulk, bulk_rx) = channel();
    let link = PeerLink {
        data: vec![bulk.clone()],
        latency: Some(lat.clone()),
        all: vec![lat, bulk],
        next: 0,
        writers: Vec::new(),
        closers: Vec::new(),
        open: 2,
        heard: Arc::new(Heard {
            epoch: Instant::now(),
            nanos: AtomicU64::new(0),
        }),
        stripe: None,
        small: None,
        registers: false,
    };
    (link, lat_rx, bulk_rx)
}

fn frame() -> (FrameHeader, PooledBuf) {
    let mut h = FrameHeader::control(FrameKind::Data, 1);
    h.op = 7;
    (h, PooledBuf::unpooled(vec![42]))
}

fn kinds(rx: &Receiver<Out>) -> Vec<FrameKind> {
    rx.try_iter()
        .filter_map(|o| match o {
            Out::Frame(h, _, _) => Some(h.kind),
            _ => None,
        })
        .collect()
}

#[test]
fn a_small_transfer_sent_twice_goes_as_a_copy_on_both_connections() {
    let (mut l, lat, bulk) = link();
    let (h, p) = frame();
    assert!(l.send_data(h, p.into(), true, true, false, None));
    assert_eq!(kinds(&lat), [FrameKind::DataCopy]);
    assert_eq!(kinds(&bulk), [FrameKind::DataCopy]);
}

/// The race CI met: the peer took the first copy, finished and said
/// goodbye, which closed our writer of the other connection before the
/// second copy was queued. The send happened; it is not a lost peer.
#[test]
fn one_copy_queued_is_a_send_whichever_connection_has_closed() {
    let (mut l, lat, bulk) = link();
    drop(bulk);
    let (h, p) = frame();
    assert!(l.send_data(h, p.into(), true, true, false, None));
    assert_eq!(kinds(&lat), [FrameKind::DataCopy]);

    let (mut l, lat, bulk) = link();
    drop(lat);
    let (h, p) = frame();
    assert!(l.send_data(h, p.into(), true, true, false, None));
    assert_eq!(kinds(&bulk), [FrameKind::DataCopy]);
}

#[test]
fn a_send_with_no_connection_left_fails() {
    let (mut l, lat, bulk) = link();
    drop((lat, bulk));
    let (h, p) = frame();
    assert!(!l.send_data(h, p.into(), true, true, false, None));
    let (h, p) = frame();
    assert!(!l.send_data(h, p.into(), true, false, false, None));
    let (h, p) = frame();
    assert!(!l.send_data(h, p.into(), false, false, false, None));
}

/// A domain peer's `WanRate` and `WanSending` frames go to the estimates;
/// a malformed one is an error (the reader closes that connection).
#[test]
fn rate_frames_are_decoded_and_a_malformed_one_is_refused() {
    let f = |kind, payload: Vec<u8>| Frame {
        header: FrameHeader::control(kind, payload.len() as u32),
        payload: PooledBuf::unpooled(payload),
    };
    assert!(to_inbox(None, 1, &f(FrameKind::WanSending, vec![1])).is_ok());
    assert!(to_inbox(None, 1, &f(FrameKind::WanSending, vec![2])).is_err());
    let w = WanRate {
        window: 5,
        bytes: 1,
        interval_us: 200_000,
        limited: false,
        queued: false,
        clear: true,
    };
    assert!(to_inbox(None, 1, &f(FrameKind::WanRate, w.encode().to_vec())).is_ok());
    assert!(to_inbox(None, 1, &f(FrameKind::WanRate, vec![0; 3])).is_err());
}
