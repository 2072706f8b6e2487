//! Matching responses to requests: unsolicited, replayed, forged and late
//! datagrams never produce samples.

use std::net::SocketAddr;

use super::{
    exchange::{follow_up, respond, Reject, Requester, RxStamps},
    probe::{Kind, Probe, KERNEL, SOFTWARE, USER},
    source::Source,
};

const TIMEOUT: u64 = 1_000_000_000;

fn peer() -> SocketAddr {
    "10.0.0.2:7339".parse().expect("literal address")
}

fn rx(user: u64, software: Option<u64>) -> RxStamps {
    RxStamps { user, software }
}

#[test]
fn a_full_exchange_yields_one_sample_per_source() {
    let mut r = Requester::new(1, 77, TIMEOUT);
    let mut req = r.request(peer(), 1_000);
    r.tx_software(req.seq, 1_010);
    // The kernels stamp t1 (our egress) and t2 (their ingress).
    req.stamps[KERNEL][0] = 1_020;
    req.stamps[KERNEL][1] = 5_000;
    req.flags |= 0b11;
    let req = Probe::decode(&req.encode()).expect("valid request");
    let mut resp = respond(&req, 2, rx(5_050, Some(5_010)), 5_100, true);
    resp.stamps[KERNEL][2] = 5_120;
    resp.stamps[KERNEL][3] = 9_000;
    resp.flags |= 0b1100;
    let resp = Probe::decode(&resp.encode()).expect("valid response");
    let got = r
        .receive(peer(), &resp, rx(9_100, Some(9_020)))
        .expect("matches");
    let sources: Vec<Source> = got.iter().map(|(s, _)| *s).collect();
    assert_eq!(sources, vec![Source::Kernel, Source::Userspace]);
    assert_eq!(
        (got[0].1.t1, got[0].1.t2, got[0].1.t3, got[0].1.t4),
        (1_020, 5_000, 5_120, 9_000)
    );
    assert_eq!(
        (got[1].1.t1, got[1].1.t2, got[1].1.t3, got[1].1.t4),
        (1_000, 5_050, 5_100, 9_100)
    );
    // Two-step: the software sample completes with the follow-up.
    let f = follow_up(&resp, 5_110);
    let got = r
        .receive(peer(), &f, rx(9_200, None))
        .expect("follow-up matches");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, Source::SoTimestamping);
    assert_eq!(
        (got[0].1.t1, got[0].1.t2, got[0].1.t3, got[0].1.t4),
        (1_010, 5_010, 5_110, 9_020)
    );
    assert_eq!(r.pending(), 0);
}

#[test]
fn unsolicited_replayed_and_forged_responses_are_counted_and_ignored() {
    let mut r = Requester::new(1, 77, TIMEOUT);
    let req = r.request(peer(), 1_000);
    let resp = respond(&req, 2, rx(5_000, None), 5_100, false);

    let mut wrong_seq = resp;
    wrong_seq.seq += 100;
    assert_eq!(
        r.receive(peer(), &wrong_seq, rx(9_000, None)),
        Err(Reject::Unsolicited)
    );
    let stranger: SocketAddr = "10.0.0.9:7339".parse().expect("literal address");
    assert_eq!(
        r.receive(stranger, &resp, rx(9_000, None)),
        Err(Reject::Unsolicited)
    );
    let mut forged = resp;
    forged.nonce ^= 1;
    assert_eq!(
        r.receive(peer(), &forged, rx(9_000, None)),
        Err(Reject::WrongNonce)
    );
    assert_eq!(
        r.receive(peer(), &req, rx(9_000, None)),
        Err(Reject::WrongKind)
    );

    assert_eq!(
        r.receive(peer(), &resp, rx(9_000, None)).map(|v| v.len()),
        Ok(1)
    );
    assert_eq!(
        r.receive(peer(), &resp, rx(9_500, None)),
        Err(Reject::Replayed)
    );
    let c = r.counters;
    assert_eq!(
        (
            c.sent,
            c.completed,
            c.unsolicited,
            c.wrong_nonce,
            c.replayed,
            c.wrong_kind
        ),
        (1, 1, 2, 1, 1, 1)
    );
}

#[test]
fn late_responses_after_expiry_are_ignored() {
    let mut r = Requester::new(1, 77, TIMEOUT);
    let req = r.request(peer(), 1_000);
    r.expire(1_000 + TIMEOUT + 1);
    assert_eq!(r.pending(), 0);
    assert_eq!(r.counters.expired, 1);
    let resp = respond(&req, 2, rx(5_000, None), 5_100, false);
    assert_eq!(
        r.receive(peer(), &resp, rx(9_000, None)),
        Err(Reject::Unsolicited)
    );
}

#[test]
fn a_follow_up_without_its_response_is_unsolicited() {
    let mut r = Requester::new(1, 77, TIMEOUT);
    let req = r.request(peer(), 1_000);
    let resp = respond(&req, 2, rx(5_000, Some(4_990)), 5_100, true);
    assert_eq!(
        r.receive(peer(), &follow_up(&resp, 5_110), rx(9_000, None)),
        Err(Reject::Unsolicited)
    );
    assert_eq!(resp.kind, Kind::Response);
    assert_eq!(resp.stamps[SOFTWARE][1], 4_990);
    assert_eq!(resp.stamps[USER], [1_000, 5_000, 5_100, 0]);
}
