use super::*;
use crate::schedule::{build, Action, Algorithm, OpKind, Span};
use crate::topology::{LinkClass, Topology};

/// α-β per link class, with one shared WAN pipe per ordered pair of domains.
struct Net<'a> {
    topo: &'a Topology,
    host: LinkCost,
    domain: LinkCost,
    wan: LinkCost,
}

impl Network for Net<'_> {
    fn cost(&self, a: Rank, b: Rank) -> LinkCost {
        match self.topo.class(a, b) {
            LinkClass::IntraHost => self.host,
            LinkClass::IntraDomain => self.domain,
            LinkClass::InterDomain => self.wan,
        }
    }
    fn resource(&self, a: Rank, b: Rank) -> (usize, usize) {
        match self.topo.class(a, b) {
            LinkClass::InterDomain => (
                usize::MAX - self.topo.domain_of(a) as usize,
                self.topo.domain_of(b) as usize,
            ),
            _ => (a, b),
        }
    }
}

fn wan_net(topo: &Topology) -> Net<'_> {
    Net {
        topo,
        host: LinkCost {
            alpha: 2e-6,
            beta: 1e-10,
        },
        domain: LinkCost {
            alpha: 50e-6,
            beta: 1e-9,
        },
        wan: LinkCost {
            alpha: 20e-3,
            beta: 1e-8,
        },
    }
}

fn plans(kind: OpKind, count: usize, topo: &Topology, algo: Algorithm, chunk: usize) -> Vec<Plan> {
    (0..topo.world())
        .map(|r| {
            let p = build(kind, count, topo, algo, chunk, r).expect("algorithm applies");
            p.validate(r, topo.world(), count.max(2))
                .unwrap_or_else(|e| panic!("{kind:?} {algo:?} rank {r}: {e}"));
            p
        })
        .collect()
}

fn run(
    kind: OpKind,
    count: usize,
    topo: &Topology,
    algo: Algorithm,
    chunk: usize,
    bufs: &mut [Vec<f64>],
) -> SimOutcome {
    let p = plans(kind, count, topo, algo, chunk);
    let net = wan_net(topo);
    let data = SimData {
        buffers: bufs,
        reduce: &|a, b| a + b,
    };
    simulate(&p, 4, &net, 3, Some(data))
        .unwrap_or_else(|e| panic!("{kind:?} {algo:?} n={}: {e}", topo.world()))
}

fn topologies() -> Vec<Topology> {
    let mut v: Vec<Topology> = (1..=8).map(Topology::flat).collect();
    v.push(Topology::grid(2, 2));
    v.push(Topology::grid(2, 3));
    v.push(Topology::grid(3, 2));
    v.push(Topology::grid(4, 2));
    // Two ranks per host, two hosts per domain, two domains.
    let labels: Vec<(String, String)> = (0..8)
        .map(|r| (format!("d{}", r / 4), format!("h{}", r / 2)))
        .collect();
    v.push(Topology::from_labels(&labels));
    v
}

#[test]
fn every_algorithm_computes_its_operation() {
    for topo in topologies() {
        let n = topo.world();
        for count in [0usize, 1, 2, 7, 13, 64, 101] {
            for chunk in [1usize, 3, 1000] {
                let input =
                    |r: usize| -> Vec<f64> { (0..count).map(|i| (r * 1000 + i) as f64).collect() };
                let sum: Vec<f64> = (0..count)
                    .map(|i| (0..n).map(|r| (r * 1000 + i) as f64).sum())
                    .collect();
                for algo in Algorithm::candidates(OpKind::Allreduce, &topo) {
                    let mut bufs: Vec<Vec<f64>> = (0..n).map(input).collect();
                    run(OpKind::Allreduce, count, &topo, algo, chunk, &mut bufs);
                    assert!(
                        bufs.iter().all(|b| *b == sum),
                        "allreduce {algo:?} n={n} count={count} chunk={chunk}"
                    );
                }
                for root in [0, n - 1, n / 2] {
                    let kind = OpKind::Broadcast { root };
                    for algo in Algorithm::candidates(kind, &topo) {
                        let mut bufs: Vec<Vec<f64>> = (0..n).map(input).collect();
                        run(kind, count, &topo, algo, chunk, &mut bufs);
                        assert!(
                            bufs.iter().all(|b| *b == input(root)),
                            "bcast {algo:?} n={n} root={root}"
                        );
                    }
                }
                let mut bufs: Vec<Vec<f64>> = (0..n)
                    .map(|r| {
                        (0..n * count)
                            .map(|i| {
                                if i / count.max(1) == r {
                                    i as f64
                                } else {
                                    -1.0
                                }
                            })
                            .collect()
                    })
                    .collect();
                run(
                    OpKind::Allgather,
                    n * count,
                    &topo,
                    Algorithm::Ring,
                    chunk,
                    &mut bufs,
                );
                let want: Vec<f64> = (0..n * count).map(|i| i as f64).collect();
                assert!(
                    bufs.iter().all(|b| *b == want),
                    "allgather n={n} count={count}"
                );
                let mut bufs: Vec<Vec<f64>> = (0..n).map(input).collect();
                run(
                    OpKind::ReduceScatter,
                    count,
                    &topo,
                    Algorithm::Ring,
                    chunk,
                    &mut bufs,
                );
                for (r, b) in bufs.iter().enumerate() {
                    let mine = Span::new(0, count).piece(n, r);
                    assert_eq!(
                        b[mine.start..mine.end()],
                        sum[mine.start..mine.end()],
                        "reduce-scatter n={n} r={r}"
                    );
                }
            }
        }
        let mut bufs = vec![vec![0.0; 2]; n];
        run(
            OpKind::Barrier,
            2,
            &topo,
            Algorithm::Dissemination,
            1,
            &mut bufs,
        );
    }
}

#[test]
fn barrier_waits_for_the_last_rank() {
    // Rank 3 is the only one far away; no rank can leave the barrier before
    // information from rank 3 could have reached it.
    let topo = Topology::from_labels(&[("a", "0"), ("a", "1"), ("a", "2"), ("b", "3")]);
    let p = plans(OpKind::Barrier, 2, &topo, Algorithm::Dissemination, 1);
    let out = simulate(&p, 1, &wan_net(&topo), 1, None).expect("barrier runs");
    assert!(out.time >= 20e-3, "{}", out.time);
}

/// Who each rank has heard from, directly or through others, when it leaves:
/// a send posted at step s carries what its sender knew after step s − 1.
fn heard_from(plans: &[Plan]) -> Vec<Vec<bool>> {
    let n = plans.len();
    let mut known: Vec<Vec<bool>> = (0..n).map(|r| (0..n).map(|q| q == r).collect()).collect();
    let lane = |p: &Plan| p.lanes.first().map(|l| l.steps.clone()).unwrap_or_default();
    let steps = plans.iter().map(|p| lane(p).len()).max().unwrap_or(0);
    for s in 0..steps {
        let before = known.clone();
        for (r, p) in plans.iter().enumerate() {
            for a in lane(p).get(s).into_iter().flatten() {
                if let Action::Recv { peer, .. } = a {
                    for q in 0..n {
                        known[r][q] |= before[*peer][q];
                    }
                }
            }
        }
    }
    known
}

#[test]
fn every_barrier_hears_from_every_rank() {
    for topo in topologies() {
        for algo in Algorithm::candidates(OpKind::Barrier, &topo) {
            let p = plans(OpKind::Barrier, 2, &topo, algo, 1);
            for (r, k) in heard_from(&p).iter().enumerate() {
                assert!(
                    k.iter().all(|&b| b),
                    "{algo:?} n={} rank {r} leaves without hearing from {:?}",
                    topo.world(),
                    k.iter()
                        .enumerate()
                        .filter(|(_, b)| !**b)
                        .map(|(q, _)| q)
                        .collect::<Vec<_>>()
                );
            }
        }
    }
}

#[test]
fn hierarchical_barrier_crosses_the_wan_once() {
    let topo = Topology::grid(2, 4);
    let t = |algo| {
        let p = plans(OpKind::Barrier, 2, &topo, algo, 1);
        simulate(&p, 1, &wan_net(&topo), 1, None)
            .expect("barrier runs")
            .time
    };
    let (hier, diss) = (t(Algorithm::Hierarchical), t(Algorithm::Dissemination));
    let wan = wan_net(&topo).wan.alpha;
    assert!(hier >= wan && hier < 1.5 * wan, "{hier}");
    assert!(diss >= 2.0 * wan, "{diss}");
}

fn wan_bytes(out: &SimOutcome, topo: &Topology) -> u64 {
    out.link_bytes
        .iter()
        .filter(|((a, b), _)| topo.class(*a, *b) == LinkClass::InterDomain)
        .map(|(_, v)| v)
        .sum()
}

#[test]
fn hierarchical_halves_wan_bytes_and_wins_on_the_wan() {
    let topo = Topology::grid(2, 4);
    let count = 8 << 20; // 32 MiB of f32
    let net = wan_net(&topo);
    let mut t = std::collections::HashMap::new();
    for algo in [Algorithm::Ring, Algorithm::Hierarchical, Algorithm::Tree] {
        let p = plans(OpKind::Allreduce, count, &topo, algo, 1 << 18);
        let out = simulate(&p, 4, &net, 4, None).expect("runs");
        t.insert(algo, (out.time, wan_bytes(&out, &topo)));
    }
    let (ring, hier) = (t[&Algorithm::Ring], t[&Algorithm::Hierarchical]);
    assert!(hier.0 < ring.0, "hierarchical {hier:?} vs ring {ring:?}");
    assert!(
        hier.1 * 3 / 2 <= ring.1,
        "WAN bytes: hierarchical {} vs ring {}",
        hier.1,
        ring.1
    );
    // Exactly 2(D-1)/D of the buffer crosses the WAN in each direction.
    assert_eq!(hier.1, 2 * (count as u64 * 4));
}

#[test]
fn pipelining_overlaps_steps() {
    let topo = Topology::flat(4);
    let net = wan_net(&topo);
    let count = 1 << 20;
    let one = simulate(
        &plans(OpKind::Allreduce, count, &topo, Algorithm::Tree, count),
        4,
        &net,
        1,
        None,
    )
    .expect("runs");
    let piped = simulate(
        &plans(OpKind::Allreduce, count, &topo, Algorithm::Tree, count / 32),
        4,
        &net,
        8,
        None,
    )
    .expect("runs");
    assert!(
        piped.time < one.time * 0.6,
        "pipelined {} vs whole {}",
        piped.time,
        one.time
    );
}

#[test]
fn a_send_without_receiver_is_reported() {
    let topo = Topology::flat(2);
    let mut p = plans(OpKind::Allreduce, 4, &topo, Algorithm::Ring, 1);
    p[1].lanes[0].steps[0].retain(|a| !matches!(a, crate::schedule::Action::Recv { .. }));
    let err = simulate(&p, 4, &wan_net(&topo), 1, None).expect_err("broken plan");
    assert!(
        matches!(
            err,
            SimError::Unmatched { from: 0, to: 1, .. } | SimError::Deadlock { .. }
        ),
        "{err}"
    );
}
