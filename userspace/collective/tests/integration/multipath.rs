//! Striping over several WAN paths (`CAUSEWAY_WAN_PATHS`, `stripe`) on
//! loopback: 4 ranks in two domains, each its own host, every rank listing
//! 127.0.0.1 and 127.0.0.2 as its two path addresses. Results are exact,
//! every path carries bulk chunks, each path's striped connections get their
//! own estimates (one sampler per path), and ranks that disagree on striping
//! are refused at start-up.

use std::net::IpAddr;

use crate::world::*;
use causeway_collective::{stripe, CollectiveError, Options, ReduceOp};

fn layout() -> Layout {
    (0..4)
        .map(|r| (format!("d{}", r / 2), format!("h{r}")))
        .collect()
}

fn paths() -> Vec<IpAddr> {
    vec!["127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap()]
}

fn opts() -> Options {
    Options {
        // Above `latency_bytes`: cross-domain chunks are bulk, striped.
        chunk_bytes: 1 << 20,
        wan_paths: paths(),
        ..test_options()
    }
}

#[test]
fn striped_allreduce_is_exact_and_uses_every_path() {
    let before = stripe::counters();
    let sizes = [0usize, 1, 1000, 300_001, 2 << 20];
    let out = run_world(&layout(), &opts(), |c| {
        // Every WAN pair stripes: each path is sampled (and paced) on its own.
        assert_eq!(c.path_estimates().len(), 2, "rank {}", c.rank());
        let mut sums = Vec::new();
        for (k, &n) in sizes.iter().enumerate() {
            for iter in 0..2 {
                let mut v: Vec<i64> = (0..n)
                    .map(|i| (c.rank() as i64 + 1) * (i as i64 % 1009) + (k + iter) as i64)
                    .collect();
                c.allreduce(&mut v, ReduceOp::Sum)
                    .unwrap_or_else(|e| panic!("rank {}: {n} elements: {e}", c.rank()));
                for (i, x) in v.iter().enumerate() {
                    let want = 10 * (i as i64 % 1009) + 4 * (k + iter) as i64;
                    assert_eq!(*x, want, "rank {} element {i} of {n}", c.rank());
                }
                sums.push(v.iter().sum::<i64>());
            }
        }
        sums
    });
    assert!(out.windows(2).all(|w| w[0] == w[1]));
    let after = stripe::counters();
    let carried = |p: usize| {
        after.bytes_per_path.get(p).copied().unwrap_or(0)
            - before.bytes_per_path.get(p).copied().unwrap_or(0)
    };
    // 2 MiB of i64 = 16 MiB per rank, half of it crosses: both paths carry some.
    assert!(carried(0) > 1 << 20, "{after:?}");
    assert!(carried(1) > 1 << 20, "{after:?}");
}

#[test]
fn ranks_that_disagree_on_striping_are_refused() {
    let layout = layout();
    let server = causeway_collective::store::StoreServer::bind("127.0.0.1:0".parse().unwrap())
        .expect("store");
    let errs: Vec<CollectiveError> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|r| {
                let (d, h) = layout[r].clone();
                let mut o = opts();
                if r == 3 {
                    o.wan_paths.clear();
                }
                let b = causeway_collective::Communicator::builder(r, 4)
                    .master(server.addr())
                    .host_store(false)
                    .domain(d)
                    .host_id(h)
                    .options(o);
                s.spawn(move || b.build().err().expect("a mismatch must fail"))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for e in errs {
        assert!(e.to_string().contains("CAUSEWAY_WAN_PATHS"), "{e}");
    }
}
