//! BPF_PROG_TEST_RUN tests of the kernel clock stamps: the XDP program
//! stamps t2/t4 into arriving probes, the TC egress program t1/t3 into
//! leaving ones, on the host timescale (CLOCK_TAI through the synthetic
//! transform, the same arithmetic as `SyncClock::apply`); anything that is
//! not a zero-checksum IPv4 probe on the clock port is left byte for byte.

use aya::{
    programs::{SchedClassifier, TestRun, TestRunOptions, Xdp},
    Ebpf,
};
use bpf_maps::clock::{stamp_offset, CLOCK_PORT, PROBE_LEN, STAMP_SET_KERNEL};
use causeway::clock::{
    maps::ClockMaps,
    probe::{Kind, Probe, KERNEL},
    source::raw_tai_now,
    SyncClock,
};

const SKB_CTX_LEN: usize = 192;

fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

struct Harness {
    ebpf: Ebpf,
    maps: ClockMaps,
}

impl Harness {
    fn new(clock: SyncClock, port: u16) -> Self {
        let mut ebpf =
            Ebpf::load(causeway::ebpf_object::EBPF_OBJECT).expect("load the eBPF object");
        let xdp: &mut Xdp = ebpf
            .program_mut("causeway_xdp")
            .expect("program causeway_xdp")
            .try_into()
            .expect("xdp");
        xdp.load().expect("verifier accepts causeway_xdp");
        let tc: &mut SchedClassifier = ebpf
            .program_mut("causeway_tc_egress")
            .expect("program causeway_tc_egress")
            .try_into()
            .expect("classifier");
        tc.load().expect("verifier accepts causeway_tc_egress");
        let mut maps = ClockMaps::from_ebpf(&ebpf).expect("clock maps");
        maps.set_config(&clock.stamp_config(port)).expect("config");
        Harness { ebpf, maps }
    }

    /// Runs `frame` through the XDP (ingress) or TC (egress) program;
    /// returns the frame as it left and the host-clock window of the run.
    fn run(&self, frame: &[u8], egress: bool, clock: SyncClock) -> (Vec<u8>, u64, u64) {
        let mut out = vec![0u8; frame.len() + 64];
        let ctx_in = [0u8; SKB_CTX_LEN];
        let mut ctx_out = [0u8; SKB_CTX_LEN];
        let before = clock.apply(raw_tai_now());
        let r = if egress {
            let prog: &SchedClassifier = self
                .ebpf
                .program("causeway_tc_egress")
                .expect("program")
                .try_into()
                .expect("tc");
            prog.test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut out),
                ctx_in: Some(&ctx_in[..]),
                ctx_out: Some(&mut ctx_out),
                ..Default::default()
            })
        } else {
            let prog: &Xdp = self
                .ebpf
                .program("causeway_xdp")
                .expect("program")
                .try_into()
                .expect("xdp");
            prog.test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut out),
                ..Default::default()
            })
        }
        .expect("BPF_PROG_TEST_RUN");
        let after = clock.apply(raw_tai_now());
        out.truncate(r.data_size_out as usize);
        (out, before, after)
    }
}

/// Ethernet + IPv4 + UDP (checksum `csum`) around `payload`.
fn ipv4_udp(sport: u16, dport: u16, csum: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00];
    let total = (20 + 8 + payload.len()) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&[0, 1, 0x40, 0, 64, 17, 0, 0, 10, 1, 0, 1, 10, 1, 0, 2]);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&csum.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn ipv6_udp(dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![
        0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x86, 0xdd, 0x60, 0, 0, 0,
    ];
    f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[17, 64]);
    f.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    f.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    f.extend_from_slice(&40000u16.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0x12, 0x34]);
    f.extend_from_slice(payload);
    f
}

const PAYLOAD: usize = 14 + 20 + 8;

fn probe(kind: Kind) -> Vec<u8> {
    let mut p = Probe::new(kind, 9, 1, 0x1122_3344_5566_7788);
    p.stamps[causeway::clock::probe::USER][0] = 123;
    p.encode().to_vec()
}

#[test]
fn probes_get_kernel_stamps_in_the_right_slot_on_the_host_timescale() {
    if !is_root() {
        eprintln!(
            "SKIP: probes_get_kernel_stamps_in_the_right_slot_on_the_host_timescale needs root"
        );
        return;
    }
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
    if !is_root() {
        eprintln!("SKIP: frames_that_are_not_stampable_probes_pass_untouched needs root");
        return;
    }
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
    if !is_root() {
        eprintln!("SKIP: stamping_is_off_until_a_port_is_configured needs root");
        return;
    }
    let clock = SyncClock::IDENTITY;
    let mut h = Harness::new(clock, 0);
    let frame = ipv4_udp(40000, CLOCK_PORT, 0, &probe(Kind::Request));
    assert_eq!(h.run(&frame, false, clock).0, frame);
    h.maps
        .set_config(&clock.stamp_config(CLOCK_PORT))
        .expect("config");
    assert_ne!(h.run(&frame, false, clock).0, frame);
}
