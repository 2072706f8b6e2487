//! Runs a world of ranks as threads of this process, each with its own Communicator.

use std::time::Duration;

use causeway_collective::store::StoreServer;
use causeway_collective::{Communicator, Options, Rank};

/// Per-rank (domain, host id).
pub type Layout = Vec<(String, String)>;

pub fn separate_hosts(n: usize) -> Layout {
    (0..n)
        .map(|r| ("d0".to_string(), format!("h{r}")))
        .collect()
}

pub fn one_host(n: usize) -> Layout {
    (0..n)
        .map(|_| ("d0".to_string(), "h0".to_string()))
        .collect()
}

pub fn test_options() -> Options {
    Options {
        timeout: Duration::from_secs(20),
        rendezvous_timeout: Duration::from_secs(20),
        streams_wan: 2,
        streams_lan: 2,
        chunk_bytes: 64,
        window: 3,
        probe: false,
        // No start-up WAN warm-up either: with 64-byte chunks its 4 MiB
        // would be 65,536 frames per pair, and tests that count operations,
        // bytes or spans, or play a hostile peer, start from the first call.
        wan_warm_bytes: 0,
        shm_ring_bytes: 64 << 10,
        ..Options::default()
    }
}

/// Runs `f(comm)` on every rank concurrently; returns the results in rank order.
pub fn run_world<R: Send>(
    layout: &Layout,
    opts: &Options,
    f: impl Fn(&Communicator) -> R + Sync,
) -> Vec<R> {
    let server = StoreServer::bind("127.0.0.1:0".parse().expect("addr")).expect("store");
    let n = layout.len();
    let f = &f;
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r: Rank| {
                let (d, h) = layout[r].clone();
                let b = Communicator::builder(r, n)
                    .master(server.addr())
                    .host_store(false)
                    .domain(d)
                    .host_id(h)
                    .options(opts.clone());
                s.spawn(move || {
                    let c = b.build().unwrap_or_else(|e| panic!("rank {r}: {e}"));
                    f(&c)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    })
}

/// Two domains (even/odd ranks), two ranks per host: shared memory and TCP mixed.
pub fn two_domains(n: usize) -> Layout {
    (0..n)
        .map(|r| (format!("d{}", r % 2), format!("h{}", r / 4)))
        .collect()
}

/// A barrier for the rank threads of one test that gives up after a minute
/// (a rank that panicked before it never arrives: the others must fail, not hang).
pub struct AllArrive {
    n: usize,
    arrived: std::sync::Mutex<usize>,
    cv: std::sync::Condvar,
}

impl AllArrive {
    pub fn new(n: usize) -> Self {
        Self {
            n,
            arrived: std::sync::Mutex::new(0),
            cv: std::sync::Condvar::new(),
        }
    }

    /// Returns once all `n` ranks have called it; panics after 60 s.
    pub fn wait(&self) {
        let mut arrived = self.arrived.lock().unwrap_or_else(|p| p.into_inner());
        *arrived += 1;
        self.cv.notify_all();
        let (arrived, waited) = self
            .cv
            .wait_timeout_while(arrived, Duration::from_secs(60), |a| *a < self.n)
            .unwrap_or_else(|p| p.into_inner());
        assert!(
            !waited.timed_out(),
            "only {} of {} ranks arrived within 60 s",
            *arrived,
            self.n
        );
    }
}
