//! Warming the WAN connections at start-up (issue 13): the probe only warms
//! one pair's connections in one direction, so each later pair's first
//! operation paid TCP's start-up (a 1 MiB allreduce's first iteration took
//! 3.4× its median on `wan40`). Every rank exchanges `bulk` bytes each way
//! with its counterpart in the other domain (the hierarchical allreduce's
//! WAN pair) on the bulk connections, and meanwhile `rounds` transfers of
//! `latency` bytes each way on the latency connection; both grow their
//! congestion windows. Runs after pacing started, so the bulk exchange does
//! not overflow the bottleneck queue.

use crate::error::Rank;
use crate::schedule::{Action, Lane, Plan, Span};
use crate::topology::Topology;

/// Bytes of the warm-up's working buffer for [`warm_plan`].
pub fn warm_len(bulk: usize, latency: usize) -> usize {
    2 * bulk + 2 * latency
}

/// The warm-up plan of rank `me`: empty outside a two-domain uniform world.
pub fn warm_plan(topo: &Topology, me: Rank, bulk: usize, latency: usize, rounds: usize) -> Plan {
    let mut plan = Plan { lanes: Vec::new() };
    if !topo.is_uniform_multi_domain() {
        return plan;
    }
    let domains = topo.domains();
    if domains.len() != 2 {
        return plan;
    }
    let Some(my_dom) = domains.iter().position(|d| d.contains(&me)) else {
        return plan;
    };
    let Some(local) = domains[my_dom].iter().position(|&r| r == me) else {
        return plan;
    };
    let peer = domains[1 - my_dom][local];
    let both = |out: Span, inn: Span| {
        vec![
            Action::Send { peer, span: out },
            Action::Recv {
                peer,
                span: inn,
                reduce: false,
            },
        ]
    };
    if bulk > 0 {
        plan.lanes.push(Lane {
            steps: vec![both(Span::new(0, bulk), Span::new(bulk, bulk))],
        });
    }
    if latency > 0 && rounds > 0 {
        let (out, inn) = (
            Span::new(2 * bulk, latency),
            Span::new(2 * bulk + latency, latency),
        );
        plan.lanes.push(Lane {
            steps: (0..rounds).map(|_| both(out, inn)).collect(),
        });
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rank_warms_its_counterpart_both_ways_on_both_kinds_of_connection() {
        let topo = Topology::grid(2, 2);
        let (bulk, lat) = (1000, 100);
        for me in 0..4 {
            let p = warm_plan(&topo, me, bulk, lat, 3);
            let peer = (me + 2) % 4;
            assert_eq!(p.lanes.len(), 2);
            assert_eq!(p.lanes[0].steps.len(), 1);
            assert_eq!(p.lanes[1].steps.len(), 3);
            for step in p.lanes.iter().flat_map(|l| &l.steps) {
                assert!(step.iter().all(|a| a.peer() == peer), "rank {me}: {step:?}");
                assert!(step.iter().all(|a| a.span().end() <= warm_len(bulk, lat)));
            }
            assert_eq!(p.lanes[1].steps[0][0].span().len, lat);
        }
        assert!(warm_plan(&Topology::flat(4), 0, bulk, lat, 3)
            .lanes
            .is_empty());
        assert!(warm_plan(&Topology::grid(3, 1), 0, bulk, lat, 3)
            .lanes
            .is_empty());
    }
}
