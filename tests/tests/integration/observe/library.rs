//! A real Prometheus server scrapes a running world's per-rank metrics
//! (`CAUSEWAY_METRICS_ADDR`): four ranks in two domains, threads of this
//! process in one namespace (so one listener serves all four, each series
//! labelled with its rank), forced onto a ring, run allreduces and stay up
//! while PromQL answers: the allreduce count per rank and in total, and the
//! bytes a ring moves per link class (a ring 0→1→2→3→0 sends 2·(n−1)/n of
//! the buffer per rank and operation; 0→1 and 2→3 stay in a domain, 1→2
//! and 3→0 cross the WAN), sent and received alike.

use causeway_test_support::require_root;
use std::{
    net::SocketAddr,
    sync::{Arc, Barrier},
    time::Duration,
};

use causeway_collective::{store::StoreServer, Algorithm, Communicator, Options, ReduceOp};
use causeway_test_support::netns::Netns;
use causeway_tests::prometheus::Prometheus;

const RANKS: usize = 4;
const OPS: usize = 6;
const ELEMS: usize = 1 << 18; // 1 MiB of f32

#[test]
fn prometheus_scrapes_a_running_worlds_collective_metrics() {
    require_root!("prometheus_scrapes_a_running_worlds_collective_metrics");
    let ns = Netns::new("cw-promlib");
    let metrics: SocketAddr = "127.0.0.1:9471".parse().expect("addr");
    let opts = Options {
        algorithm: Some(Algorithm::Ring),
        chunk_bytes: 64 << 10,
        probe: false,
        // Counted from the first call: no start-up warm-up bytes either.
        wan_warm_bytes: 0,
        timeout: Duration::from_secs(30),
        rendezvous_timeout: Duration::from_secs(30),
        metrics_addr: Some(metrics),
        ..Options::default()
    };
    // The ranks: up, their operations done, then waiting until the queries
    // are answered (`done`), then gone.
    let ready = Arc::new(Barrier::new(RANKS + 1));
    let done = Arc::new(Barrier::new(RANKS + 1));
    let enter = ns.enterer();
    let (r2, d2) = (ready.clone(), done.clone());
    let world = std::thread::spawn(move || {
        enter();
        let server = StoreServer::bind("127.0.0.1:0".parse().expect("addr")).expect("store");
        let ranks: Vec<_> = (0..RANKS)
            .map(|r| {
                let b = Communicator::builder(r, RANKS)
                    .master(server.addr())
                    .host_store(false)
                    .domain(format!("d{}", r / 2))
                    .host_id(format!("h{r}"))
                    .options(opts.clone());
                let (ready, done) = (r2.clone(), d2.clone());
                std::thread::spawn(move || {
                    let c = b.build().unwrap_or_else(|e| panic!("rank {r}: {e}"));
                    assert_eq!(c.metrics_addr(), Some(metrics));
                    let mut v = vec![1.0f32; ELEMS];
                    for _ in 0..OPS {
                        c.allreduce(&mut v, ReduceOp::Sum).expect("allreduce");
                    }
                    ready.wait();
                    done.wait();
                })
            })
            .collect();
        for h in ranks {
            h.join().expect("rank thread");
        }
    });
    ready.wait();
    let prom = Prometheus::start(
        ns.name(),
        "127.0.0.1:9090".parse().expect("addr"),
        &[("ranks", metrics)],
    );
    let wait = Duration::from_secs(30);
    let up = prom.wait_for("up{job=\"ranks\"}", wait, |v| v == 1.0);
    assert_eq!(up, 1.0, "{}", prom.log());
    let total = prom.wait_for(
        "sum(causeway_op_duration_seconds_count{job=\"ranks\",op=\"allreduce\",size_bucket=\"64KiB-1MiB\"})",
        wait,
        |v| v > 0.0,
    );
    assert_eq!(total, (RANKS * OPS) as f64);
    let per_rank = prom.query("causeway_op_duration_seconds_count{job=\"ranks\",op=\"allreduce\"}");
    assert_eq!(per_rank.len(), RANKS, "{per_rank:?}");
    for s in &per_rank {
        assert_eq!(s["value"][1], OPS.to_string(), "{s}");
    }
    // The histogram's buckets are cumulative: +Inf holds every one.
    let inf = prom.scalar(
        "sum(causeway_op_duration_seconds_bucket{job=\"ranks\",op=\"allreduce\",le=\"+Inf\"})",
    );
    assert_eq!(inf, (RANKS * OPS) as f64);
    let per_link = 2.0 * 1.5 * (ELEMS * 4) as f64 * OPS as f64;
    for dir in ["sent", "received"] {
        for (link, want) in [("wan", per_link), ("domain", per_link), ("host", 0.0)] {
            let got = prom.scalar(&format!(
                "sum(causeway_link_{dir}_bytes_total{{job=\"ranks\",link=\"{link}\"}})"
            ));
            assert_eq!(got, want, "{dir} over {link}");
        }
    }
    let errors = prom.query("causeway_op_errors_total{job=\"ranks\"}");
    assert!(errors.is_empty(), "{errors:?}");
    let mean = prom.scalar(
        "sum(causeway_op_duration_seconds_sum{job=\"ranks\",op=\"allreduce\"}) / sum(causeway_op_duration_seconds_count{job=\"ranks\",op=\"allreduce\"})",
    );
    eprintln!(
        "prometheus: {total} allreduces of 1 MiB over 4 ranks, mean {:.2} ms, {per_link} B per link class and direction",
        mean * 1e3
    );
    done.wait();
    world.join().expect("world");
}
