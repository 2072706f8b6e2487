//! A peer that speaks garbage: the decoder rejects its frames with a typed error,
//! closes that connection, and the operation fails naming the peer: no panic,
//! no hang, no allocation of what the header claims.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::world::*;
use causeway_collective::store::{StoreClient, StoreServer};
use causeway_collective::wire::{
    write_frame, Call, CallKind, Codec, ConnRole, FrameHeader, FrameKind, Hello,
};
use causeway_collective::{CollectiveError, Communicator, ReduceOp};

/// Joins as rank 1 of a world of 2 by hand, then sends `poison` on its first connection.
fn fake_rank_one(store_addr: SocketAddr, poison: &[u8]) -> Vec<TcpStream> {
    let mut store = StoreClient::connect(store_addr, Duration::from_secs(10)).expect("store");
    assert_eq!(store.add("claim/1", 1).expect("claim"), 1);
    let session_hex = store
        .get("session", Duration::from_secs(10))
        .expect("session");
    let session =
        u64::from_str_radix(std::str::from_utf8(&session_hex).expect("utf-8"), 16).expect("hex");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let me = listener.local_addr().expect("addr");
    // A registration as a real rank makes it: address, host, domain, wire options.
    let mut entry = format!("{me}\nfake-host\ndomain=d0\n");
    for (k, v) in test_options().wire_settings() {
        entry += &format!("wire:{k}={v}\n");
    }
    store.set("rank/1", entry.as_bytes()).expect("publish");
    let entry = store
        .get("rank/0", Duration::from_secs(10))
        .expect("rank 0");
    let addr: SocketAddr = std::str::from_utf8(&entry)
        .expect("utf-8")
        .lines()
        .next()
        .expect("addr")
        .parse()
        .expect("addr");
    let mut conns = Vec::new();
    // Rank 0 ("d1") and this fake ("d0") sit in different domains: the
    // bulk streams plus the latency connection.
    let o = test_options();
    let streams = o.streams_wan + usize::from(o.wan_latency_stream);
    for index in 0..streams as u32 {
        let mut s = TcpStream::connect(addr).expect("connect to rank 0");
        let h = Hello {
            session,
            rank: 1,
            world: 2,
            index,
            role: ConnRole::TcpData,
            shm: None,
        };
        let p = h.encode();
        write_frame(
            &mut s,
            &FrameHeader::control(FrameKind::Hello, p.len() as u32),
            &p,
        )
        .expect("hello");
        conns.push(s);
    }
    std::thread::sleep(Duration::from_millis(200)); // let rank 0 start its allreduce
    conns[0].write_all(poison).expect("poison");
    conns
}

fn rank_zero_sees(poison: Vec<u8>) -> CollectiveError {
    rank_zero_calling(poison, |c, v| c.allreduce(v, ReduceOp::Sum))
}

/// Rank 0 runs `call` (twice) while the fake rank 1 sends `poison`; the first error.
pub fn rank_zero_calling(
    poison: Vec<u8>,
    call: impl Fn(&Communicator, &mut [f32]) -> causeway_collective::Result<()> + Send,
) -> CollectiveError {
    let server = StoreServer::bind("127.0.0.1:0".parse().expect("addr")).expect("store");
    let addr = server.addr();
    let b = Communicator::builder(0, 2)
        .master(addr)
        .host_store(false)
        .host_id("real-host")
        .domain("d1")
        .options(test_options());
    std::thread::scope(|s| {
        let real = s.spawn(move || {
            let c = b.build().expect("rank 0 joins");
            let mut v = vec![1.0f32; 1000];
            let err = call(&c, &mut v).expect_err("peer is hostile");
            let later = call(&c, &mut v).expect_err("communicator stays failed");
            assert_eq!(later.peer(), Some(1));
            err
        });
        let _conns = fake_rank_one(addr, &poison);
        real.join().expect("rank 0 thread")
    })
}

#[test]
fn garbage_bytes_close_the_connection_and_name_the_peer() {
    let err = rank_zero_sees(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n....................".to_vec());
    assert!(
        matches!(&err, CollectiveError::PeerFailed { peer: 1, detail } if detail.contains("bad magic")),
        "{err}"
    );
}

#[test]
fn oversized_frame_is_refused_before_allocation() {
    let h = FrameHeader {
        kind: FrameKind::Data,
        op: 0,
        lane: 0,
        step: 0,
        offset: 0,
        len: u32::MAX,
        call: None,
    };
    let err = rank_zero_sees(h.encode().to_vec());
    assert!(
        matches!(&err, CollectiveError::PeerFailed { peer: 1, detail } if detail.contains("exceeds the limit")),
        "{err}"
    );
}

#[test]
fn well_formed_frame_for_a_wrong_range_is_a_mismatch() {
    // A valid Data frame for op 0, lane 0, step 0 whose payload does not fit the expected receive.
    let payload = vec![0u8; 4096];
    let h = FrameHeader {
        kind: FrameKind::Data,
        op: 0,
        lane: 0,
        step: 0,
        offset: 1 << 40,
        len: payload.len() as u32,
        // Rank 0's own call, so that only the range is wrong.
        call: Some(Call {
            kind: CallKind::Allreduce,
            dtype: causeway_collective::DType::F32,
            count: 1000,
            reduce: ReduceOp::Sum,
            root: 0,
            codec: Codec::Raw,
        }),
    };
    let mut bytes = h.encode().to_vec();
    bytes.extend_from_slice(&payload);
    let err = rank_zero_sees(bytes);
    assert!(
        matches!(&err, CollectiveError::Mismatch { peer: 1, .. }),
        "{err}"
    );
}
