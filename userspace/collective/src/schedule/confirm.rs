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
}
