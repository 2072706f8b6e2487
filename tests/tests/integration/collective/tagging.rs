//! The library's traffic lands in the right kernel classes by port and DSCP
//! alone: two ranks in two domains on a veth pair, the XDP classifier on A's
//! end with the policy `causeway policy example` prints (no address prefix in
//! it), large allreduces (bulk streams), small ones (the latency stream) and
//! the rendezvous (store, handshakes). Only the test's frames cross the link
//! (IPv6 off, static neighbours), so every frame must be in a library class.

use causeway_test_support::require_root;
use std::net::{IpAddr, SocketAddr};

use causeway::stats::InterfaceStats;
use causeway_collective::{Communicator, Options, ReduceOp};
use causeway_test_support::netns::VethLink;
use causeway_tests::causeway_cli::{causeway_ok, Attachment};
use serde::Deserialize;

#[derive(Deserialize)]
struct Report {
    interfaces: Vec<InterfaceStats>,
}

const LARGE: usize = 2 << 20; // f32s: 8 MiB per allreduce
const SMALL: usize = 256; // 1 KiB, under CAUSEWAY_LATENCY_BYTES
const ROUNDS: usize = 3;
/// torchrun's default MASTER_PORT, which the example policy names.
const MASTER_PORT: u16 = 29500;

fn rank(rank: usize, ip: IpAddr, master: SocketAddr, domain: &str) -> (f32, f32) {
    let comm = Communicator::builder(rank, 2)
        .master(master)
        .listen_ip(ip)
        .domain(domain)
        .host_id(domain)
        .options(Options::default())
        .build()
        .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
    let (mut large, mut small) = (0.0, 0.0);
    for _ in 0..ROUNDS {
        let mut big = vec![rank as f32 + 1.0; LARGE];
        comm.allreduce(&mut big, ReduceOp::Sum).expect("large");
        let mut little = vec![rank as f32 + 1.0; SMALL];
        comm.allreduce(&mut little, ReduceOp::Sum).expect("small");
        (large, small) = (big[LARGE - 1], little[SMALL - 1]);
    }
    (large, small)
}

#[test]
fn the_librarys_connections_are_classified_by_port_and_dscp() {
    require_root!("the_librarys_connections_are_classified_by_port_and_dscp");
    let link = VethLink::new(97);
    let a = link.a.name().to_string();
    let dir = std::env::temp_dir().join(format!("causeway-tagging-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let policy_file = dir.join("policy.toml");
    std::fs::write(&policy_file, causeway_ok(&["policy", "example"])).expect("write policy");
    let _attached = Attachment::new(
        &a,
        &link.a_if,
        &["--policy", policy_file.to_str().expect("UTF-8 path")],
    );
    let _ = std::fs::remove_dir_all(&dir);

    let a_ip: IpAddr = link.a_addr.parse().expect("address");
    let b_ip: IpAddr = link.b_addr.parse().expect("address");
    let master = SocketAddr::new(a_ip, MASTER_PORT);
    let (enter_a, enter_b) = (link.a.enterer(), link.b.enterer());
    let r0 = std::thread::spawn(move || {
        enter_a();
        rank(0, a_ip, master, "east")
    });
    let r1 = std::thread::spawn(move || {
        enter_b();
        rank(1, b_ip, master, "west")
    });
    let got = [r0.join(), r1.join()].map(|r| r.unwrap_or_else(|e| std::panic::resume_unwind(e)));
    assert_eq!(got, [(3.0, 3.0); 2], "sums on both ranks");

    let out = causeway_ok(&["--netns", &a, "stats", "--iface", &link.a_if, "--json"]);
    let mut report: Report = serde_json::from_str(&out).expect("stats --json parses");
    let stats = report.interfaces.remove(0);
    let class = |name: &str| {
        stats
            .class(name)
            .unwrap_or_else(|| panic!("no class {name}: {stats:?}"))
            .totals()
    };
    eprintln!("classes on A's ingress: {:#?}", stats.classes);
    // B sends A at least half of every large buffer (8 MiB each).
    let (gradient, latency, control) = (class("gradient"), class("latency"), class("control"));
    let half = (ROUNDS * LARGE * 4 / 2) as u64;
    assert!(gradient.bytes >= half, "gradient {gradient:?} < {half} B");
    // Small allreduces: at least one frame each way per round on the latency stream.
    assert!(latency.packets >= ROUNDS as u64, "latency {latency:?}");
    assert!(
        latency.bytes >= (ROUNDS * SMALL * 4 / 2) as u64,
        "latency {latency:?}"
    );
    assert!(
        latency.bytes < gradient.bytes / 8,
        "small transfers stay small"
    );
    // The store (rank 1 registers with rank 0), the handshakes, the hellos.
    assert!(control.packets >= 10, "control {control:?}");
    for other in ["default", "clock", "bulk"] {
        assert_eq!(class(other).packets, 0, "{other}: {stats:?}");
    }
    assert_eq!(stats.unclassified.packets, 0, "{stats:?}");
}
