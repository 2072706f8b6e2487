//! All ranks must agree on the domain map and on the options that change the
//! wire: a rank without a domain, a topology file that contradicts a rank and
//! a differing wire option each fail the rendezvous on every rank, naming the
//! ranks and the option.

use std::time::{Duration, Instant};

use crate::procs::*;
use crate::world::*;
use causeway_collective::store::StoreServer;
use causeway_collective::{CollectiveError, Communicator, Options, Rank};

/// Builds every rank's communicator concurrently; `domain(r)` is what rank r
/// names (None: nothing), `opts(r)` its options.
fn build_all(
    n: usize,
    domain: impl Fn(Rank) -> Option<String>,
    opts: impl Fn(Rank) -> Options,
) -> Vec<Result<Communicator, CollectiveError>> {
    let server = StoreServer::bind("127.0.0.1:0".parse().expect("addr")).expect("store");
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let mut b = Communicator::builder(r, n)
                    .master(server.addr())
                    .host_store(false)
                    .host_id(format!("h{r}"))
                    .options(opts(r));
                if let Some(d) = domain(r) {
                    b = b.domain(d);
                }
                s.spawn(move || b.build())
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    })
}

#[test]
fn a_rank_without_a_domain_is_refused_on_every_rank() {
    let quick = Options {
        rendezvous_timeout: Duration::from_secs(10),
        ..test_options()
    };
    let out = build_all(
        4,
        |r| (r != 2).then(|| format!("d{}", r % 2)),
        |_| quick.clone(),
    );
    for (r, res) in out.into_iter().enumerate() {
        match res {
            Err(CollectiveError::DomainUnset { unset, set }) => {
                assert_eq!((unset, set), (vec![2], vec![0, 1, 3]), "rank {r}")
            }
            Err(e) => panic!("rank {r}: {e}"),
            Ok(_) => panic!("rank {r} joined a split job"),
        }
    }
}

#[test]
fn no_rank_naming_a_domain_is_one_domain() {
    let out = build_all(2, |_| None, |_| test_options());
    for res in out {
        let c = res.expect("joins");
        assert_eq!(
            (c.domain_of(0), c.domain_of(1)),
            (Some("default"), Some("default"))
        );
        assert_eq!(c.topology().domains().len(), 1);
    }
}

#[test]
fn a_wire_option_that_differs_is_refused_on_every_rank() {
    let out = build_all(
        3,
        |r| Some(format!("d{}", r % 2)),
        |r| Options {
            chunk_bytes: if r == 1 { 4096 } else { 64 },
            ..test_options()
        },
    );
    for (r, res) in out.into_iter().enumerate() {
        match res {
            Err(CollectiveError::ConfigMismatch { key, values }) => {
                assert_eq!(key, "CAUSEWAY_CHUNK_BYTES", "rank {r}");
                assert_eq!(
                    values,
                    vec![
                        ("64".to_string(), vec![0, 2]),
                        ("4096".to_string(), vec![1])
                    ]
                );
            }
            Err(e) => panic!("rank {r}: {e}"),
            Ok(_) => panic!("rank {r} joined with different chunk sizes"),
        }
    }
}

/// Every rank's init error line, within `limit`.
fn init_errors(
    n: usize,
    env: impl Fn(usize) -> Vec<(String, String)>,
    limit: Duration,
) -> Vec<String> {
    let (_procs, rx) = spawn_ranks(
        n,
        &(0..n).collect::<Vec<_>>(),
        free_port(),
        env,
        &["--elems", "1000", "--iters", "1"],
    );
    outcomes(&rx, &(0..n).collect::<Vec<_>>(), Instant::now(), limit)
        .into_iter()
        .map(|(r, v, _)| {
            assert_eq!(v["event"], "error", "rank {r} must not run: {v}");
            assert_eq!(v["stage"], "init", "rank {r}: {v}");
            v["error"].as_str().expect("error text").to_string()
        })
        .collect()
}

#[test]
fn a_topology_file_that_contradicts_a_rank_is_refused_on_every_rank() {
    let topo = std::env::temp_dir().join(format!("causeway-agree-{}", std::process::id()));
    std::fs::write(&topo, "0-1 east\n2-3 west\n").expect("write topology");
    let path = topo.display().to_string();
    // Rank 1 says west; the file (read by ranks 0, 2, 3) puts it in east.
    let errors = init_errors(
        4,
        |r| {
            if r == 1 {
                vec![("CAUSEWAY_DOMAIN".into(), "west".into())]
            } else {
                vec![("CAUSEWAY_TOPOLOGY".into(), path.clone())]
            }
        },
        Duration::from_secs(30),
    );
    let _ = std::fs::remove_file(&topo);
    for (r, e) in errors.iter().enumerate() {
        assert!(
            e.contains("domain of rank 1: east by the CAUSEWAY_TOPOLOGY file of ranks [0, 2, 3], west by its CAUSEWAY_DOMAIN"),
            "rank {r}: {e}"
        );
    }
}

#[test]
fn an_algorithm_override_on_one_rank_is_refused_on_every_rank() {
    let errors = init_errors(
        3,
        |r| {
            let mut v = vec![("CAUSEWAY_DOMAIN".into(), "d0".into())];
            if r == 2 {
                v.push(("CAUSEWAY_ALGO".into(), "ring".into()));
            }
            v
        },
        Duration::from_secs(30),
    );
    for (r, e) in errors.iter().enumerate() {
        assert!(
            e.contains("ranks disagree on CAUSEWAY_ALGO: auto on ranks [0, 1], Ring on ranks [2]"),
            "rank {r}: {e}"
        );
    }
}
