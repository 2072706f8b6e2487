//! BPF_PROG_TEST_RUN tests of the path steering program (`causeway_tc_steer`):
//! crafted frames (IPv4, IPv6 with extension headers, VLAN tags, fragments,
//! truncated and non-IP frames), and a differential test against the
//! reference model `causeway_core::paths::steer` on random, mutated frames.
//! The kernel copies `mark` of the `__sk_buff` back into `ctx_out`.

use std::collections::HashMap;

use aya::Ebpf;
use bpf_maps::paths::{FlowKey, PathEntry, MAX_PATHS, PATH_UNSTEERED_SLOT};
use causeway::paths::PathMaps;
use causeway_core::{classifier::reference, paths::steer};
use causeway_test_support::{
    bpf::{self, SkbCtx, TC_STEER},
    frames::*,
    require_root,
};
use rand::{rngs::StdRng, Rng, SeedableRng};

/// The mark frames arrive with: left alone unless the frame is steered.
const INCOMING: u32 = 0x0dea_d000;
/// `TC_ACT_UNSPEC`: every frame continues.
const PASS: u32 = u32::MAX;

/// Paths 0-3: 0, 1 and 3 up, 2 down.
const PATHS: [(u32, u32, bool); 4] = [
    (0, 0x1000, true),
    (1, 0x1001, true),
    (2, 0x1002, false),
    (3, 0x1003, true),
];

struct Harness {
    ebpf: Ebpf,
    maps: PathMaps,
}

impl Harness {
    fn new() -> Self {
        let ebpf = bpf::load(causeway::ebpf_object::EBPF_OBJECT, &[], &[TC_STEER]);
        let mut maps = PathMaps::from_ebpf(&ebpf).expect("path maps");
        for (path, mark, up) in PATHS {
            maps.set_path(path, mark, up).expect("set path");
        }
        Self { ebpf, maps }
    }

    /// Runs one frame; returns the mark it leaves with.
    fn mark(&self, frame: &[u8]) -> u32 {
        self.try_mark(frame)
            .unwrap_or_else(|| panic!("the kernel refused the test run of {frame:02x?}"))
    }

    /// [`Harness::mark`], or `None` when the kernel refuses to run the frame
    /// (an IP frame too short for its IP header: `EINVAL` on newer kernels).
    fn try_mark(&self, frame: &[u8]) -> Option<u32> {
        let ctx = SkbCtx::default().with_mark(INCOMING);
        let (r, _, out) = bpf::try_run_tc(&self.ebpf, TC_STEER, frame, &ctx, 1).ok()?;
        assert_eq!(r.return_value, PASS, "every frame passes");
        Some(out.mark())
    }

    /// The reference model's table, read back from the maps.
    fn model(&self) -> (HashMap<FlowKey, u32>, Vec<PathEntry>) {
        let flows = self.maps.flows().expect("flows").into_iter().collect();
        let paths = (0..MAX_PATHS)
            .map(|p| self.maps.path(p).expect("path"))
            .collect();
        (flows, paths)
    }
}

fn v4_tcp(tags: &[u16], src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    cat(&[
        &eth(tags, ETH_IPV4),
        &ipv4(V4::new(src, dst, 6), &tcp(sport, dport, 100)),
    ])
}

#[test]
fn crafted_frames_are_steered_by_flow_and_path_state() {
    require_root!("crafted_frames_are_steered_by_flow_and_path_state");
    let mut h = Harness::new();
    let (a, b) = ([10, 0, 0, 10], [10, 1, 0, 10]);
    let flow = FlowKey::v4(a, b, 6, 40_000, 5201);
    let frame = v4_tcp(&[], a, b, 40_000, 5201);

    assert_eq!(h.mark(&frame), INCOMING, "an unlisted flow keeps its mark");
    h.maps.route(&flow, 1).expect("route");
    assert_eq!(h.mark(&frame), 0x1001);
    // A VLAN-tagged frame of the flow is the same flow.
    assert_eq!(h.mark(&v4_tcp(&[TPID_8021Q], a, b, 40_000, 5201)), 0x1001);
    // Other ports, the reverse direction, UDP: other flows.
    assert_eq!(h.mark(&v4_tcp(&[], a, b, 40_001, 5201)), INCOMING);
    assert_eq!(h.mark(&v4_tcp(&[], b, a, 5201, 40_000)), INCOMING);
    // Moving the flow is one update; a path going down unsteers its flows.
    h.maps.route(&flow, 3).expect("reroute");
    assert_eq!(h.mark(&frame), 0x1003);
    h.maps.set_path(3, 0x1003, false).expect("down");
    assert_eq!(h.mark(&frame), INCOMING);
    h.maps.set_path(3, 0x1003, true).expect("up");
    assert_eq!(h.mark(&frame), 0x1003);
    // A flow entry naming a path out of range steers nothing.
    let raw = h
        .ebpf
        .map_mut(bpf_maps::paths::MAP_PATH_FLOWS)
        .expect("map");
    let mut raw = aya::maps::HashMap::<_, FlowKey, u32>::try_from(raw).expect("hash");
    raw.insert(flow, MAX_PATHS + 3, 0).expect("insert");
    assert_eq!(h.mark(&frame), INCOMING);
    assert!(h.maps.unroute(&flow).expect("unroute"));
    assert!(!h.maps.unroute(&flow).expect("unroute twice"));

    // IPv6 through a hop-by-hop and a destination-options header.
    let v6 = V6::new("fd00::1", "fd00:1::1", 0);
    let chain = cat(&[&ext(0, 60, 0), &ext(60, 17, 1), &udp(7000, 7001, 32)]);
    let frame6 = cat(&[&eth(&[], ETH_IPV6), &ipv6(v6, &chain)]);
    let key6 = FlowKey::v6(
        "fd00::1".parse::<std::net::Ipv6Addr>().unwrap().octets(),
        "fd00:1::1".parse::<std::net::Ipv6Addr>().unwrap().octets(),
        17,
        7000,
        7001,
    );
    h.maps.route(&key6, 0).expect("route v6");
    assert_eq!(h.mark(&frame6), 0x1000);
    // A later fragment of that flow carries no ports: not steered.
    let later = cat(&[
        &eth(&[], ETH_IPV6),
        &ipv6(
            V6::new("fd00::1", "fd00:1::1", 44),
            &cat(&[&frag6(17, 8, false), &[0u8; 40]]),
        ),
    ]);
    assert_eq!(h.mark(&later), INCOMING);
    // Cut inside the TCP header (no ports: not this flow), and not IP.
    assert_eq!(h.mark(&frame[..14 + 20 + 10]), INCOMING);
    assert_eq!(h.mark(&cat(&[&eth(&[], ETH_ARP), &[0u8; 28]])), INCOMING);

    let counters = h.maps.counters().expect("counters");
    assert_eq!(counters[1].packets, 2);
    assert_eq!(counters[3].packets, 2);
    assert_eq!(counters[0].packets, 1);
    assert_eq!(counters[0].bytes, frame6.len() as u64);
    assert_eq!(counters[PATH_UNSTEERED_SLOT as usize].packets, 8);
}

#[test]
fn kernel_steering_agrees_with_the_reference_model() {
    require_root!("kernel_steering_agrees_with_the_reference_model");
    let seed: u64 = std::env::var("CAUSEWAY_DIFF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("steer differential: CAUSEWAY_DIFF_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut h = Harness::new();
    let mut want = vec![(0u64, 0u64); (PATH_UNSTEERED_SLOT + 1) as usize];
    let mut refused = 0;
    for i in 0..4_000 {
        let frame = crate::xdp_differential::gen::frame(&mut rng);
        // Half the frames' own flows are put on a random path first (so
        // both outcomes are common); now and then one is taken off again.
        let key = reference::parse(&frame)
            .ok()
            .and_then(|f| steer::flow_key(&f));
        if let Some(key) = key {
            if rng.gen_bool(0.5) {
                h.maps.route(&key, rng.gen_range(0..4)).expect("route");
            } else if rng.gen_bool(0.2) {
                h.maps.unroute(&key).expect("unroute");
            }
        }
        let (flows, paths) = h.model();
        let model = steer::steer(&frame, &flows, &paths);
        let Some(got) = h.try_mark(&frame) else {
            refused += 1;
            continue;
        };
        assert_eq!(
            got,
            model.mark.unwrap_or(INCOMING),
            "frame {i} (seed {seed}): kernel mark {got:#x}, model {model:?}\n{frame:02x?}"
        );
        let w = &mut want[model.slot as usize];
        w.0 += 1;
        w.1 += frame.len() as u64;
    }
    let got: Vec<(u64, u64)> = h
        .maps
        .counters()
        .expect("counters")
        .iter()
        .map(|c| (c.packets, c.bytes))
        .collect();
    assert_eq!(got, want, "per-path counters (seed {seed})");
    assert!(want[PATH_UNSTEERED_SLOT as usize].0 > 100 && want[1].0 > 100);
    assert!(
        refused < 1_000,
        "the kernel refused {refused} of 4,000 frames"
    );
    eprintln!(
        "steer differential: {} frames compared, {refused} refused by the kernel",
        4_000 - refused
    );
}
