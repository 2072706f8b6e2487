//! Issue 19 on the virtual clock: whichever rank stops, whenever it stops,
//! every survivor names it, on direct evidence, within the timeout plus the
//! grace — for every algorithm on multi-domain topologies.

use super::*;
use crate::schedule::sim::{simulate, LinkCost};
use crate::schedule::{build, Algorithm, OpKind};
use crate::topology::{LinkClass, Topology};

struct Net<'a>(&'a Topology);

impl Network for Net<'_> {
    fn cost(&self, a: Rank, b: Rank) -> LinkCost {
        match self.0.class(a, b) {
            LinkClass::IntraHost => LinkCost {
                alpha: 2e-6,
                beta: 1e-10,
            },
            LinkClass::IntraDomain => LinkCost {
                alpha: 50e-6,
                beta: 1e-9,
            },
            LinkClass::InterDomain => LinkCost {
                alpha: 20e-3,
                beta: 1e-7,
            },
        }
    }
}

const T: Duration = Duration::from_secs(3);

fn check(topo: &Topology, algo: Algorithm, count: usize) -> usize {
    let n = topo.world();
    let Some(plans) = (0..n)
        .map(|r| build(OpKind::Allreduce, count, topo, algo, 16, r))
        .collect::<Option<Vec<_>>>()
    else {
        return 0;
    };
    let net = Net(topo);
    let cfg = SimConfig {
        elem_bytes: 4,
        window: 3,
        frame_bytes: 256,
    };
    let op_time = simulate(&plans, 4, &net, 3, None).expect("runs").time;
    let grace = JudgeConfig::new(0, T).grace.as_secs_f64();
    let mut cases = 0;
    for victim in 0..n {
        for frac in [0.05, 0.3, 0.6, 0.9] {
            let stop_at = op_time * frac;
            let ends = run_stopped(&plans, &cfg, &net, victim, stop_at, T);
            let what = format!("{algo:?} on {n} ranks, rank {victim} stops at {stop_at:.3} s");
            for (r, end) in ends.iter().enumerate().filter(|(r, _)| *r != victim) {
                match end {
                    StopEnd::Decided(t, d) => {
                        assert_eq!(d.verdict.culprit, victim, "{what}: rank {r} {d:?}");
                        assert!(d.verdict.how.is_direct(), "{what}: rank {r} {d:?}");
                        let bound = stop_at + T.as_secs_f64() + grace + 0.1;
                        assert!(*t <= bound, "{what}: rank {r} decided at {t:.3} s");
                    }
                    // Finished before it needed anything the stop withheld.
                    StopEnd::Done(_) => {}
                    other => panic!("{what}: rank {r} {other:?}"),
                }
            }
            assert!(
                ends.iter()
                    .any(|e| matches!(e, StopEnd::Decided(_, d) if d.from.is_none())),
                "{ends:?}"
            );
            cases += 1;
        }
    }
    cases
}

#[test]
fn every_survivor_names_the_stopped_rank() {
    let mut cases = 0;
    for topo in [
        Topology::grid(2, 2),
        Topology::grid(2, 3),
        Topology::grid(3, 2),
    ] {
        for algo in [Algorithm::Ring, Algorithm::Tree, Algorithm::Hierarchical] {
            cases += check(&topo, algo, 1024);
        }
    }
    assert!(cases >= 60, "{cases} cases");
}

#[test]
fn a_lone_stall_on_a_live_peer_is_reported_after_the_grace() {
    // Two ranks, rank 1 never stops but is never heard from either: it sends
    // nothing (its plan is empty), yet its heartbeats arrive. Rank 0 reports
    // no progress from rank 1 after the timeout and the grace: no direct
    // verdict exists, so none is invented.
    let topo = Topology::flat(2);
    let plans: Vec<Plan> = (0..2)
        .map(|r| build(OpKind::Allreduce, 64, &topo, Algorithm::Ring, 16, r).expect("ring"))
        .collect();
    let idle = Plan::default();
    let plans = vec![plans[0].clone(), idle];
    let net = Net(&topo);
    let cfg = SimConfig {
        elem_bytes: 4,
        window: 3,
        frame_bytes: usize::MAX,
    };
    // Rank 1 "stops" only after everything would be over.
    let ends = run_stopped(&plans, &cfg, &net, 1, 1e6, T);
    let grace = JudgeConfig::new(0, T).grace.as_secs_f64();
    match &ends[0] {
        StopEnd::Decided(t, d) => {
            assert_eq!(d.verdict.culprit, 1);
            assert!(!d.verdict.how.is_direct(), "{d:?}");
            assert!((t - (T.as_secs_f64() + grace)).abs() < 1e-6, "{t}");
        }
        other => panic!("{other:?}"),
    }
}
