//! Plans in which every rank hears from every rank, so that a rank that made a
//! different call can never let another return Ok.
//!
//! Every data frame carries its sender's call and is checked on arrival, and a
//! rank sends in step `s` of a lane only after it checked what that lane
//! received before: a chunk from `p` vouches for `p`'s call and for the calls of
//! everyone `p` heard from earlier in that lane. An allreduce, reduce-scatter,
//! allgather or barrier has every rank hear from every rank this way; a
//! broadcast does not (the root hears from nobody), nor does an empty plan. To
//! those, [`build_all`] adds one *confirmation lane* (lane 0): a barrier on two
//! scratch elements just past the working buffer, which the driver keeps apart.

use super::{build, Action, Algorithm, Lane, OpKind, Plan, Span};
use crate::topology::Topology;

/// Every rank's plan for `kind` on `count` elements, with a confirmation lane
/// when the plans alone would let some rank finish without hearing from
/// every other. `None` when `algo` cannot compute `kind` on this topology.
pub fn build_all(
    kind: OpKind,
    count: usize,
    topo: &Topology,
    algo: Algorithm,
    chunk: usize,
) -> Option<Vec<Plan>> {
    let mut plans: Vec<Plan> = (0..topo.world())
        .map(|r| build(kind, count, topo, algo, chunk, r))
        .collect::<Option<_>>()?;
    if plans.len() > 1 && !everyone_hears_everyone(&plans) {
        let barrier = if topo.is_uniform_multi_domain() {
            Algorithm::Hierarchical
        } else {
            Algorithm::Dissemination
        };
        for (r, p) in plans.iter_mut().enumerate() {
            let confirm = build(OpKind::Barrier, 2, topo, barrier, 1, r)?;
            let lane = confirm.lanes.into_iter().next().unwrap_or_default();
            p.lanes.insert(0, past(lane, count));
        }
    }
    Some(plans)
}

/// Elements a plan of `count` elements needs beyond the working buffer.
pub fn scratch_elems(plan: &Plan, count: usize) -> usize {
    let end = plan
        .lanes
        .iter()
        .flat_map(|l| l.steps.iter().flatten())
        .map(|a| a.span().end())
        .max()
        .unwrap_or(0);
    end.saturating_sub(count)
}

/// `lane` with every span moved `by` elements up.
fn past(lane: Lane, by: usize) -> Lane {
    let mv = |s: Span| Span::new(s.start + by, s.len);
    Lane {
        steps: lane
            .steps
            .into_iter()
            .map(|st| {
                st.into_iter()
                    .map(|a| match a {
                        Action::Send { peer, span } => Action::Send {
                            peer,
                            span: mv(span),
                        },
                        Action::Recv { peer, span, reduce } => Action::Recv {
                            peer,
                            span: mv(span),
                            reduce,
                        },
                    })
                    .collect()
            })
            .collect(),
    }
}

/// Whether, in some lane, every rank transitively receives from every other.
pub fn everyone_hears_everyone(plans: &[Plan]) -> bool {
    let n = plans.len();
    let lanes = plans.iter().map(|p| p.lanes.len()).max().unwrap_or(0);
    let mut heard = vec![vec![false; n]; n];
    for (r, h) in heard.iter_mut().enumerate() {
        h[r] = true;
    }
    for l in 0..lanes {
        // known[r][q]: r has heard from q within lane l so far.
        let mut known: Vec<Vec<bool>> = (0..n).map(|r| (0..n).map(|q| q == r).collect()).collect();
        let steps = plans
            .iter()
            .filter_map(|p| p.lanes.get(l))
            .map(|x| x.steps.len())
            .max()
            .unwrap_or(0);
        for s in 0..steps {
            let before = known.clone();
            for (r, p) in plans.iter().enumerate() {
                let step = p.lanes.get(l).and_then(|x| x.steps.get(s));
                for a in step.into_iter().flatten() {
                    if let Action::Recv { peer, .. } = a {
                        for q in 0..n {
                            known[r][q] |= before[*peer][q];
                        }
                    }
                }
            }
        }
        for r in 0..n {
            for q in 0..n {
                heard[r][q] |= known[r][q];
            }
        }
    }
    heard.iter().all(|h| h.iter().all(|&b| b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topologies() -> Vec<Topology> {
        vec![
            Topology::flat(2),
            Topology::flat(5),
            Topology::grid(2, 2),
            Topology::grid(2, 3),
        ]
    }

    #[test]
    fn only_plans_that_leave_a_rank_unheard_get_a_confirmation() {
        for topo in topologies() {
            let n = topo.world();
            for (kind, algo, count) in [
                (OpKind::Allreduce, Algorithm::Ring, 4 * n),
                (OpKind::Allreduce, Algorithm::Tree, 100),
                (OpKind::Allgather, Algorithm::Ring, 3 * n),
                (OpKind::ReduceScatter, Algorithm::Ring, 3 * n),
                (OpKind::Barrier, Algorithm::Dissemination, 2),
            ] {
                let plain: Vec<Plan> = (0..n)
                    .map(|r| build(kind, count, &topo, algo, 1000, r).expect("applies"))
                    .collect();
                assert!(everyone_hears_everyone(&plain), "{kind:?} {algo:?} n={n}");
                let all = build_all(kind, count, &topo, algo, 1000).expect("applies");
                assert_eq!(all, plain, "{kind:?} needs no confirmation");
            }
            for (kind, count) in [(OpKind::Broadcast { root: 1 }, 64), (OpKind::Allreduce, 0)] {
                let all = build_all(kind, count, &topo, Algorithm::Tree, 1000)
                    .or_else(|| build_all(kind, count, &topo, Algorithm::Ring, 1000))
                    .expect("applies");
                assert!(
                    everyone_hears_everyone(&all),
                    "{kind:?} count {count} n={n}"
                );
                for (r, p) in all.iter().enumerate() {
                    assert_eq!(scratch_elems(p, count), 2, "rank {r}");
                    p.validate(r, n, count + 2).expect("valid with the scratch");
                }
            }
        }
    }

    use proptest::prelude::*;

    use crate::cost::{CostModel, CostedNet};
    use crate::dtype::{DType, ReduceOp};
    use crate::schedule::sim::{run_calls, RankEnd, SimConfig};
    use crate::wire::{Call, CallKind, Codec};

    /// The calls ranks may make (on a world of `n`): (call, operation).
    fn call(i: usize, n: usize) -> (Call, OpKind) {
        let base = Call {
            kind: CallKind::Allreduce,
            dtype: DType::F32,
            count: 24,
            reduce: ReduceOp::Sum,
            root: 0,
            codec: Codec::Raw,
        };
        let bcast = |root: usize| {
            let c = Call {
                kind: CallKind::Broadcast,
                root: root as u32,
                ..base
            };
            (c, OpKind::Broadcast { root })
        };
        match i {
            0 => (base, OpKind::Allreduce),
            1 => (
                Call {
                    dtype: DType::I32,
                    ..base
                },
                OpKind::Allreduce,
            ),
            2 => (
                Call {
                    reduce: ReduceOp::Max,
                    ..base
                },
                OpKind::Allreduce,
            ),
            3 => (Call { count: 20, ..base }, OpKind::Allreduce),
            4 => (Call { count: 0, ..base }, OpKind::Allreduce),
            5 => bcast(0),
            6 => bcast(n - 1),
            7 => {
                let c = Call {
                    kind: CallKind::Allgather,
                    count: 3 * n as u64,
                    ..base
                };
                (c, OpKind::Allgather)
            }
            8 => (
                Call {
                    kind: CallKind::ReduceScatter,
                    ..base
                },
                OpKind::ReduceScatter,
            ),
            _ => (
                Call {
                    kind: CallKind::Barrier,
                    count: 2,
                    ..base
                },
                OpKind::Barrier,
            ),
        }
    }

    proptest! {
        /// Ranks `deviants` make call `other`, the rest call `same`: unless the
        /// two are equal, no rank's executor ever completes, however the
        /// chunks are timed, so no caller can see Ok.
        #[test]
        fn mismatched_calls_never_complete_on_any_rank(
            t in 0usize..4, same in 0usize..10, other in 0usize..10,
            algo_same in 0usize..3, algo_other in 0usize..3,
            deviants in 1u32..15, chunk in 1usize..9, window in 1usize..4,
        ) {
            let topo = vec![Topology::flat(2), Topology::flat(3), Topology::flat(4), Topology::grid(2, 2)]
                .swap_remove(t);
            let n = topo.world();
            let (mut calls, mut algos, mut plans) = (Vec::new(), Vec::new(), Vec::new());
            for r in 0..n {
                let (i, a) = if deviants & (1 << r) != 0 { (other, algo_other) } else { (same, algo_same) };
                let (c, kind) = call(i, n);
                let cands = Algorithm::candidates(kind, &topo);
                let algo = cands[a % cands.len()];
                let mut all = build_all(kind, c.count as usize, &topo, algo, chunk).expect("applies");
                plans.push(all.swap_remove(r));
                calls.push(c);
                algos.push(algo);
            }
            let model = CostModel::default();
            let net = CostedNet { topo: &topo, model: &model };
            let cfg = SimConfig { elem_bytes: 4, window, frame_bytes: 8 };
            let ends = run_calls(&plans, &calls, &cfg, &net);
            if calls.iter().all(|c| *c == calls[0]) {
                // One call, one algorithm: everyone completes. (One call with
                // different algorithms is a configuration mismatch, not a call's.)
                if algos.iter().all(|a| *a == algos[0]) {
                    prop_assert!(ends.iter().all(|e| matches!(e, RankEnd::Done(_))), "{:?}", ends);
                }
            } else {
                for (r, e) in ends.iter().enumerate() {
                    prop_assert!(
                        !matches!(e, RankEnd::Done(_)),
                        "rank {} completed: calls {:?} ends {:?}", r, calls, ends
                    );
                }
            }
        }
    }
}
