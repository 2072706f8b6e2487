//! Rendezvous: torchrun's variables, typed errors for missing or inconsistent
//! values, duplicate ranks and ranks that never come; the start-up probe.

use std::time::{Duration, Instant};

use crate::world::*;
use causeway_collective::store::StoreServer;
use causeway_collective::{
    CollectiveError, Communicator, ConfigError, Identity, LinkClass, Options, ReduceOp,
};

fn set(vars: &[(&str, &str)]) {
    for k in [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "CAUSEWAY_DOMAIN",
        "CAUSEWAY_TOPOLOGY",
        "CAUSEWAY_HOST_ID",
        "CAUSEWAY_ADDR",
        "CAUSEWAY_ALGO",
        "CAUSEWAY_COST",
        "CAUSEWAY_TIMEOUT",
        "CAUSEWAY_TIMEOUT_MS",
        "CAUSEWAY_RENDEZVOUS_TIMEOUT",
        "CAUSEWAY_RENDEZVOUS_TIMEOUT_MS",
        "CAUSEWAY_CHUNK_BYTES",
        "CAUSEWAY_PROBE_BYTES",
        "CAUSEWAY_LATENCY_BYTES",
        "CAUSEWAY_WAN_DUPLICATE_BYTES",
        "CAUSEWAY_WARM_BYTES",
        "CAUSEWAY_WAN_INFLIGHT_GAIN",
        "CAUSEWAY_SOCKET_BUFFER",
        "CAUSEWAY_WAN_RATE",
        "CAUSEWAY_WAN_MBIT",
    ] {
        std::env::remove_var(k);
    }
    for (k, v) in vars {
        std::env::set_var(k, v);
    }
}

/// All environment cases in one test: the environment is process-wide.
#[test]
fn torchrun_environment() {
    let base = [
        ("RANK", "1"),
        ("WORLD_SIZE", "4"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "29500"),
    ];
    set(&base);
    let id = Identity::from_env().expect("valid");
    assert_eq!(
        (id.rank, id.world, id.domain.as_str(), id.master_port),
        (1, 4, "default", 29500)
    );

    set(&base[1..]);
    assert_eq!(Identity::from_env(), Err(ConfigError::MissingVar("RANK")));
    set(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h")]);
    assert_eq!(
        Identity::from_env(),
        Err(ConfigError::MissingVar("MASTER_PORT"))
    );
    set(&[
        ("RANK", "4"),
        ("WORLD_SIZE", "4"),
        ("MASTER_ADDR", "h"),
        ("MASTER_PORT", "1"),
    ]);
    assert_eq!(
        Identity::from_env(),
        Err(ConfigError::RankOutOfRange { rank: 4, world: 4 })
    );
    set(&[
        ("RANK", "x"),
        ("WORLD_SIZE", "4"),
        ("MASTER_ADDR", "h"),
        ("MASTER_PORT", "1"),
    ]);
    assert!(
        matches!(Identity::from_env(), Err(ConfigError::InvalidVar { name, .. }) if name == "RANK")
    );
    set(&[
        ("RANK", "0"),
        ("WORLD_SIZE", "0"),
        ("MASTER_ADDR", "h"),
        ("MASTER_PORT", "1"),
    ]);
    assert_eq!(Identity::from_env(), Err(ConfigError::EmptyWorld));
    set(&[
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "h"),
        ("MASTER_PORT", "70000"),
    ]);
    assert!(
        matches!(Identity::from_env(), Err(ConfigError::InvalidVar { name, .. }) if name == "MASTER_PORT")
    );
    set(&[
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("LOCAL_RANK", "2"),
        ("LOCAL_WORLD_SIZE", "2"),
        ("MASTER_ADDR", "h"),
        ("MASTER_PORT", "1"),
    ]);
    assert!(
        matches!(Identity::from_env(), Err(ConfigError::InvalidVar { name, .. }) if name == "LOCAL_RANK")
    );

    let topo = std::env::temp_dir().join(format!("causeway-topo-{}", std::process::id()));
    std::fs::write(&topo, "0-1 east\n2-3 west\n").expect("write topology");
    let topo_s = topo.display().to_string();
    set(&[
        base[0],
        base[1],
        base[2],
        base[3],
        ("RANK", "2"),
        ("CAUSEWAY_TOPOLOGY", &topo_s),
    ]);
    assert_eq!(Identity::from_env().expect("valid").domain, "west");
    set(&[
        base[0],
        base[1],
        base[2],
        base[3],
        ("CAUSEWAY_DOMAIN", "north"),
        ("CAUSEWAY_TOPOLOGY", &topo_s),
    ]);
    assert_eq!(
        Identity::from_env().expect("valid").domain,
        "north",
        "CAUSEWAY_DOMAIN wins"
    );
    set(&[
        base[0],
        base[1],
        base[2],
        base[3],
        ("CAUSEWAY_TOPOLOGY", "/nonexistent/topology"),
    ]);
    assert!(matches!(
        Identity::from_env(),
        Err(ConfigError::Topology { .. })
    ));
    let _ = std::fs::remove_file(&topo);

    set(&[("CAUSEWAY_ALGO", "bogus")]);
    assert!(
        matches!(Options::from_env(), Err(ConfigError::InvalidVar { name, .. }) if name == "CAUSEWAY_ALGO")
    );
    set(&[
        ("CAUSEWAY_COST", "wan=20ms:200mbit"),
        ("CAUSEWAY_TIMEOUT", "1500ms"),
    ]);
    let o = Options::from_env().expect("valid");
    assert_eq!(
        (o.timeout, o.cost.inter_domain.alpha),
        (Duration::from_millis(1500), 0.02)
    );
    assert_eq!(Options::default().wan_socket_buffer, Some(8 << 20));

    // Rates, sizes and durations with units (causeway_core::units).
    set(&[
        ("CAUSEWAY_RENDEZVOUS_TIMEOUT", "2min"),
        ("CAUSEWAY_CHUNK_BYTES", "64kb"),
        ("CAUSEWAY_PROBE_BYTES", "256k"),
        ("CAUSEWAY_LATENCY_BYTES", "1000"),
        ("CAUSEWAY_SOCKET_BUFFER", "auto"),
        ("CAUSEWAY_WAN_RATE", "1.5gbit"),
    ]);
    let o = Options::from_env().expect("valid");
    assert_eq!(
        (
            o.rendezvous_timeout,
            o.chunk_bytes,
            o.probe_bytes,
            o.latency_bytes,
            o.wan_socket_buffer,
            o.wan_rate_bps
        ),
        (
            Duration::from_secs(120),
            64 << 10,
            256 << 10,
            1000,
            None,
            Some(1_500_000_000)
        )
    );
    set(&[("CAUSEWAY_SOCKET_BUFFER", "4mb")]);
    assert_eq!(
        Options::from_env().expect("valid").wan_socket_buffer,
        Some(4 << 20)
    );
    // Sizes whose 0 turns a feature off; other sizes refuse 0.
    set(&[
        ("CAUSEWAY_WAN_DUPLICATE_BYTES", "0"),
        ("CAUSEWAY_WARM_BYTES", " 0 "),
    ]);
    let o = Options::from_env().expect("valid");
    assert_eq!((o.wan_duplicate_bytes, o.wan_warm_bytes), (0, 0));
    set(&[("CAUSEWAY_WAN_DUPLICATE_BYTES", "16kb")]);
    assert_eq!(
        Options::from_env().expect("valid").wan_duplicate_bytes,
        16 << 10
    );
    // The in-flight governor's gain: 0 turns it off, below 1 is refused.
    assert_eq!(
        Options::from_env().expect("valid").wan_inflight_gain,
        Some(1.5)
    );
    set(&[("CAUSEWAY_WAN_INFLIGHT_GAIN", "0")]);
    assert_eq!(Options::from_env().expect("valid").wan_inflight_gain, None);
    set(&[("CAUSEWAY_WAN_INFLIGHT_GAIN", "1.25")]);
    assert_eq!(
        Options::from_env().expect("valid").wan_inflight_gain,
        Some(1.25)
    );
    for bad in ["0.5", "-1", "NaN", "fast"] {
        set(&[("CAUSEWAY_WAN_INFLIGHT_GAIN", bad)]);
        assert!(
            matches!(Options::from_env(), Err(ConfigError::InvalidVar { name, .. }) if name == "CAUSEWAY_WAN_INFLIGHT_GAIN"),
            "{bad}"
        );
    }
    set(&[("CAUSEWAY_CHUNK_BYTES", "0")]);
    assert!(Options::from_env().is_err(), "a chunk of 0 bytes");

    // A bad value: the error names the variable, the value and what was expected.
    for (name, value, want) in [
        (
            "CAUSEWAY_TIMEOUT",
            "1500",
            "'1500' is not a duration: a duration needs a unit",
        ),
        (
            "CAUSEWAY_WAN_RATE",
            "200mbps",
            "'200mbps' is not a rate: byte rates are ambiguous",
        ),
        (
            "CAUSEWAY_CHUNK_BYTES",
            "1 MiB-ish",
            "'1 MiB-ish' is not a size",
        ),
        (
            "CAUSEWAY_SOCKET_BUFFER",
            "0",
            "'0' is not a size: a size must be greater than zero",
        ),
    ] {
        set(&[(name, value)]);
        let e = Options::from_env().expect_err(name);
        assert!(
            matches!(&e, ConfigError::InvalidVar { name: n, value: v, .. } if n == name && v == value),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with(&format!("{name}={value:?} is invalid: {want}")),
            "{e}"
        );
    }

    // A renamed variable that is still set is refused, not ignored.
    for (old, value, new) in [
        ("CAUSEWAY_TIMEOUT_MS", "1500", "CAUSEWAY_TIMEOUT="),
        (
            "CAUSEWAY_RENDEZVOUS_TIMEOUT_MS",
            "30000",
            "CAUSEWAY_RENDEZVOUS_TIMEOUT=",
        ),
        ("CAUSEWAY_WAN_MBIT", "200", "CAUSEWAY_WAN_RATE="),
    ] {
        set(&[(old, value)]);
        let e = Options::from_env().expect_err(old);
        assert!(
            matches!(&e, ConfigError::InvalidVar { name, .. } if name == old),
            "{e:?}"
        );
        assert!(
            e.to_string().contains("renamed") && e.to_string().contains(new),
            "{e}"
        );
    }
    set(&[]);
}

fn builder(
    server: &StoreServer,
    rank: usize,
    world: usize,
    opts: &Options,
) -> causeway_collective::CommunicatorBuilder {
    Communicator::builder(rank, world)
        .master(server.addr())
        .host_store(false)
        .host_id(format!("h{rank}"))
        .options(opts.clone())
}

#[test]
fn duplicate_rank_is_reported_to_everyone() {
    let server = StoreServer::bind("127.0.0.1:0".parse().expect("addr")).expect("store");
    let opts = Options {
        rendezvous_timeout: Duration::from_secs(10),
        ..test_options()
    };
    let results: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = [0, 1, 1]
            .iter()
            .map(|&r| {
                let b = builder(&server, r, 3, &opts);
                s.spawn(move || b.build().map(|_| ()))
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    for r in results {
        assert!(
            matches!(r, Err(CollectiveError::DuplicateRank { rank: 1 })),
            "{r:?}"
        );
    }
}

#[test]
fn inconsistent_world_size_is_named() {
    let server = StoreServer::bind("127.0.0.1:0".parse().expect("addr")).expect("store");
    let opts = Options {
        rendezvous_timeout: Duration::from_secs(10),
        ..test_options()
    };
    let results: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = [(0, 2), (1, 3)]
            .iter()
            .map(|&(r, w)| {
                let b = builder(&server, r, w, &opts);
                s.spawn(move || b.build().map(|_| ()))
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    for r in results {
        assert!(
            matches!(
                &r,
                Err(CollectiveError::Inconsistent {
                    rank: 1,
                    what: "WORLD_SIZE",
                    ..
                })
            ),
            "{r:?}"
        );
    }
}

#[test]
fn missing_rank_times_out_naming_it() {
    let server = StoreServer::bind("127.0.0.1:0".parse().expect("addr")).expect("store");
    let opts = Options {
        rendezvous_timeout: Duration::from_millis(800),
        ..test_options()
    };
    let t = Instant::now();
    let r = builder(&server, 0, 3, &opts).build().map(|_| ());
    match r {
        Err(CollectiveError::RendezvousTimeout {
            missing,
            stage: "join",
            ..
        }) => {
            assert_eq!(missing, vec![1, 2])
        }
        other => panic!("{other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn probe_measures_every_link_class_and_all_ranks_agree() {
    // Same host, same domain, other domain: all three link classes exist.
    let layout: Layout = [("d0", "a"), ("d0", "a"), ("d0", "b"), ("d1", "c")]
        .iter()
        .map(|(d, h)| (d.to_string(), h.to_string()))
        .collect();
    let opts = Options {
        probe: true,
        probe_bytes: 256 << 10,
        ..test_options()
    };
    let models = run_world(&layout, &opts, |c| {
        let mut v = vec![1i64; 1000];
        c.allreduce(&mut v, ReduceOp::Sum)
            .expect("allreduce after probing");
        assert!(v.iter().all(|x| *x == 4));
        c.cost_model()
    });
    for m in &models[1..] {
        assert_eq!(*m, models[0], "every rank uses the same measured model");
    }
    let m = models[0];
    for class in LinkClass::ALL {
        let c = m.get(class);
        assert!(
            c.alpha > 0.0 && c.alpha < 0.5 && c.beta > 0.0,
            "{class:?}: {c:?}"
        );
        assert_ne!(
            c,
            Options::default().cost.get(class),
            "{class:?} was measured, not defaulted"
        );
    }
}

#[test]
fn steady_state_does_not_allocate_chunk_buffers() {
    let opts = Options {
        chunk_bytes: 4096,
        ..test_options()
    };
    let counts = run_world(&separate_hosts(3), &opts, |c| {
        let mut v = vec![1.0f32; 100_000];
        let mut after = Vec::new();
        for _ in 0..10 {
            c.allreduce(&mut v, ReduceOp::Sum).expect("allreduce");
            after.push(c.buffer_allocations());
        }
        after
    });
    // Each round moves ~130 chunks out and ~130 in per rank: ~1300 buffer uses in
    // the last five rounds. The pool grows while warming up (and may take a
    // few more when timing lets more chunks be in flight at once), then reuses.
    for a in counts {
        eprintln!("pool allocations after each round: {a:?}");
        assert!(a[0] > 0, "{a:?}");
        assert!(
            a[9] - a[4] <= 16,
            "allocations per round after warm-up: {a:?}"
        );
    }
}
