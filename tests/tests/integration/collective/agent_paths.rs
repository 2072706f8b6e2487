//! The library learns its WAN paths from the host's agent (issue 14): on the
//! `dual` testbed a real `causeway agent` in every host namespace names the
//! host's own address on both paths (`[library] wan_paths` in agent.toml);
//! the ranks get only `CAUSEWAY_AGENT_SOCKET`, no `CAUSEWAY_WAN_PATHS`, and
//! must stripe their bulk chunks over both paths, every result checked by
//! the worker. The same world without the variable uses one path.

use causeway_test_support::require_root;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use causeway::clock::SyncClock;
use causeway_netsim::Profile;
use causeway_tests::{clock_agent::Agent, netsim_support};

use super::testbed::{collective_binary, next, start_with};

/// Runs three checked 16 MiB allreduces on four ranks, each rank with
/// `env(rank)`; returns every rank's bytes per path after the last one.
fn bytes_per_path(
    tb: &causeway_netsim::Testbed,
    port: u16,
    env: impl Fn(usize) -> Vec<String>,
) -> Vec<Vec<u64>> {
    let bin = collective_binary("causeway-collective-worker", true);
    let args = ["--elems", "4194304", "--iters", "3"];
    let w = start_with(tb, &bin, port, &args, |r, _| env(r));
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = vec![Vec::new(); 4];
    let mut done = 0;
    while done < 4 {
        let (r, v) = next(&w, deadline);
        match v["event"].as_str() {
            Some("ready") => {}
            Some("iter") => {
                last[r] = v["bytes_per_path"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|b| b.as_u64()).collect())
                    .unwrap_or_default();
            }
            Some("done") => done += 1,
            _ => panic!("rank {r}: {v}"),
        }
    }
    w.finish("");
    last
}

#[test]
fn the_library_stripes_over_the_paths_its_agent_names() {
    require_root!("the_library_stripes_over_the_paths_its_agent_names");
    let tb = netsim_support::testbed(2, 2, Profile::Dual);
    let hosts: Vec<_> = (0..4).map(|r| tb.host(r / 2, r % 2).clone()).collect();
    let clock = SyncClock {
        offset_ns: 0,
        drift_ppb: 0,
        epoch_ns: causeway::clock::source::raw_tai_now(),
    };
    let agents: Vec<Agent> = hosts
        .iter()
        .enumerate()
        .map(|(r, h)| {
            let peer = IpAddr::V4(hosts[(r + 2) % 4].ip);
            let (p0, p1) = (h.ip_via(0).expect("path 0"), h.ip_via(1).expect("path 1"));
            let library = format!("[library]\nwan_paths = [\"{p0}\", \"{p1}\"]");
            Agent::start_with(&h.netns, "eth0", r as u32 + 1, peer, clock, &library)
        })
        .collect();
    for a in &agents {
        a.wait_ready();
    }
    let striped = bytes_per_path(&tb, 29660, |r| {
        vec![format!(
            "CAUSEWAY_AGENT_SOCKET={}",
            agents[r].socket().display()
        )]
    });
    eprintln!("with the agents' paths, bytes per path by rank: {striped:?}");
    for (r, b) in striped.iter().enumerate() {
        assert!(
            b.len() == 2 && b.iter().all(|&x| x > 1 << 20),
            "rank {r} striped over both paths: {b:?}"
        );
    }
    // Without the variable the agent is not found (its socket is not the
    // root namespace's default): one path, no striping.
    let single = bytes_per_path(&tb, 29670, |_| Vec::new());
    eprintln!("without: {single:?}");
    assert!(single.iter().all(|b| b.is_empty()), "{single:?}");
    drop(agents);
}
