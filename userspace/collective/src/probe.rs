//! Start-up measurement of α and β per link class: for each class present, the
//! first pair of ranks of that class runs a ping-pong (α) and a one-way bulk
//! transfer (β) through the engine itself; the measuring rank publishes the result
//! in the store and every rank reads the same numbers, so all choose alike.
//!
//! It sees the communicator only through [`ProbeLink`]: run a plan, share a value.

use std::time::{Duration, Instant};

use crate::config::Options;
use crate::cost::CostModel;
use crate::error::{Rank, Result, StoreError};
use crate::schedule::sim::LinkCost;
use crate::schedule::{Action, Lane, Plan, Span};
use crate::topology::{LinkClass, Topology};

const PINGS: usize = 5;

/// What the probe needs from a communicator, and nothing more.
pub(crate) trait ProbeLink {
    fn rank(&self) -> Rank;
    fn topology(&self) -> &Topology;
    /// Runs `plan` through the engine on a zeroed working buffer of `len` bytes.
    fn run_plan(&self, plan: Plan, len: usize) -> Result<()>;
    /// Publishes `value` under `key` in the bootstrap store.
    fn publish(&self, key: &str, value: &[u8]) -> Result<()>;
    /// Waits (up to `timeout`) for `key` in the bootstrap store.
    fn lookup(&self, key: &str, timeout: Duration) -> Result<Vec<u8>>;
}

/// The first pair (a < b) whose link is of `class`.
pub fn pair_of(topo: &Topology, class: LinkClass) -> Option<(Rank, Rank)> {
    let n = topo.world();
    (0..n)
        .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
        .find(|&(a, b)| topo.class(a, b) == class)
}

/// `rounds` exchanges of `len` elements out (a→b) and 1 element back (b→a).
pub fn exchange_plan(me: Rank, a: Rank, b: Rank, rounds: usize, len: usize) -> Plan {
    let out = Span::new(0, len);
    let back = Span::new(len, 1);
    let mut steps = Vec::new();
    for _ in 0..rounds {
        if me == a {
            steps.push(vec![Action::Send { peer: b, span: out }]);
            steps.push(vec![Action::Recv {
                peer: b,
                span: back,
                reduce: false,
            }]);
        } else if me == b {
            steps.push(vec![Action::Recv {
                peer: a,
                span: out,
                reduce: false,
            }]);
            steps.push(vec![Action::Send {
                peer: a,
                span: back,
            }]);
        }
    }
    Plan {
        lanes: if steps.is_empty() {
            Vec::new()
        } else {
            vec![Lane { steps }]
        },
    }
}

fn timed(comm: &impl ProbeLink, plan: Plan, len: usize) -> Result<Duration> {
    let t = Instant::now();
    comm.run_plan(plan, len)?;
    Ok(t.elapsed())
}

/// Probes every link class present and returns the model all ranks agree on.
pub(crate) fn measure(comm: &impl ProbeLink, opts: &Options) -> Result<CostModel> {
    let me = comm.rank();
    let mut model = opts.cost;
    let mut classes = Vec::new();
    for class in LinkClass::ALL {
        let Some((a, b)) = pair_of(comm.topology(), class) else {
            continue;
        };
        classes.push(class);
        let bulk = opts.probe_bytes.max(2);
        // Warm-up (connection start, first-touch of buffers), then measure.
        timed(comm, exchange_plan(me, a, b, 1, 1), 2)?;
        let ping = timed(comm, exchange_plan(me, a, b, PINGS, 1), 2)?;
        timed(comm, exchange_plan(me, a, b, 1, bulk - 1), bulk)?;
        let bulk_t = timed(comm, exchange_plan(me, a, b, 1, bulk - 1), bulk)?;
        if me == a {
            let alpha = ping.as_secs_f64() / (2 * PINGS) as f64;
            let beta = ((bulk_t.as_secs_f64() - 2.0 * alpha) / (bulk - 1) as f64).max(1e-12);
            tracing::info!(
                ?class,
                alpha_us = alpha * 1e6,
                gbit_s = 8.0 / beta / 1e9,
                "probed"
            );
            comm.publish(&key(class), format!("{alpha} {beta}").as_bytes())?;
        }
    }
    for class in classes {
        let v = comm.lookup(&key(class), opts.rendezvous_timeout)?;
        let s = String::from_utf8_lossy(&v).into_owned();
        let mut it = s.split(' ').map(str::parse::<f64>);
        match (it.next(), it.next()) {
            (Some(Ok(alpha)), Some(Ok(beta))) => model.set(class, LinkCost { alpha, beta }),
            _ => return Err(StoreError::Protocol(format!("bad probe result {s:?}")).into()),
        }
    }
    Ok(model)
}

fn key(class: LinkClass) -> String {
    format!("probe/{class:?}")
}
