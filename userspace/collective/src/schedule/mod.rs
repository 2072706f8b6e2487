//! Schedules as pure data: which rank sends which element range to whom, step by step.
//!
//! A [`Plan`] is one rank's part of a collective. It is split into independent
//! *lanes* (disjoint pieces of the buffer) so that lanes can be pipelined: while
//! one lane's chunk is on the wire another lane's chunk is being reduced. Inside a
//! lane, steps run in order; the actions of one step run concurrently. A send in
//! step `s` of lane `l` matches the receive in step `s` of lane `l` at the peer.
//!
//! Building a plan touches no socket and no clock; [`sim`] executes the plans of
//! every rank on a virtual clock with the α-β cost model.

mod algos;
pub mod confirm;
pub mod sim;

pub use algos::build;
pub use confirm::build_all;

use crate::error::Rank;

/// A half-open range of elements inside the operation's working buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Span {
    pub start: usize,
    pub len: usize,
}

impl Span {
    pub fn new(start: usize, len: usize) -> Self {
        Span { start, len }
    }
    pub fn end(&self) -> usize {
        self.start + self.len
    }
    pub fn overlaps(&self, o: &Span) -> bool {
        self.len > 0 && o.len > 0 && self.start < o.end() && o.start < self.end()
    }
    /// `parts` consecutive pieces whose lengths differ by at most one (longer first).
    pub fn split(&self, parts: usize) -> Vec<Span> {
        (0..parts).map(|i| self.piece(parts, i)).collect()
    }
    /// Piece `i` of [`Span::split`].
    pub fn piece(&self, parts: usize, i: usize) -> Span {
        let base = self.len / parts;
        let extra = self.len % parts;
        let start = self.start + i * base + i.min(extra);
        Span::new(start, base + usize::from(i < extra))
    }
    /// The `i`-th sub-span of length at most `chunk` (empty past the end).
    pub fn chunk(&self, chunk: usize, i: usize) -> Span {
        let s = (i * chunk).min(self.len);
        let e = ((i + 1) * chunk).min(self.len);
        Span::new(self.start + s, e - s)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Send the current contents of `span` to `peer`.
    Send { peer: Rank, span: Span },
    /// Receive `span` from `peer`; combine with the reduction (`reduce`) or overwrite.
    Recv {
        peer: Rank,
        span: Span,
        reduce: bool,
    },
}

impl Action {
    pub fn peer(&self) -> Rank {
        match self {
            Action::Send { peer, .. } | Action::Recv { peer, .. } => *peer,
        }
    }
    pub fn span(&self) -> Span {
        match self {
            Action::Send { span, .. } | Action::Recv { span, .. } => *span,
        }
    }
}

pub type Step = Vec<Action>;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lane {
    pub steps: Vec<Step>,
}

impl Lane {
    /// Whether `span` keeps its contents from step `step` on: no receive of
    /// this lane at that step or a later one writes into it. (Lanes touch
    /// disjoint ranges, so no other lane does.) A send of a settled span may
    /// be read from the working buffer while it is on its way.
    pub fn settled(&self, step: usize, span: Span) -> bool {
        self.steps.iter().skip(step).flatten().all(|a| match *a {
            Action::Recv { span: r, .. } => !r.overlaps(&span),
            Action::Send { .. } => true,
        })
    }

    /// Whether every receive that writes into `span` from step `step` on
    /// comes from `peer`, in a later step: a send of `span` to `peer` at
    /// `step` may then be read from the working buffer while on its way, as
    /// that peer sends what overwrites it only after it has read it all. (The
    /// engine still waits for the send to be written before it writes the
    /// span: a peer that answers early costs time, never bytes.)
    pub fn answered_by(&self, step: usize, span: Span, peer: Rank) -> bool {
        self.steps
            .iter()
            .enumerate()
            .skip(step)
            .all(|(at, actions)| {
                actions.iter().all(|a| match *a {
                    Action::Recv {
                        peer: from,
                        span: r,
                        ..
                    } => !r.overlaps(&span) || (from == peer && at > step),
                    Action::Send { .. } => true,
                })
            })
    }
}

/// One rank's schedule for one operation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub lanes: Vec<Lane>,
}

/// What is being computed; `count` is in elements of the working buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// Working buffer: `count` elements, reduced everywhere.
    Allreduce,
    /// Working buffer: `count` elements, `root`'s contents copied everywhere.
    Broadcast { root: Rank },
    /// Working buffer: `world × count/world` elements; rank r contributes block r.
    Allgather,
    /// Working buffer: `count` elements; rank r ends with the reduced [`Span::piece`] r.
    ReduceScatter,
    /// No data; returns once every rank has entered.
    Barrier,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Reduce-scatter + allgather around a ring ordered by topology.
    Ring,
    /// Binomial tree: reduce to a root, then broadcast.
    Tree,
    /// Reduce-scatter inside each domain, ring allreduce of each shard among its
    /// counterparts in the other domains (all WAN flows in parallel), allgather inside.
    /// Barrier: dissemination inside each domain, then among counterparts.
    Hierarchical,
    /// Broadcast: root scatters blocks, ring allgather.
    ScatterAllgather,
    /// Barrier: log2(n) rounds of dissemination.
    Dissemination,
}

impl Algorithm {
    /// The algorithms that can compute `kind` on this topology.
    pub fn candidates(kind: OpKind, topo: &crate::topology::Topology) -> Vec<Algorithm> {
        match kind {
            OpKind::Allreduce => {
                let mut v = vec![Algorithm::Ring, Algorithm::Tree];
                if topo.is_uniform_multi_domain() {
                    v.push(Algorithm::Hierarchical);
                }
                v
            }
            OpKind::Broadcast { .. } => vec![Algorithm::Tree, Algorithm::ScatterAllgather],
            OpKind::Allgather | OpKind::ReduceScatter => vec![Algorithm::Ring],
            OpKind::Barrier => {
                let mut v = vec![Algorithm::Dissemination];
                if topo.is_uniform_multi_domain() {
                    v.push(Algorithm::Hierarchical);
                }
                v
            }
        }
    }

    pub fn parse(s: &str) -> Option<Algorithm> {
        Some(match s.to_ascii_lowercase().as_str() {
            "ring" => Algorithm::Ring,
            "tree" => Algorithm::Tree,
            "hier" | "hierarchical" => Algorithm::Hierarchical,
            "scatter-allgather" => Algorithm::ScatterAllgather,
            "dissemination" => Algorithm::Dissemination,
            _ => return None,
        })
    }
}

/// Why a plan is not executable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("lane {lane} step {step}: {reason}")]
pub struct PlanError {
    pub lane: usize,
    pub step: usize,
    pub reason: String,
}

impl Plan {
    /// Checks the invariants the engine relies on: ranges inside the buffer, at most
    /// one send to and one receive from each peer per step, receive ranges disjoint
    /// from each other, lanes touching disjoint ranges. (A send may overlap a
    /// receive of its step: sends take their data when the step starts.)
    pub fn validate(&self, me: Rank, world: usize, buf_len: usize) -> Result<(), PlanError> {
        let mut lane_extent: Vec<(usize, Vec<Span>)> = Vec::new();
        for (li, lane) in self.lanes.iter().enumerate() {
            let mut touched = Vec::new();
            for (si, step) in lane.steps.iter().enumerate() {
                let err = |reason: String| PlanError {
                    lane: li,
                    step: si,
                    reason,
                };
                let mut sends = Vec::new();
                let mut recvs: Vec<(Rank, Span)> = Vec::new();
                for a in step {
                    let (p, s) = (a.peer(), a.span());
                    if p >= world || p == me {
                        return Err(err(format!("bad peer {p}")));
                    }
                    if s.end() > buf_len || s.len == 0 {
                        return Err(err(format!("span {s:?} outside 1..={buf_len} elements")));
                    }
                    match a {
                        Action::Send { .. } => {
                            if sends.iter().any(|(q, _)| *q == p) {
                                return Err(err(format!("two sends to {p}")));
                            }
                            sends.push((p, s));
                        }
                        Action::Recv { .. } => {
                            if recvs.iter().any(|(q, r)| *q == p || r.overlaps(&s)) {
                                return Err(err(format!("receive from {p} collides")));
                            }
                            recvs.push((p, s));
                        }
                    }
                    touched.push(s);
                }
            }
            lane_extent.push((li, touched));
        }
        for (i, (li, a)) in lane_extent.iter().enumerate() {
            for (lj, b) in &lane_extent[i + 1..] {
                if a.iter().any(|x| b.iter().any(|y| x.overlaps(y))) {
                    return Err(PlanError {
                        lane: *li,
                        step: 0,
                        reason: format!("overlaps lane {lj}"),
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 2-rank ring allreduce lane of rank 0 (blocks A = 0..4, B = 4..8):
    /// step 0 sends A and reduces B into place, step 1 sends the reduced B and
    /// overwrites A with the result.
    #[test]
    fn a_span_is_settled_once_no_later_receive_writes_into_it() {
        let (a, b) = (Span::new(0, 4), Span::new(4, 4));
        let lane = Lane {
            steps: vec![
                vec![
                    Action::Send { peer: 1, span: a },
                    Action::Recv {
                        peer: 1,
                        span: b,
                        reduce: true,
                    },
                ],
                vec![
                    Action::Send { peer: 1, span: b },
                    Action::Recv {
                        peer: 1,
                        span: a,
                        reduce: false,
                    },
                ],
            ],
        };
        assert!(!lane.settled(0, a), "step 1 overwrites A");
        assert!(!lane.settled(0, b), "B is reduced into in step 0 itself");
        assert!(lane.settled(1, b), "nothing writes B after step 0");
        assert!(!lane.settled(1, a));
        assert!(
            !lane.settled(1, Span::new(3, 2)),
            "a partial overlap counts"
        );
        assert!(lane.settled(2, a), "past the last step");
        assert!(lane.settled(0, Span::new(8, 4)), "outside every receive");
        assert!(lane.answered_by(0, a, 1), "only rank 1 overwrites A, later");
        assert!(!lane.answered_by(0, a, 2), "rank 2 did not get A");
        assert!(
            !lane.answered_by(0, b, 1),
            "B is reduced into in the same step"
        );
        assert!(
            !lane.answered_by(1, a, 1),
            "A is overwritten in the same step"
        );
    }

    /// Hierarchical allreduce, one lane of rank 0 (domain peer 1, WAN
    /// counterpart 2; halves H0 = 0..4, H1 = 4..8): step 0 sends H1 to 1 and
    /// reduces H0, step 1 exchanges H0 with 2, step 2 sends H0 to 1 and
    /// overwrites H1 with 1's result.
    #[test]
    fn a_half_sent_to_the_rank_that_answers_with_it_is_answered() {
        let (h0, h1) = (Span::new(0, 4), Span::new(4, 4));
        let recv = |peer, span, reduce| Action::Recv { peer, span, reduce };
        let lane = Lane {
            steps: vec![
                vec![Action::Send { peer: 1, span: h1 }, recv(1, h0, true)],
                vec![Action::Send { peer: 2, span: h0 }, recv(2, h0, true)],
                vec![Action::Send { peer: 1, span: h0 }, recv(1, h1, false)],
            ],
        };
        assert!(lane.answered_by(0, h1, 1));
        assert!(!lane.settled(0, h1));
        assert!(
            !lane.answered_by(1, h0, 2),
            "the WAN exchange reduces in place"
        );
        assert!(lane.settled(2, h0) && lane.answered_by(2, h0, 1));
        let mut other = lane.clone();
        other.steps[2][1] = recv(3, h1, false);
        assert!(!other.answered_by(0, h1, 1), "H1 comes back from rank 3");
    }
}
