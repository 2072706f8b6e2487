//! BPF_PROG_TEST_RUN tests of the TC egress program: class, DSCP, ECN,
//! priority and bucket decisions on crafted frames. The kernel copies
//! `priority` and `mark` of the `__sk_buff` back into `ctx_out`.

use aya::{
    programs::{SchedClassifier, TestRun, TestRunOptions},
    Ebpf,
};
use bpf_maps::{counters::UNCLASSIFIED_SLOT, shaper::EgressCounters};
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
/// `sizeof(struct __sk_buff)` on 6.x kernels, and the offset of `priority`.
const SKB_CTX_LEN: usize = 192;
const SKB_PRIORITY: usize = 32;
/// Offset of `wire_len` in `struct __sk_buff`.
const SKB_WIRE_LEN: usize = 160;

fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

struct Harness {
    ebpf: Ebpf,
    maps: ShaperMaps,
}

impl Harness {
    fn new() -> Self {
        let mut ebpf =
            Ebpf::load(causeway::ebpf_object::EBPF_OBJECT).expect("load the eBPF object");
        let prog: &mut SchedClassifier = ebpf
            .program_mut("causeway_tc_egress")
            .expect("program causeway_tc_egress")
            .try_into()
            .expect("a classifier");
        prog.load().expect("verifier accepts causeway_tc_egress");
        let maps = ShaperMaps::from_ebpf(&ebpf).expect("shaper maps");
        Self { ebpf, maps }
    }

    /// Runs one frame; returns (verdict, frame out, skb priority out).
    fn run(&self, frame: &[u8], priority_in: u32) -> (u32, Vec<u8>, u32) {
        self.run_wire(frame, priority_in, 0)
    }

    /// Like `run`, with the qdisc length `wire_len` (0: the frame length).
    fn run_wire(&self, frame: &[u8], priority_in: u32, wire_len: u32) -> (u32, Vec<u8>, u32) {
        let mut ctx_in = [0u8; SKB_CTX_LEN];
        ctx_in[SKB_WIRE_LEN..SKB_WIRE_LEN + 4].copy_from_slice(&wire_len.to_ne_bytes());
        ctx_in[SKB_PRIORITY..SKB_PRIORITY + 4].copy_from_slice(&priority_in.to_ne_bytes());
        let mut ctx_out = [0u8; SKB_CTX_LEN];
        let mut out = vec![0u8; frame.len() + 64];
        let prog: &SchedClassifier = self
            .ebpf
            .program("causeway_tc_egress")
            .expect("program")
            .try_into()
            .expect("classifier");
        let r = prog
            .test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut out),
                ctx_in: Some(&ctx_in),
                ctx_out: Some(&mut ctx_out),
                ..Default::default()
            })
            .expect("BPF_PROG_TEST_RUN");
        out.truncate(r.data_size_out as usize);
        let prio = u32::from_ne_bytes(
            ctx_out[SKB_PRIORITY..SKB_PRIORITY + 4]
                .try_into()
                .expect("4 bytes"),
        );
        (r.return_value, out, prio)
    }

    fn counters(&self, slot: u32) -> EgressCounters {
        self.maps.counters().expect("counters")[slot as usize]
    }
}

fn ipv4_udp(tos: u8, payload: usize) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00];
    let total = (20 + 8 + payload) as u16;
    let mut ip = vec![0x45, tos];
    ip.extend_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&[0, 1, 0x40, 0, 64, 17, 0, 0, 10, 1, 0, 1, 10, 1, 0, 2]);
    let csum = ipv4_checksum(&ip);
    ip[10..12].copy_from_slice(&csum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0x13, 0x88, 0x1b, 0x58]);
    f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.resize(f.len() + payload, 0xab);
    f
}

fn ipv6_udp(traffic_class: u8, flow: u32, payload: usize) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x86, 0xdd];
    let word = (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow & 0xf_ffff);
    f.extend_from_slice(&word.to_be_bytes());
    f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
    f.extend_from_slice(&[17, 64]);
    f.extend_from_slice(
        &"fd00::1"
            .parse::<std::net::Ipv6Addr>()
            .expect("addr")
            .octets(),
    );
    f.extend_from_slice(
        &"fd00::2"
            .parse::<std::net::Ipv6Addr>()
            .expect("addr")
            .octets(),
    );
    f.extend_from_slice(&[0x13, 0x88, 0x1b, 0x58]);
    f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.resize(f.len() + payload, 0xab);
    f
}

fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum = 0u32;
    for (i, pair) in header.chunks(2).enumerate() {
        if i != 5 {
            sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn assert_ipv4_checksum_valid(frame: &[u8]) {
    let header = &frame[14..34];
    assert_eq!(
        u16::from_be_bytes([header[10], header[11]]),
        ipv4_checksum(header),
        "IPv4 checksum"
    );
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

macro_rules! need_root {
    () => {
        if !is_root() {
            eprintln!("SKIP: BPF_PROG_TEST_RUN needs root");
            return;
        }
    };
}

#[test]
fn unconfigured_program_counts_and_leaves_frames_alone() {
    need_root!();
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
    need_root!();
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
    need_root!();
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
    need_root!();
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
    // 54 frames, the last one into debt), plus one per frame time (12 ms at
    // 1 Mbit/s) that passes during the runs.
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
    let refilled = (monotonic_ns() - before) / cost;
    let full = slow.burst_ns().div_ceil(cost);
    assert_eq!(full, 54);
    assert!(
        (full..=full + refilled).contains(&admitted),
        "{admitted} frames of a 64 KiB burst"
    );
}

fn monotonic_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("clock");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

#[test]
fn frames_are_classified_by_the_shared_rules() {
    need_root!();
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
    need_root!();
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
