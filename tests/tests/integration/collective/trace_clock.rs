//! The timeline with the agent's clock estimates: two agents on a veth
//! pair (clocks not offset: both namespaces share this machine's clock, so
//! the true offset is 0 and the estimate must say so within its bound),
//! ranks 0 and 1 on host A, ranks 2 and 3 on host B, each rank reading its
//! own host's pinned `CW_CLK_PEERS` map. Merged by `cargo xtask trace`'s
//! merge: rank 2 and 3's times move by the agent's estimate, every chunk
//! sent was received, and none arrives before it was sent beyond the
//! published bounds. (The agent's bound is the one under test here; with
//! synthetic clock offsets the ranks' own timestamps would have to follow
//! them too, which the library cannot.)

use causeway_test_support::require_root;
use std::{
    net::IpAddr,
    time::{Duration, Instant},
};

use bpf_maps::clock::MAP_CLOCK_PEERS;
use causeway::{
    clock::SyncClock,
    datapath::{Layout, NetnsScope},
};
use causeway_collective::{
    peer_clock::{ClockSource, PeerClocks},
    store::StoreServer,
    Algorithm, Communicator, Options, ReduceOp,
};
use causeway_test_support::netns::VethLink;
use causeway_tests::clock_agent::Agent;

#[path = "../../../../xtask/src/trace_merge.rs"]
mod trace_merge;

#[test]
fn the_merged_timeline_is_causal_within_the_agents_bounds() {
    require_root!("the_merged_timeline_is_causal_within_the_agents_bounds");
    let link = VethLink::new(91);
    let ip = |s: &str| s.parse::<IpAddr>().expect("test address");
    let (a_ip, b_ip) = (ip(&link.a_addr), ip(&link.b_addr));
    let same = SyncClock {
        offset_ns: 0,
        drift_ppb: 0,
        epoch_ns: causeway::clock::source::raw_tai_now(),
    };
    let agent_a = Agent::start(link.a.name(), &link.a_if, 1, b_ip, same);
    let agent_b = Agent::start(link.b.name(), &link.b_if, 2, a_ip, same);
    agent_a.wait_ready();
    agent_b.wait_ready();
    let map_of = |ns: &str, iface: &str| {
        let scope = NetnsScope::Named(ns.to_string());
        Layout::default()
            .iface(&scope, iface)
            .expect("paths")
            .maps_dir
            .join(MAP_CLOCK_PEERS)
    };
    let (map_a, map_b) = (
        map_of(link.a.name(), &link.a_if),
        map_of(link.b.name(), &link.b_if),
    );
    // Both agents have a kernel-stamped estimate of each other.
    let deadline = Instant::now() + Duration::from_secs(30);
    for (map, peer) in [(&map_a, b_ip), (&map_b, a_ip)] {
        let clocks = PeerClocks::open(map).expect("open the pinned peer map");
        loop {
            let r = clocks.get(peer).expect("lookup");
            if r.is_some_and(|r| r.source == ClockSource::Kernel && r.samples >= 8) {
                break;
            }
            assert!(Instant::now() < deadline, "no kernel estimate: {r:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    let dir = std::env::temp_dir().join(format!("cw-trace-clock-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let base = Options {
        algorithm: Some(Algorithm::Ring),
        chunk_bytes: 64 << 10,
        probe: false,
        timeout: Duration::from_secs(30),
        rendezvous_timeout: Duration::from_secs(30),
        trace_dir: Some(dir.clone()),
        ..Options::default()
    };
    let server = link
        .a
        .in_ns(move || StoreServer::bind((a_ip, 0).into()).expect("store"));
    let master = server.addr();
    let ranks: Vec<_> = (0..4)
        .map(|r| {
            let on_a = r < 2;
            let (enter, ip, map, host) = if on_a {
                (link.a.enterer(), a_ip, map_a.clone(), "A")
            } else {
                (link.b.enterer(), b_ip, map_b.clone(), "B")
            };
            let opts = Options {
                clock_map: Some(map),
                ..base.clone()
            };
            std::thread::spawn(move || {
                enter();
                let c = Communicator::builder(r, 4)
                    .master(master)
                    .host_store(false)
                    .domain(host)
                    .host_id(host)
                    .listen_ip(ip)
                    .options(opts)
                    .build()
                    .unwrap_or_else(|e| panic!("rank {r}: {e}"));
                let mut v = vec![1.0f32; 1 << 18];
                for _ in 0..4 {
                    c.allreduce(&mut v, ReduceOp::Sum).expect("allreduce");
                }
                assert_eq!(v[0], 256.0);
            })
        })
        .collect();
    for h in ranks {
        h.join().expect("rank thread");
    }
    drop(server);
    let files = trace_merge::read_ranks(&dir).expect("the rank files");
    let seen: Vec<u64> = files.iter().map(|r| r.rank).collect();
    assert_eq!(seen, [0, 1, 2, 3], "one file per rank");
    let _ = std::fs::remove_dir_all(&dir);
    // Ranks on B know rank 0's clock from B's agent; rank 1 shares A's clock.
    let shifts = trace_merge::shifts(&files, None);
    assert_eq!(
        shifts[1].bound_ns.map(|b| b < 1e6),
        Some(true),
        "{shifts:?}"
    );
    for s in &shifts[2..] {
        let bound = s
            .bound_ns
            .unwrap_or_else(|| panic!("rank {}: no bound", s.rank));
        assert!(s.how.contains("kernel"), "{s:?}");
        // The truth is 0: the estimate is within its bound of it.
        assert!(s.offset_ns.abs() <= bound, "{s:?}");
    }
    let sends: usize = files
        .iter()
        .map(|r| r.events.iter().filter(|e| e["name"] == "send").count())
        .sum();
    let (_, c) = trace_merge::merge(&files, None);
    assert_eq!(c.matched, sends, "{c:?}");
    assert_eq!(c.checked, sends, "every pair has known bounds: {c:?}");
    assert_eq!((c.unmatched_sends, c.unmatched_recvs), (0, 0), "{c:?}");
    assert!(
        c.violations.is_empty(),
        "{:?}",
        &c.violations[..c.violations.len().min(5)]
    );
    eprintln!(
        "trace with the agent: {sends} chunks; rank 2 offset {:.0} ns ± {:.0} ns ({}); smallest slack {:.1} µs",
        shifts[2].offset_ns,
        shifts[2].bound_ns.unwrap_or(f64::NAN),
        shifts[2].how,
        c.min_slack_ns.unwrap_or(f64::NAN) / 1e3
    );
}
