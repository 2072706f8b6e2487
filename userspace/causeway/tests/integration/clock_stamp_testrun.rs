//! BPF_PROG_TEST_RUN tests of the kernel clock stamps: the XDP program
//! stamps t2/t4 into arriving probes, the TC egress program t1/t3 into
//! leaving ones, on the host timescale (CLOCK_TAI through the synthetic
//! transform, the same arithmetic as `SyncClock::apply`); anything that is
//! not a zero-checksum IPv4 probe on the clock port is left byte for byte.

use aya::Ebpf;
use bpf_maps::clock::{stamp_offset, CLOCK_PORT, PROBE_LEN, STAMP_SET_KERNEL};
use causeway_test_support::{
    bpf::{self, SkbCtx, TC_EGRESS, XDP_CLASSIFIER},
    frames::*,
    require_root,
};

use causeway::clock::{
    maps::ClockMaps,
    probe::{Kind, Probe, KERNEL},
    source::raw_tai_now,
    SyncClock,
};

struct Harness {
    ebpf: Ebpf,
    maps: ClockMaps,
}

impl Harness {
    fn new(clock: SyncClock, port: u16) -> Self {
        let ebpf = bpf::load(
            causeway::ebpf_object::EBPF_OBJECT,
            &[XDP_CLASSIFIER],
            &[TC_EGRESS],
        );
        let mut maps = ClockMaps::from_ebpf(&ebpf).expect("clock maps");
        maps.set_config(&clock.stamp_config(port)).expect("config");
        Harness { ebpf, maps }
    }

    /// Runs `frame` through the XDP (ingress) or TC (egress) program;
    /// returns the frame as it left and the host-clock window of the run.
    fn run(&self, frame: &[u8], egress: bool, clock: SyncClock) -> (Vec<u8>, u64, u64) {
        let before = clock.apply(raw_tai_now());
        let out = if egress {
            bpf::run_tc(&self.ebpf, TC_EGRESS, frame, &SkbCtx::default(), 1).1
        } else {
            bpf::run_xdp_out(&self.ebpf, XDP_CLASSIFIER, frame).1
        };
        let after = clock.apply(raw_tai_now());
        (out, before, after)
    }
}

/// Ethernet + IPv4 (DF) + UDP (checksum field `csum`) around `payload`.
fn ipv4_udp(sport: u16, dport: u16, csum: u16, payload: &[u8]) -> Vec<u8> {
    let ip = V4 {
        frag: DONT_FRAG,
        ..V4::new([10, 1, 0, 1], [10, 1, 0, 2], 17)
    };
    cat(&[
        &eth(&[], ETH_IPV4),
        &ipv4(ip, &udp_with(sport, dport, payload, csum)),
    ])
}

/// Ethernet + IPv6 + UDP from port 40000 (checksum 0x1234) around `payload`.
fn ipv6_udp(dport: u16, payload: &[u8]) -> Vec<u8> {
    let ip = V6 {
        flow: 0,
        ..V6::new("fd00::1", "fd00::2", 17)
    };
    cat(&[
        &eth(&[], ETH_IPV6),
        &ipv6(ip, &udp_with(40000, dport, payload, 0x1234)),
    ])
}

const PAYLOAD: usize = 14 + 20 + 8;

fn probe(kind: Kind) -> Vec<u8> {
    let mut p = Probe::new(kind, 9, 1, 0x1122_3344_5566_7788);
    p.stamps[causeway::clock::probe::USER][0] = 123;
    p.encode().to_vec()
}

#[test]
fn probes_get_kernel_stamps_in_the_right_slot_on_the_host_timescale() {
    require_root!("probes_get_kernel_stamps_in_the_right_slot_on_the_host_timescale");
    // A synthetic clock 25 ms ahead that runs 80 ppm slow, epoch an hour ago.
    let clock = SyncClock {
        offset_ns: 25_000_000,
        drift_ppb: -80_000,
        epoch_ns: raw_tai_now() - 3_600_000_000_000,
    };
    let h = Harness::new(clock, CLOCK_PORT);
    let cases = [
        (Kind::Request, true, 0usize, 40000, CLOCK_PORT),
        (Kind::Request, false, 1, 40000, CLOCK_PORT),
        (Kind::Response, true, 2, CLOCK_PORT, 40000),
        (Kind::Response, false, 3, CLOCK_PORT, 40000),
    ];
    for (kind, egress, slot, sport, dport) in cases {
        let frame = ipv4_udp(sport, dport, 0, &probe(kind));
        let (out, before, after) = h.run(&frame, egress, clock);
        assert_eq!(out.len(), frame.len());
        let p = Probe::decode(&out[PAYLOAD..]).expect("still a valid probe");
        let stamp = p
            .kernel_stamp(slot)
            .unwrap_or_else(|| panic!("{kind:?} egress={egress}: slot t{} not stamped", slot + 1));
        assert!(
            before <= stamp && stamp <= after,
            "{kind:?}: stamp {stamp} outside [{before}, {after}]"
        );
        for other in (0..4).filter(|&s| s != slot) {
            assert_eq!(p.kernel_stamp(other), None);
        }
        // Only the stamp and the flags changed.
        let off = PAYLOAD + stamp_offset(STAMP_SET_KERNEL, slot);
        let mut expect = frame.clone();
        expect[off..off + 8].copy_from_slice(&p.stamps[KERNEL][slot].to_be_bytes());
        expect[PAYLOAD + 6..PAYLOAD + 8].copy_from_slice(&p.flags.to_be_bytes());
        assert_eq!(out, expect);
    }
    let c = h.maps.counters().expect("counters");
    assert_eq!((c.rx_stamped, c.tx_stamped, c.skipped), (2, 2, 0));
}

#[test]
fn frames_that_are_not_stampable_probes_pass_untouched() {
    require_root!("frames_that_are_not_stampable_probes_pass_untouched");
    let clock = SyncClock::IDENTITY;
    let h = Harness::new(clock, CLOCK_PORT);
    let req = probe(Kind::Request);
    let mut bad_magic = req.clone();
    bad_magic[0] ^= 0xff;
    let follow = probe(Kind::FollowUp);
    // (frame, counted as skipped)
    let cases: Vec<(&str, Vec<u8>, bool)> = vec![
        (
            "udp checksum set",
            ipv4_udp(40000, CLOCK_PORT, 0xbeef, &req),
            true,
        ),
        (
            "other port",
            ipv4_udp(40000, CLOCK_PORT + 1, 0, &req),
            false,
        ),
        (
            "truncated probe",
            ipv4_udp(40000, CLOCK_PORT, 0, &req[..PROBE_LEN - 1]),
            true,
        ),
        (
            "bad magic",
            ipv4_udp(40000, CLOCK_PORT, 0, &bad_magic),
            true,
        ),
        ("follow-up", ipv4_udp(40000, CLOCK_PORT, 0, &follow), false),
        ("ipv6", ipv6_udp(CLOCK_PORT, &req), true),
    ];
    let mut skipped = 0;
    for (name, frame, counted) in cases {
        for egress in [false, true] {
            let (out, _, _) = h.run(&frame, egress, clock);
            assert_eq!(out, frame, "{name} (egress={egress}) was modified");
            skipped += u64::from(counted);
        }
    }
    let c = h.maps.counters().expect("counters");
    assert_eq!((c.rx_stamped, c.tx_stamped, c.skipped), (0, 0, skipped));
}

#[test]
fn stamping_is_off_until_a_port_is_configured() {
    require_root!("stamping_is_off_until_a_port_is_configured");
    let clock = SyncClock::IDENTITY;
    let mut h = Harness::new(clock, 0);
    let frame = ipv4_udp(40000, CLOCK_PORT, 0, &probe(Kind::Request));
    assert_eq!(h.run(&frame, false, clock).0, frame);
    h.maps
        .set_config(&clock.stamp_config(CLOCK_PORT))
        .expect("config");
    assert_ne!(h.run(&frame, false, clock).0, frame);
}

#[test]
fn tagged_probes_still_verify_after_the_kernel_stamps_them() {
    require_root!("tagged_probes_still_verify_after_the_kernel_stamps_them");
    // The tag excludes exactly the slots and flags the real programs write
    // (`bpf_maps::clock`, "Authentication"): verify after each hook.
    use causeway::clock::auth::{seal, verify, ProbeKey};
    let clock = SyncClock::IDENTITY;
    let h = Harness::new(clock, CLOCK_PORT);
    let key = ProbeKey::from_bytes([0x5a; 32]);
    let cases = [
        (Kind::Request, true, 40000, CLOCK_PORT),
        (Kind::Request, false, 40000, CLOCK_PORT),
        (Kind::Response, true, CLOCK_PORT, 40000),
        (Kind::Response, false, CLOCK_PORT, 40000),
    ];
    for (kind, egress, sport, dport) in cases {
        let mut sealed = [0u8; PROBE_LEN];
        sealed.copy_from_slice(&probe(kind));
        seal(&key, &mut sealed);
        let frame = ipv4_udp(sport, dport, 0, &sealed);
        let (out, _, _) = h.run(&frame, egress, clock);
        assert_ne!(out, frame, "{kind:?} egress={egress}: not stamped");
        let mut got = [0u8; PROBE_LEN];
        got.copy_from_slice(&out[PAYLOAD..PAYLOAD + PROBE_LEN]);
        assert_eq!(verify(&key, &got), Ok(()), "{kind:?} egress={egress}");
        Probe::decode(&got).expect("still a valid probe");
    }
}
