//! Authenticated probes on virtual time: two hosts with a shared key run
//! real exchanges (the "kernel" writes its stamp slots after the tag was
//! computed, as the eBPF programs do); forged, modified, replayed and
//! untagged probes are refused and counted and never move an estimate.

use std::{collections::BTreeMap, net::SocketAddr};

use super::{
    auth::{covered_bytes, seal, verify, AuthReject, KeyError, PeerGuard, ProbeKey, ReplayWindow},
    estimator::{Estimate, Estimator, EstimatorConfig},
    exchange::{respond, Requester, RxStamps},
    probe::{Kind, Probe, KERNEL, USER},
    sim::{VirtualClock, EPOCH_NS},
    source::Source,
};
use bpf_maps::clock::{
    stamp_offset, FLAG_AUTH, FLAG_KERNEL_T1, PROBE_LEN, PROBE_OFF_AUTH, PROBE_OFF_FLAGS,
};

/// One-way delays (symmetric: a fixed asymmetry is invisible to any
/// two-way method) and the 5 µs between a socket call and its hook.
const FWD_NS: f64 = 500_000.0;
const BACK_NS: f64 = 500_000.0;
const HOOK_NS: f64 = 5_000.0;
const ROUND_NS: f64 = 100_000_000.0;

fn key(seed: u8) -> ProbeKey {
    let mut k = [0u8; 32];
    for (i, b) in k.iter_mut().enumerate() {
        *b = seed.wrapping_add(i as u8);
    }
    ProbeKey::from_bytes(k)
}

fn peer() -> SocketAddr {
    "10.1.0.2:7339".parse().expect("literal address")
}

/// What the eBPF program does in flight: stamp and flag, after the tag.
fn kernel_stamp(b: &mut [u8; PROBE_LEN], slot: usize, ns: u64) {
    let o = stamp_offset(KERNEL, slot);
    b[o..o + 8].copy_from_slice(&ns.to_be_bytes());
    let f =
        u16::from_be_bytes([b[PROBE_OFF_FLAGS], b[PROBE_OFF_FLAGS + 1]]) | FLAG_KERNEL_T1 << slot;
    b[PROBE_OFF_FLAGS..PROBE_OFF_FLAGS + 2].copy_from_slice(&f.to_be_bytes());
}

/// Host A (requester) and host B (responder) sharing a key; B's clock is
/// 3 ms ahead and 20 ppm fast.
struct Pair {
    a: VirtualClock,
    b: VirtualClock,
    requester: Requester,
    a_guard: PeerGuard,
    b_guard: PeerGuard,
    estimators: BTreeMap<Source, Estimator>,
    now: f64,
    /// Responses as they crossed the wire, in order.
    captured: Vec<[u8; PROBE_LEN]>,
    captured_requests: Vec<[u8; PROBE_LEN]>,
}

impl Pair {
    fn new() -> Self {
        let estimators = [Source::Kernel, Source::Userspace]
            .into_iter()
            .map(|s| {
                (
                    s,
                    Estimator::new(EstimatorConfig::default()).expect("config"),
                )
            })
            .collect();
        Pair {
            a: VirtualClock {
                offset_ns: 0.0,
                drift_ppm: 0.0,
            },
            b: VirtualClock {
                offset_ns: 3e6,
                drift_ppm: 20.0,
            },
            requester: {
                let mut r = Requester::new(1, 0xA11CE, 1_000_000_000);
                r.check_kernel_egress_stamps();
                r
            },
            a_guard: PeerGuard::new(Some(key(1))),
            b_guard: PeerGuard::new(Some(key(1))),
            estimators,
            now: 1e9,
            captured: Vec::new(),
            captured_requests: Vec::new(),
        }
    }

    /// A sends a request; it arrives at B (kernel t1, t2 written). Returns
    /// the request as B's socket reads it.
    fn send_request(&mut self) -> [u8; PROBE_LEN] {
        self.send_request_rewritten(|_| {})
    }

    /// As `send_request`, with `on_wire` applied to the request in flight.
    fn send_request_rewritten(
        &mut self,
        on_wire: impl Fn(&mut [u8; PROBE_LEN]),
    ) -> [u8; PROBE_LEN] {
        let t = self.now;
        let req = self.requester.request(peer(), self.a.read(t));
        let mut b = req.encode();
        self.a_guard.seal(&mut b);
        kernel_stamp(&mut b, 0, self.a.read(t + HOOK_NS));
        on_wire(&mut b);
        self.captured_requests.push(b);
        kernel_stamp(&mut b, 1, self.b.read(t + HOOK_NS + FWD_NS));
        b
    }

    /// B admits and answers `req`; the response as A's socket reads it.
    fn answer(&mut self, req: &[u8; PROBE_LEN]) -> [u8; PROBE_LEN] {
        // True time of the request's arrival at B's hook.
        let t = self.now + HOOK_NS + FWD_NS;
        self.b_guard.admit(req).expect("B admits a genuine request");
        let probe = Probe::decode(req).expect("a valid request");
        let rx = RxStamps {
            user: self.b.read(t + HOOK_NS),
            software: None,
        };
        let resp = respond(&probe, 2, rx, self.b.read(t + 15e3), false);
        let mut b = resp.encode();
        self.b_guard.seal(&mut b);
        kernel_stamp(&mut b, 2, self.b.read(t + 15e3 + HOOK_NS));
        self.captured.push(b);
        kernel_stamp(&mut b, 3, self.a.read(t + 15e3 + HOOK_NS + BACK_NS));
        b
    }

    /// A receives `resp`: samples added, or why it was refused.
    fn deliver(&mut self, resp: &[u8; PROBE_LEN]) -> Result<usize, String> {
        let probe = Probe::decode(resp).map_err(|e| e.to_string())?;
        self.a_guard.admit(resp).map_err(|e| e.to_string())?;
        let rx = RxStamps {
            user: self
                .a
                .read(self.now + FWD_NS + BACK_NS + 15e3 + 3.0 * HOOK_NS),
            software: None,
        };
        let samples = self
            .requester
            .receive(peer(), &probe, rx)
            .map_err(|e| e.to_string())?;
        for (s, sample) in &samples {
            if let Some(e) = self.estimators.get_mut(s) {
                e.add(*sample).map_err(|e| e.to_string())?;
            }
        }
        Ok(samples.len())
    }

    fn round(&mut self) {
        let req = self.send_request();
        let resp = self.answer(&req);
        assert_eq!(self.deliver(&resp), Ok(2), "a genuine exchange");
        self.now += ROUND_NS;
    }

    fn estimates(&self) -> Vec<Estimate> {
        let at = self.a.read(self.now);
        self.estimators
            .values()
            .map(|e| e.estimate(at).expect("an estimate"))
            .collect()
    }

    fn true_offset(&self) -> f64 {
        let at = self.a.read(self.now);
        (self.b.read(self.a.true_at(at)) as i128 - at as i128) as f64
    }
}

fn converged() -> Pair {
    let mut p = Pair::new();
    for _ in 0..100 {
        p.round();
    }
    p
}

#[test]
fn authenticated_exchanges_converge_within_the_bound() {
    let p = converged();
    let truth = p.true_offset();
    for e in p.estimates() {
        let err = (e.offset_ns - truth).abs();
        assert!(
            err <= e.error_bound_ns,
            "error {err} > bound {}",
            e.error_bound_ns
        );
        assert!(e.error_bound_ns < 1e6, "bound {}", e.error_bound_ns);
    }
    assert_eq!(p.a_guard.counters, Default::default());
    assert_eq!(p.b_guard.counters, Default::default());
}

#[test]
fn a_forged_response_is_refused_and_the_genuine_one_still_counts() {
    let mut p = converged();
    let before = p.estimates();
    let req = p.send_request();
    // The attacker races the responder with a response 5 ms off, tagged
    // with a key of its own.
    let mut forged = Probe::decode(&req).expect("request");
    forged = respond(
        &forged,
        2,
        RxStamps {
            user: p.b.read(p.now) + 5_000_000,
            software: None,
        },
        p.b.read(p.now) + 5_000_100,
        false,
    );
    let mut bytes = forged.encode();
    seal(&key(9), &mut bytes);
    kernel_stamp(&mut bytes, 3, p.a.read(p.now + FWD_NS));
    assert_eq!(p.deliver(&bytes), Err(AuthReject::Forged.to_string()));
    assert_eq!(p.estimates(), before, "a forged probe moved the estimate");
    let resp = p.answer(&req);
    assert_eq!(p.deliver(&resp), Ok(2));
    assert_eq!(p.a_guard.counters.forged, 1);
}

#[test]
fn a_tag_over_a_modified_field_is_refused() {
    let mut p = converged();
    let before = p.estimates();
    let req = p.send_request();
    let mut resp = p.answer(&req);
    // Shift the responder's user t2 by 5 ms, keeping the tag.
    let o = stamp_offset(USER, 1);
    let t2 = u64::from_be_bytes(resp[o..o + 8].try_into().expect("8 bytes")) + 5_000_000;
    resp[o..o + 8].copy_from_slice(&t2.to_be_bytes());
    assert_eq!(p.deliver(&resp), Err(AuthReject::Forged.to_string()));
    assert_eq!(p.estimates(), before);
    assert_eq!(p.a_guard.counters.forged, 1);
}

#[test]
fn only_the_kernel_written_bytes_are_outside_the_tag() {
    let k = key(1);
    for kind in [Kind::Request, Kind::Response, Kind::FollowUp] {
        let mut probe = Probe::new(kind, 5, 1, 77);
        probe.stamps[USER][0] = 10;
        let mut sealed = probe.encode();
        seal(&k, &mut sealed);
        let excluded: Vec<usize> = match kind {
            Kind::Request => (0..2).collect(),
            Kind::Response => (2..4).collect(),
            Kind::FollowUp => vec![],
        };
        for i in 0..PROBE_LEN {
            for bit in 0..8 {
                let mut b = sealed;
                b[i] ^= 1 << bit;
                let in_slot = excluded.iter().any(|&s| {
                    let o = stamp_offset(KERNEL, s);
                    (o..o + 8).contains(&i)
                });
                let is_flag = excluded
                    .iter()
                    .any(|&s| i == PROBE_OFF_FLAGS + 1 && 1u16 << bit == FLAG_KERNEL_T1 << s);
                let want = if in_slot || is_flag {
                    Ok(())
                } else if i == PROBE_OFF_FLAGS + 1 && 1u16 << bit == FLAG_AUTH {
                    Err(AuthReject::Unauthenticated)
                } else {
                    Err(AuthReject::Forged)
                };
                assert_eq!(verify(&k, &b), want, "{kind:?} byte {i} bit {bit}");
            }
        }
    }
}

#[test]
fn replayed_probes_are_refused() {
    let mut p = converged();
    let before = p.estimates();
    // The latest response again (its request was answered), and one from
    // the first round (long older than the window).
    let last = *p.captured.last().expect("captured");
    let first = p.captured[0];
    for old in [last, first] {
        let mut b = old;
        kernel_stamp(&mut b, 3, p.a.read(p.now));
        assert_eq!(p.deliver(&b), Err(AuthReject::Replayed.to_string()));
    }
    // A replayed request is refused by the responder before it is answered.
    let mut req = *p.captured_requests.last().expect("captured");
    kernel_stamp(&mut req, 1, p.b.read(p.now));
    assert_eq!(p.b_guard.admit(&req), Err(AuthReject::Replayed));
    assert_eq!(p.estimates(), before);
    assert_eq!(p.a_guard.counters.replayed, 2);
    assert_eq!(p.b_guard.counters.replayed, 1);
    // Fresh exchanges still go through.
    p.round();
}

#[test]
fn untagged_probes_are_refused_when_the_peer_has_a_key() {
    let mut p = converged();
    let before = p.estimates();
    let req = p.send_request();
    let genuine = p.answer(&req);
    // The same response with the tag stripped (flag cleared, field zeroed).
    let mut stripped = genuine;
    stripped[PROBE_OFF_FLAGS + 1] &= !(FLAG_AUTH as u8);
    stripped[PROBE_OFF_AUTH..].fill(0);
    assert_eq!(
        p.deliver(&stripped),
        Err(AuthReject::Unauthenticated.to_string())
    );
    // Clearing only the flag leaves a non-zero auth field: malformed.
    let mut half = genuine;
    half[PROBE_OFF_FLAGS + 1] &= !(FLAG_AUTH as u8);
    assert!(p.deliver(&half).is_err());
    assert_eq!(p.estimates(), before);
    assert_eq!(p.a_guard.counters.unauthenticated, 1);
    assert_eq!(p.deliver(&genuine), Ok(2));
}

#[test]
fn a_peer_without_a_key_passes_everything_the_codec_accepts() {
    let mut g = PeerGuard::new(None);
    let b = Probe::new(Kind::Request, 1, 1, 1).encode();
    assert!(!g.requires_auth());
    assert_eq!(g.admit(&b), Ok(()));
    assert_eq!(g.admit(&b), Ok(()));
    let mut sealed = b;
    g.seal(&mut sealed);
    assert_eq!(sealed, b, "no key: nothing to seal with");
}

#[test]
fn the_replay_window_accepts_each_sequence_once() {
    let mut w = ReplayWindow::default();
    assert!(w.accept(10));
    assert!(!w.accept(10));
    assert!(w.accept(12));
    assert!(w.accept(11), "late but inside the window");
    assert!(!w.accept(11));
    assert!(w.accept(12 + 63));
    assert!(!w.accept(12), "63 behind and seen");
    assert!(!w.accept(11), "64 behind: outside the window");
    assert!(w.accept(1_000));
    assert!(!w.accept(12 + 63), "after a jump, older than the window");
}

#[test]
fn the_tag_matches_an_independent_hmac_sha256() {
    // Computed with Python's hmac/hashlib over the request of
    // `bpf_maps::clock`'s layout (seq 9, sender 1, nonce 0x1122334455667788,
    // user t1 = 123, flags FLAG_AUTH), key 01 02 .. 20.
    let mut k = [0u8; 32];
    for (i, b) in k.iter_mut().enumerate() {
        *b = i as u8 + 1;
    }
    let mut p = Probe::new(Kind::Request, 9, 1, 0x1122_3344_5566_7788);
    p.stamps[USER][0] = 123;
    let mut b = p.encode();
    seal(&ProbeKey::from_bytes(k), &mut b);
    let hex: String = b[PROBE_OFF_AUTH..]
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect();
    assert_eq!(hex, "d5899140142657b736a945ac67080263");
    // Kernel stamps written afterwards do not change what is covered.
    let mut stamped = b;
    kernel_stamp(&mut stamped, 0, EPOCH_NS);
    assert_eq!(covered_bytes(&stamped), covered_bytes(&b));
}

#[test]
fn keys_parse_from_hex_and_never_print() {
    let hex = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF\n";
    let k = ProbeKey::parse_hex(hex).expect("a key");
    assert_eq!(format!("{k:?}"), "ProbeKey(<redacted>)");
    assert_eq!(
        ProbeKey::parse_hex("abcd"),
        Err(KeyError::Length {
            expected: 64,
            found: 4
        })
    );
    assert_eq!(
        ProbeKey::parse_hex(&hex.replace('c', "x")),
        Err(KeyError::NotHex(25))
    );
    assert_eq!(ProbeKey::parse_hex(&"0".repeat(64)), Err(KeyError::Zero));
}

#[test]
fn rewritten_kernel_egress_stamps_cannot_push_the_kernel_source_out_of_bounds() {
    // The kernel t1 crosses the wire outside the tag: an on-path attacker
    // moves it 5 ms either way. The tag still verifies, but the kernel
    // sample contradicts covered stamps and is dropped (the userspace
    // sample of the same exchange is used).
    let mut p = converged();
    let before = p.estimates();
    for shift in [-5_000_000i64, 5_000_000] {
        let req = p.send_request_rewritten(|b| {
            let o = stamp_offset(KERNEL, 0);
            let v = u64::from_be_bytes(b[o..o + 8].try_into().expect("8 bytes"));
            b[o..o + 8].copy_from_slice(&v.wrapping_add_signed(shift).to_be_bytes());
        });
        let resp = p.answer(&req);
        assert_eq!(
            p.deliver(&resp),
            Ok(1),
            "shift {shift}: only the userspace sample"
        );
    }
    assert_eq!(p.requester.counters.kernel_inconsistent, 2);
    let after = p.estimates();
    assert_eq!(before[0], after[0], "the kernel estimate moved");
    p.round();
}
