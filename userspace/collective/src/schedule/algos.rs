//! Builders for each algorithm. All pure functions of (operation, size, topology, rank).

use super::{Action, Algorithm, Lane, OpKind, Plan, Span, Step};
use crate::error::Rank;
use crate::topology::Topology;

/// Builds rank `me`'s plan. `count` is the working buffer's length in elements and
/// `chunk` the largest piece one transfer carries (≥ 1). Returns `None` when
/// `algo` cannot compute `kind` on this topology.
pub fn build(
    kind: OpKind,
    count: usize,
    topo: &Topology,
    algo: Algorithm,
    chunk: usize,
    me: Rank,
) -> Option<Plan> {
    let chunk = chunk.max(1);
    let order = topo.ring_order();
    let n = order.len();
    let pos = order.iter().position(|&r| r == me)?;
    let mut plan = Plan::default();
    if n == 1 {
        return Some(plan);
    }
    match (kind, algo) {
        (OpKind::Allreduce, Algorithm::Ring) => {
            for r in lanes(count, n * chunk) {
                let blocks = r.split(n);
                let mut steps = Vec::new();
                ring_rs(&order, &blocks, pos, &mut steps);
                ring_ag(&order, &blocks, pos, &mut steps);
                plan.lanes.push(Lane { steps });
            }
        }
        (OpKind::Allreduce, Algorithm::Tree) => {
            for r in lanes(count, chunk) {
                let mut steps = binomial_reduce(&order, pos, r);
                steps.extend(binomial_bcast(&order, pos, r));
                plan.lanes.push(Lane { steps });
            }
        }
        (OpKind::Allreduce, Algorithm::Hierarchical) => {
            if !topo.is_uniform_multi_domain() {
                return None;
            }
            let domains = topo.domains();
            let my_dom = domains.iter().position(|d| d.contains(&me))?;
            let local = domains[my_dom].iter().position(|&r| r == me)?;
            let counterparts: Vec<Rank> = domains.iter().map(|d| d[local]).collect();
            for r in lanes(count, n * chunk) {
                let parts = r.split(domains[my_dom].len());
                let mut steps = Vec::new();
                ring_rs(&domains[my_dom], &parts, local, &mut steps);
                if counterparts.len() == 2 {
                    // Two domains: one direct exchange of the whole shard, one WAN
                    // latency. Both sides compute a ⊕ b resp. b ⊕ a, bit-identical
                    // because every reduction operator is commutative.
                    let peer = counterparts[1 - my_dom];
                    let mut st = Vec::new();
                    push(
                        &mut st,
                        Action::Send {
                            peer,
                            span: parts[local],
                        },
                    );
                    push(
                        &mut st,
                        Action::Recv {
                            peer,
                            span: parts[local],
                            reduce: true,
                        },
                    );
                    steps.push(st);
                } else {
                    // More domains: a ring among the counterparts keeps a fixed
                    // reduction order (and sends 2(D-1)/D of the shard, not D-1 shards).
                    let sub = parts[local].split(domains.len());
                    ring_rs(&counterparts, &sub, my_dom, &mut steps);
                    ring_ag(&counterparts, &sub, my_dom, &mut steps);
                }
                ring_ag(&domains[my_dom], &parts, local, &mut steps);
                plan.lanes.push(Lane { steps });
            }
        }
        (OpKind::Broadcast { root }, Algorithm::Tree) => {
            let rel = relative(&order, root)?;
            let me_rel = rel.iter().position(|&r| r == me)?;
            for r in lanes(count, chunk) {
                plan.lanes.push(Lane {
                    steps: binomial_bcast(&rel, me_rel, r),
                });
            }
        }
        (OpKind::Broadcast { root }, Algorithm::ScatterAllgather) => {
            let rel = relative(&order, root)?;
            let me_rel = rel.iter().position(|&r| r == me)?;
            for r in lanes(count, n * chunk) {
                let blocks = r.split(n);
                let mut scatter = Vec::new();
                if me_rel == 0 {
                    for (i, b) in blocks.iter().enumerate().skip(1) {
                        push(
                            &mut scatter,
                            Action::Send {
                                peer: rel[i],
                                span: *b,
                            },
                        );
                    }
                } else {
                    push(
                        &mut scatter,
                        Action::Recv {
                            peer: rel[0],
                            span: blocks[me_rel],
                            reduce: false,
                        },
                    );
                }
                let mut steps = vec![scatter];
                ring_ag(&rel, &blocks, me_rel, &mut steps);
                plan.lanes.push(Lane { steps });
            }
        }
        (OpKind::Allgather, Algorithm::Ring) => {
            let per = count / n;
            let blocks: Vec<Span> = (0..n).map(|r| Span::new(r * per, per)).collect();
            ring_of_blocks(&order, &blocks, pos, chunk, false, &mut plan);
        }
        (OpKind::ReduceScatter, Algorithm::Ring) => {
            let all = Span::new(0, count);
            let blocks: Vec<Span> = (0..n).map(|r| all.piece(n, r)).collect();
            ring_of_blocks(&order, &blocks, pos, chunk, true, &mut plan);
        }
        (OpKind::Barrier, Algorithm::Dissemination) => {
            plan.lanes.push(Lane {
                steps: dissemination(&order, pos),
            });
        }
        (OpKind::Barrier, Algorithm::Hierarchical) => {
            // Inside the domain first, then among counterparts: every rank has
            // heard (transitively) from its whole domain before it crosses the
            // WAN, so one WAN latency (two domains) suffices and all ranks leave
            // at about the same time.
            if !topo.is_uniform_multi_domain() {
                return None;
            }
            let domains = topo.domains();
            let my_dom = domains.iter().position(|d| d.contains(&me))?;
            let local = domains[my_dom].iter().position(|&r| r == me)?;
            let counterparts: Vec<Rank> = domains.iter().map(|d| d[local]).collect();
            let mut steps = dissemination(&domains[my_dom], local);
            steps.extend(dissemination(&counterparts, my_dom));
            plan.lanes.push(Lane { steps });
        }
        _ => return None,
    }
    Some(plan)
}

/// Barrier rounds among `group`: in round k the member at position p signals
/// p + 2^k and waits for p − 2^k (buffer: element 0 sent, element 1 received).
fn dissemination(group: &[Rank], pos: usize) -> Vec<Step> {
    let n = group.len();
    let mut steps = Vec::new();
    let mut d = 1;
    while d < n {
        steps.push(vec![
            Action::Send {
                peer: group[(pos + d) % n],
                span: Span::new(0, 1),
            },
            Action::Recv {
                peer: group[(pos + n - d) % n],
                span: Span::new(1, 1),
                reduce: false,
            },
        ]);
        d *= 2;
    }
    steps
}

/// Contiguous lanes of at most `lane_len` elements covering `0..count`.
fn lanes(count: usize, lane_len: usize) -> Vec<Span> {
    let all = Span::new(0, count);
    (0..count.div_ceil(lane_len))
        .map(|i| all.chunk(lane_len, i))
        .collect()
}

/// The ring order rotated so that `root` comes first.
fn relative(order: &[Rank], root: Rank) -> Option<Vec<Rank>> {
    let at = order.iter().position(|&r| r == root)?;
    Some(
        (0..order.len())
            .map(|i| order[(at + i) % order.len()])
            .collect(),
    )
}

fn push(step: &mut Step, a: Action) {
    if a.span().len > 0 {
        step.push(a);
    }
}

/// Ring over per-rank blocks (indexed by rank), pipelined in lanes that each take
/// the `i`-th chunk of every block: reduce-scatter (`reduce`) or allgather.
fn ring_of_blocks(
    order: &[Rank],
    by_rank: &[Span],
    pos: usize,
    chunk: usize,
    reduce: bool,
    plan: &mut Plan,
) {
    let longest = by_rank.iter().map(|b| b.len).max().unwrap_or(0);
    for l in 0..longest.div_ceil(chunk) {
        let blocks: Vec<Span> = order.iter().map(|&r| by_rank[r].chunk(chunk, l)).collect();
        let mut steps = Vec::new();
        if reduce {
            ring_rs(order, &blocks, pos, &mut steps);
        } else {
            ring_ag(order, &blocks, pos, &mut steps);
        }
        plan.lanes.push(Lane { steps });
    }
}

/// Ring reduce-scatter over `group` (blocks indexed by position): afterwards the
/// member at position `i` holds block `i` reduced in the fixed order i+1, i+2, …, i.
fn ring_rs(group: &[Rank], blocks: &[Span], me: usize, steps: &mut Vec<Step>) {
    let n = group.len();
    for s in 0..n.saturating_sub(1) {
        let mut st = Vec::new();
        push(
            &mut st,
            Action::Send {
                peer: group[(me + 1) % n],
                span: blocks[(me + 2 * n - s - 1) % n],
            },
        );
        push(
            &mut st,
            Action::Recv {
                peer: group[(me + n - 1) % n],
                span: blocks[(me + 2 * n - s - 2) % n],
                reduce: true,
            },
        );
        steps.push(st);
    }
}

/// Ring allgather over `group`: the member at position `i` starts with block `i`.
fn ring_ag(group: &[Rank], blocks: &[Span], me: usize, steps: &mut Vec<Step>) {
    let n = group.len();
    for s in 0..n.saturating_sub(1) {
        let mut st = Vec::new();
        push(
            &mut st,
            Action::Send {
                peer: group[(me + 1) % n],
                span: blocks[(me + n - s) % n],
            },
        );
        push(
            &mut st,
            Action::Recv {
                peer: group[(me + n - 1) % n],
                span: blocks[(me + 2 * n - s - 1) % n],
                reduce: false,
            },
        );
        steps.push(st);
    }
}

fn rounds(n: usize) -> usize {
    (usize::BITS - (n.max(1) - 1).leading_zeros()) as usize
}

/// Binomial reduction to position 0; position p combines its children in the fixed
/// order p+1, p+2, p+4, …
fn binomial_reduce(group: &[Rank], me: usize, span: Span) -> Vec<Step> {
    let n = group.len();
    (0..rounds(n))
        .map(|k| {
            let m = 1 << k;
            let mut st = Vec::new();
            if me & (2 * m - 1) == m {
                push(
                    &mut st,
                    Action::Send {
                        peer: group[me - m],
                        span,
                    },
                );
            } else if me & (2 * m - 1) == 0 && me + m < n {
                push(
                    &mut st,
                    Action::Recv {
                        peer: group[me + m],
                        span,
                        reduce: true,
                    },
                );
            }
            st
        })
        .collect()
}

/// Binomial broadcast from position 0.
fn binomial_bcast(group: &[Rank], me: usize, span: Span) -> Vec<Step> {
    let n = group.len();
    (0..rounds(n))
        .rev()
        .map(|k| {
            let m = 1 << k;
            let mut st = Vec::new();
            if me & (2 * m - 1) == 0 && me + m < n {
                push(
                    &mut st,
                    Action::Send {
                        peer: group[me + m],
                        span,
                    },
                );
            } else if me & (2 * m - 1) == m {
                push(
                    &mut st,
                    Action::Recv {
                        peer: group[me - m],
                        span,
                        reduce: false,
                    },
                );
            }
            st
        })
        .collect()
}
