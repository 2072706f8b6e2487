//! BPF_PROG_TEST_RUN tests of the TC egress program: class, DSCP, ECN,
//! priority and bucket decisions on crafted frames. The kernel copies
//! `priority` and `mark` of the `__sk_buff` back into `ctx_out`.

use aya::Ebpf;
use bpf_maps::{counters::UNCLASSIFIED_SLOT, shaper::EgressCounters};
use causeway_test_support::{
    bpf::{self, SkbCtx, TC_EGRESS},
    frames::*,
    require_root,
};

use causeway::{
    classifier::{maps::ClassifierMaps, PortRange, Rule, RuleSet, Verdict},
    shaper::{
        bucket::frame_cost,
        config::{ClassShaping, OverAction, ShapingTable},
        htb::leaf_classid,
        maps::ShaperMaps,
        BucketParams,
    },
};

const TC_ACT_SHOT: u32 = 2;
/// `TC_ACT_UNSPEC` (-1), i.e. `TCX_NEXT`: the frame continues.
const PASS: u32 = u32::MAX;

struct Harness {
    ebpf: Ebpf,
    maps: ShaperMaps,
}

impl Harness {
    fn new() -> Self {
        let ebpf = bpf::load(causeway::ebpf_object::EBPF_OBJECT, &[], &[TC_EGRESS]);
        let maps = ShaperMaps::from_ebpf(&ebpf).expect("shaper maps");
        Self { ebpf, maps }
    }

    /// Runs one frame; returns (verdict, frame out, skb priority out).
    fn run(&self, frame: &[u8], priority_in: u32) -> (u32, Vec<u8>, u32) {
        self.run_wire(frame, priority_in, 0)
    }

    /// Like `run`, with the qdisc length `wire_len` (0: the frame length).
    fn run_wire(&self, frame: &[u8], priority_in: u32, wire_len: u32) -> (u32, Vec<u8>, u32) {
        let ctx = SkbCtx::default()
            .with_priority(priority_in)
            .with_wire_len(wire_len);
        let (r, out, ctx_out) = bpf::run_tc(&self.ebpf, TC_EGRESS, frame, &ctx, 1);
        (r.return_value, out, ctx_out.priority())
    }

    fn counters(&self, slot: u32) -> EgressCounters {
        self.maps.counters().expect("counters")[slot as usize]
    }
}

/// Ethernet + IPv4 (type of service `tos`, DF) + UDP 5000 → 7000 with
/// `payload` bytes of 0xab, UDP checksum 0.
fn ipv4_udp(tos: u8, payload: usize) -> Vec<u8> {
    let ip = V4 {
        frag: DONT_FRAG,
        ..V4::new([10, 1, 0, 1], [10, 1, 0, 2], 17).with_tos(tos)
    };
    cat(&[
        &eth(&[], ETH_IPV4),
        &ipv4(ip, &udp_with(5000, 7000, &vec![0xab; payload], 0)),
    ])
}

/// Ethernet + IPv6 (`traffic_class`, `flow`) + UDP 5000 → 7000 with
/// `payload` bytes of 0xab.
fn ipv6_udp(traffic_class: u8, flow: u32, payload: usize) -> Vec<u8> {
    let ip = V6 {
        flow,
        ..V6::new("fd00::1", "fd00::2", 17).with_traffic_class(traffic_class)
    };
    cat(&[
        &eth(&[], ETH_IPV6),
        &ipv6(ip, &udp_with(5000, 7000, &vec![0xab; payload], 0)),
    ])
}

fn assert_ipv4_checksum_valid(frame: &[u8]) {
    assert!(ipv4_checksum_valid(frame), "IPv4 checksum");
}

fn shaping(over: OverAction, dscp: Option<u8>, priority: Option<u32>) -> ClassShaping {
    let bucket = Some(BucketParams::new(100_000_000, 64 * 1024, 1514).expect("bucket"));
    ClassShaping {
        bucket,
        over,
        dscp,
        priority,
    }
}

#[test]
fn unconfigured_program_counts_and_leaves_frames_alone() {
    require_root!();
    let h = Harness::new();
    let frame = ipv4_udp(0x28, 100);
    let (verdict, out, prio) = h.run(&frame, 7);
    assert_eq!(verdict, PASS);
    assert_eq!(out, frame);
    assert_eq!(prio, 7);
    let c = h.counters(0);
    assert_eq!((c.sent_packets, c.sent_bytes), (1, frame.len() as u64));
    // ARP is not IP: unclassified, untouched.
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
    arp.resize(60, 0);
    let (verdict, out, _) = h.run(&arp, 0);
    assert_eq!((verdict, out), (PASS, arp));
    assert_eq!(h.counters(UNCLASSIFIED_SLOT).sent_packets, 1);
}

#[test]
fn dscp_and_priority_are_written_with_a_valid_checksum() {
    require_root!();
    let mut h = Harness::new();
    let table = ShapingTable::new([(0, shaping(OverAction::Drop, Some(46), Some(0x00ca_0010)))])
        .expect("table");
    h.maps.apply(&table).expect("apply");
    // ECT(0) is kept while the DSCP changes.
    let (verdict, out, prio) = h.run(&ipv4_udp(0x02, 100), 0);
    assert_eq!(verdict, PASS);
    assert_eq!(out[15], (46 << 2) | 0b10);
    assert_ipv4_checksum_valid(&out);
    assert_eq!(prio, 0x00ca_0010);

    let (verdict, out, prio) = h.run(&ipv6_udp(0x01, 0xabcde, 100), 0);
    assert_eq!(verdict, PASS);
    let word = u32::from_be_bytes(out[14..18].try_into().expect("4 bytes"));
    assert_eq!(word >> 28, 6);
    assert_eq!((word >> 20) & 0xff, (46 << 2) | 0b01, "traffic class");
    assert_eq!(word & 0xf_ffff, 0xabcde, "flow label kept");
    assert_eq!(prio, 0x00ca_0010);
}

#[test]
fn over_limit_frames_are_dropped_marked_or_demoted() {
    require_root!();
    let mut h = Harness::new();
    let far_future = u64::MAX / 2;

    h.maps
        .apply(&ShapingTable::new([(0, shaping(OverAction::Drop, None, None))]).expect("table"))
        .expect("apply");
    h.maps.set_bucket_tat(0, far_future).expect("bucket");
    assert_eq!(h.run(&ipv4_udp(0, 100), 0).0, TC_ACT_SHOT);
    assert_eq!(
        h.maps.bucket_tat(0).expect("tat"),
        far_future,
        "over-limit frames take no tokens"
    );
    let c = h.counters(0);
    assert_eq!((c.shaped, c.dropped, c.sent_packets), (1, 1, 0));

    h.maps
        .apply(&ShapingTable::new([(0, shaping(OverAction::EcnMark, None, None))]).expect("table"))
        .expect("apply");
    let (verdict, out, _) = h.run(&ipv4_udp(0x20 << 2 | 0b10, 100), 0);
    assert_eq!(verdict, PASS);
    assert_eq!(out[15], 0x20 << 2 | 0b11, "CE set, DSCP kept");
    assert_ipv4_checksum_valid(&out);
    let (verdict, out, _) = h.run(&ipv6_udp(0b01, 7, 100), 0);
    assert_eq!(verdict, PASS);
    assert_eq!(
        (u32::from_be_bytes(out[14..18].try_into().expect("4")) >> 20) & 0xff,
        0b11
    );
    let plain = ipv4_udp(0, 100);
    assert_eq!(
        h.run(&plain, 0),
        (PASS, plain.clone(), 0),
        "not ECN-capable: left to the qdisc unchanged"
    );
    let c = h.counters(0);
    assert_eq!((c.marked, c.dropped, c.shaped), (2, 1, 4));

    let bulk = ClassShaping {
        bucket: None,
        over: OverAction::Drop,
        dscp: Some(8),
        priority: Some(0x00ca_0015),
    };
    let table = ShapingTable::new([
        (
            0,
            shaping(OverAction::Demote(5), Some(46), Some(0x00ca_0010)),
        ),
        (5, bulk),
    ])
    .expect("table");
    h.maps.apply(&table).expect("apply");
    let (verdict, out, prio) = h.run(&ipv4_udp(0, 100), 0);
    assert_eq!(verdict, PASS);
    assert_eq!(
        (out[15] >> 2, prio),
        (8, 0x00ca_0015),
        "bulk's DSCP and priority"
    );
    assert_ipv4_checksum_valid(&out);
    assert_eq!(h.counters(0).demoted, 1);
    assert_eq!(h.counters(5).sent_packets, 1);
}

#[test]
fn kernel_bucket_charges_exactly_what_the_model_computes() {
    require_root!();
    let mut h = Harness::new();
    let table = ShapingTable::new([(0, shaping(OverAction::Drop, None, None))]).expect("table");
    h.maps.apply(&table).expect("apply");
    let entry = table.map_entries()[0];
    for len in [100usize, 1000, 1458] {
        h.maps.set_bucket_tat(0, 0).expect("reset bucket");
        let frame = ipv4_udp(0, len);
        let before = monotonic_ns();
        assert_eq!(h.run(&frame, 0).0, PASS);
        let after = monotonic_ns();
        let cost = frame_cost(frame.len() as u32, entry.ns_per_byte_q16);
        let start = h.maps.bucket_tat(0).expect("tat") - cost;
        assert!(
            (before..=after).contains(&start),
            "tat - cost = {start} outside [{before}, {after}]"
        );
    }
    // A full bucket back to back, then over the limit: frames of 1500 bytes
    // while the bucket has credit (64 KiB plus HTB's burst of 15 140 bytes:
    // 54 frames, the last one into debt), plus what refills while the runs
    // go on (one frame per 12 ms at 1 Mbit/s). A frame conforms while any
    // credit is left, so a partly refilled frame admits one: frame n (from
    // 0) at time t_n passes iff n·cost < burst + (t_n − t_0), hence at most
    // ⌈(burst + elapsed) / cost⌉ frames, and at least ⌈burst / cost⌉.
    let slow = BucketParams::new(1_000_000, 64 * 1024, 1514).expect("bucket");
    let table = ShapingTable::new([(
        0,
        ClassShaping {
            bucket: Some(slow),
            ..shaping(OverAction::Drop, None, None)
        },
    )])
    .expect("table");
    h.maps.apply(&table).expect("apply");
    h.maps.set_bucket_tat(0, 0).expect("reset bucket");
    let frame = ipv4_udp(0, 1500 - 42);
    let before = monotonic_ns();
    let admitted = (0..100).take_while(|_| h.run(&frame, 0).0 == PASS).count() as u64;
    let cost = frame_cost(1500, slow.ns_per_byte_q16());
    let elapsed = monotonic_ns() - before;
    let full = slow.burst_ns().div_ceil(cost);
    assert_eq!(full, 54);
    let most = (slow.burst_ns() + elapsed).div_ceil(cost);
    assert!(
        (full..=most).contains(&admitted),
        "{admitted} frames of a 64 KiB burst, expected {full}..={most} ({elapsed} ns elapsed)"
    );
}

fn monotonic_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("clock");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

#[test]
fn frames_are_classified_by_the_shared_rules() {
    require_root!();
    let mut h = Harness::new();
    let rule = |priority, dst_port: u16, class| Rule {
        priority,
        src: None,
        dst: None,
        proto: Some(17),
        src_ports: None,
        dst_ports: Some(PortRange::new(dst_port, dst_port).expect("port")),
        dscp: None,
        class,
        verdict: Verdict::Pass,
    };
    // ipv4_udp/ipv6_udp send to port 7000.
    let rules = RuleSet::new(vec![rule(10, 7000, 3), rule(20, 5201, 5)]).expect("rules");
    let mut classifier = ClassifierMaps::from_ebpf(&h.ebpf).expect("classifier maps");
    classifier.apply(&rules).expect("apply rules");
    let class = |dscp, class| ClassShaping {
        bucket: None,
        over: OverAction::Drop,
        dscp: Some(dscp),
        priority: Some(leaf_classid(class)),
    };
    let table =
        ShapingTable::new([(0, class(0, 0)), (3, class(46, 3)), (5, class(8, 5))]).expect("table");
    h.maps.apply(&table).expect("apply shaping");

    let (verdict, out, prio) = h.run(&ipv4_udp(0, 64), 0);
    assert_eq!((verdict, out[15] >> 2, prio), (PASS, 46, leaf_classid(3)));
    let (_, out, prio) = h.run(&ipv6_udp(0, 0, 64), 0);
    assert_eq!(
        ((out[14] & 0x0f) << 2 | out[15] >> 6, prio),
        (46, leaf_classid(3))
    );
    // Another port: no rule matches, class 0.
    let mut other = ipv4_udp(0x28 << 2, 64);
    other[36..38].copy_from_slice(&9999u16.to_be_bytes());
    let (_, out, prio) = h.run(&other, 0);
    assert_eq!((out[15] >> 2, prio), (0, leaf_classid(0)));
    assert_eq!(h.counters(3).sent_packets, 2);
    assert_eq!(h.counters(0).sent_packets, 1);
}

#[test]
fn gso_frames_are_charged_their_wire_length() {
    require_root!();
    let mut h = Harness::new();
    let table = ShapingTable::new([(0, shaping(OverAction::Drop, None, None))]).expect("table");
    h.maps.apply(&table).expect("apply");
    let entry = table.map_entries()[0];
    h.maps.set_bucket_tat(0, 0).expect("reset bucket");
    // A frame standing for 4 segments: 3 more copies of the 42-byte headers.
    let frame = ipv4_udp(0, 1000);
    let wire = frame.len() as u32 + 3 * 42;
    let before = monotonic_ns();
    assert_eq!(h.run_wire(&frame, 0, wire).0, PASS);
    let after = monotonic_ns();
    let start = h.maps.bucket_tat(0).expect("tat") - frame_cost(wire, entry.ns_per_byte_q16);
    assert!(
        (before..=after).contains(&start),
        "bucket charged another length"
    );
    assert_eq!(h.counters(0).sent_bytes, u64::from(wire));
}
