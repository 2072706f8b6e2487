//! The executor on a virtual clock: every input is a call, every time a number.

use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::schedule::{build, Algorithm, Lane, OpKind, Span};
use crate::topology::Topology;
use crate::wire::{CallKind, Codec};

const ELEM: usize = 4;

const CALL: Call = Call {
    kind: CallKind::Allreduce,
    dtype: crate::dtype::DType::F32,
    count: 10,
    reduce: crate::dtype::ReduceOp::Sum,
    root: 0,
    codec: Codec::Raw,
};

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn cfg(window: usize, frame_bytes: usize) -> ExecConfig {
    ExecConfig {
        op: 7,
        rank: 0,
        call: CALL,
        elem_bytes: ELEM,
        window,
        frame_bytes,
        idle_timeout: secs(5.0),
        mark_tail: true,
    }
}

fn one_lane(steps: Vec<Vec<Action>>) -> Plan {
    Plan {
        lanes: vec![Lane { steps }],
    }
}

fn send(peer: Rank, start: usize, len: usize) -> Action {
    Action::Send {
        peer,
        span: Span::new(start, len),
    }
}

fn recv(peer: Rank, start: usize, len: usize) -> Action {
    Action::Recv {
        peer,
        span: Span::new(start, len),
        reduce: true,
    }
}

fn id(lane: usize, step: usize, offset: u64) -> ChunkId {
    ChunkId { lane, step, offset }
}

fn drain<P>(ex: &mut Executor<'_, P>) -> Vec<Output<P>> {
    std::iter::from_fn(|| ex.poll()).collect()
}

/// (peer, lane, step, offset, range) of the sends among `outs`.
fn sends<P>(outs: &[Output<P>]) -> Vec<(Rank, usize, usize, u64, Range<usize>)> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Send(s) => Some((s.peer, s.lane, s.step, s.offset, s.range.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn the_idle_timeout_fires_at_the_right_virtual_time() {
    let plan = one_lane(vec![vec![send(1, 0, 2), recv(1, 2, 2)]]);
    let mut ex = Executor::<u8>::new(&plan, cfg(1, 1 << 20));
    ex.start(secs(10.0)).expect("starts");
    assert_eq!(ex.poll_timeout(), Some(secs(15.0)));
    ex.handle_timeout(secs(14.999)).expect("not yet");
    // Half the receive arrives at 12 s: the peer is alive, the deadline moves.
    ex.chunk_arrived(1, Some(CALL), id(0, 0, 0), 4, 1, secs(12.0))
        .expect("fits");
    assert_eq!(ex.poll_timeout(), Some(secs(17.0)));
    ex.handle_timeout(secs(15.0)).expect("moved");
    // Traffic for another operation also counts as a sign of life.
    ex.note_activity(secs(13.0)).expect("alive");
    assert_eq!(ex.poll_timeout(), Some(secs(18.0)));
    let err = ex.handle_timeout(secs(18.0)).expect_err("silent for 5 s");
    assert_eq!(
        err,
        ExecError::Timeout {
            peers: vec![1],
            after: secs(5.0)
        }
    );
    assert_eq!(
        ex.poll_timeout(),
        None,
        "a failed executor asks for no timer"
    );
    // Every later input is refused with the same error.
    let again = ex.chunk_arrived(1, Some(CALL), id(0, 0, 4), 4, 2, secs(19.0));
    assert_eq!(again, Err(err));
}

#[test]
fn a_finished_executor_does_not_time_out() {
    let plan = one_lane(vec![vec![send(1, 0, 1)]]);
    let mut ex = Executor::<u8>::new(&plan, cfg(1, 1 << 20));
    ex.start(secs(0.0)).expect("starts");
    assert!(ex.is_done());
    assert_eq!(drain(&mut ex).last(), Some(&Output::Done));
    assert_eq!(ex.poll_timeout(), None);
    ex.handle_timeout(secs(100.0)).expect("nothing to wait for");
}

#[test]
fn transfers_are_cut_into_frames() {
    let plan = one_lane(vec![vec![send(1, 3, 5)]]);
    let mut ex = Executor::<u8>::new(&plan, cfg(1, 8));
    ex.start(secs(0.0)).expect("starts");
    let outs = drain(&mut ex);
    assert_eq!(
        sends(&outs),
        vec![
            (1, 0, 0, 0, 12..20),
            (1, 0, 0, 8, 20..28),
            (1, 0, 0, 16, 28..32)
        ]
    );
    assert!(matches!(&outs[0], Output::Send(s) if s.transfer_len == 20));
}

#[test]
fn chunks_arriving_out_of_order_are_applied_in_step_order() {
    // Step 0: send [0,2) to 1, receive [2,4) from 1; step 1: send [2,4) to 2
    // (the reduced values), receive [4,6) from 2.
    let plan = one_lane(vec![
        vec![send(1, 0, 2), recv(1, 2, 2)],
        vec![send(2, 2, 2), recv(2, 4, 2)],
    ]);
    let mut ex = Executor::<&str>::new(&plan, cfg(1, 4));
    // Step 1's chunks come first, last chunk first, even before the start.
    ex.chunk_arrived(2, Some(CALL), id(0, 1, 4), 4, "s1b", secs(0.1))
        .expect("kept");
    ex.start(secs(0.2)).expect("starts");
    ex.chunk_arrived(2, Some(CALL), id(0, 1, 0), 4, "s1a", secs(0.3))
        .expect("kept");
    let outs = drain(&mut ex);
    assert_eq!(sends(&outs), vec![(1, 0, 0, 0, 0..4), (1, 0, 0, 4, 4..8)]);
    assert_eq!(outs.len(), 2, "nothing applied before step 0 completes");
    ex.chunk_arrived(1, Some(CALL), id(0, 0, 4), 4, "s0b", secs(0.4))
        .expect("fits");
    let outs = drain(&mut ex);
    assert!(
        matches!(&outs[..], [Output::Apply(a)] if a.payload == "s0b" && a.range == (12..16) && a.reduce)
    );
    ex.chunk_arrived(1, Some(CALL), id(0, 0, 0), 4, "s0a", secs(0.5))
        .expect("fits");
    let outs = drain(&mut ex);
    let order: Vec<String> = outs
        .iter()
        .map(|o| match o {
            Output::Send(s) => format!("send {}+{}", s.step, s.offset),
            Output::Apply(a) => format!("apply {}", a.payload),
            Output::Done => "done".into(),
        })
        .collect();
    // Step 0 completes; step 1's sends take the reduced bytes; then the kept chunks.
    assert_eq!(
        order,
        [
            "apply s0a",
            "send 1+0",
            "send 1+4",
            "apply s1b",
            "apply s1a",
            "done"
        ]
    );
    assert!(ex.is_done());
}

/// What the engine asks before it takes the second copy of a frame sent
/// twice: kept early, applied, or in a completed step, a chunk is held;
/// part of it, another peer's or an unknown one is not; asking changes
/// nothing.
#[test]
fn a_chunk_is_held_once_it_arrived_kept_or_applied() {
    let plan = one_lane(vec![vec![recv(1, 0, 4)], vec![recv(1, 4, 4)]]);
    let mut ex = Executor::<()>::new(&plan, cfg(1, 8));
    assert!(!ex.holds(1, id(0, 0, 0)));
    ex.chunk_arrived(1, Some(CALL), id(0, 1, 0), 8, (), secs(0.0))
        .expect("kept before the start");
    assert!(ex.holds(1, id(0, 1, 0)), "kept early");
    assert!(!ex.holds(1, id(0, 1, 8)), "another offset");
    assert!(!ex.holds(2, id(0, 1, 0)), "another peer");
    ex.start(secs(0.0)).expect("starts");
    ex.chunk_arrived(1, Some(CALL), id(0, 0, 0), 8, (), secs(0.1))
        .expect("first half");
    assert!(ex.holds(1, id(0, 0, 0)), "applied");
    assert!(!ex.holds(1, id(0, 0, 8)), "the half still missing");
    assert!(!ex.holds(1, id(0, 0, 12)), "inside the half still missing");
    assert!(!ex.holds(1, id(3, 0, 0)), "no such lane");
    assert!(!ex.holds(1, id(0, 5, 0)), "no such step");
    ex.chunk_arrived(1, Some(CALL), id(0, 0, 8), 8, (), secs(0.2))
        .expect("second half");
    assert!(ex.holds(1, id(0, 0, 8)), "a completed step");
    assert!(ex.holds(1, id(0, 1, 0)), "the kept chunk, now applied");
    ex.chunk_arrived(1, Some(CALL), id(0, 1, 8), 8, (), secs(0.3))
        .expect("the last chunk");
    assert!(ex.is_done());
    assert!(ex.holds(1, id(0, 1, 8)), "a finished operation");
}

#[test]
fn duplicate_unknown_and_misplaced_chunks_are_typed_errors() {
    let plan = one_lane(vec![vec![send(1, 0, 4), recv(1, 4, 4)]]);
    let fresh = || {
        let mut ex = Executor::<()>::new(&plan, cfg(1, 8));
        ex.start(secs(0.0)).expect("starts");
        ex
    };
    let mut ex = fresh();
    ex.chunk_arrived(1, Some(CALL), id(0, 0, 0), 8, (), secs(1.0))
        .expect("first half");
    let dup = ex.chunk_arrived(1, Some(CALL), id(0, 0, 0), 8, (), secs(1.0));
    assert!(
        matches!(
            dup,
            Err(ExecError::Duplicate {
                peer: 1,
                offset: 0,
                len: 8,
                ..
            })
        ),
        "{dup:?}"
    );
    // Overlapping the first half is a duplicate too, even at another offset.
    let mut ex = fresh();
    ex.chunk_arrived(1, Some(CALL), id(0, 0, 0), 8, (), secs(1.0))
        .expect("first half");
    let overlap = ex.chunk_arrived(1, Some(CALL), id(0, 0, 4), 8, (), secs(1.0));
    assert!(
        matches!(overlap, Err(ExecError::Duplicate { .. })),
        "{overlap:?}"
    );
    let unknown = fresh().chunk_arrived(1, Some(CALL), id(3, 0, 0), 8, (), secs(1.0));
    assert!(
        matches!(
            unknown,
            Err(ExecError::UnknownChunk {
                peer: 1,
                op: 7,
                lane: 3,
                step: 0
            })
        ),
        "{unknown:?}"
    );
    let unknown = fresh().chunk_arrived(1, Some(CALL), id(0, 9, 0), 8, (), secs(1.0));
    assert!(
        matches!(unknown, Err(ExecError::UnknownChunk { step: 9, .. })),
        "{unknown:?}"
    );
    let stranger = fresh().chunk_arrived(2, Some(CALL), id(0, 0, 0), 8, (), secs(1.0));
    assert!(
        matches!(stranger, Err(ExecError::NotExpected { peer: 2, .. })),
        "{stranger:?}"
    );
    let far = fresh().chunk_arrived(1, Some(CALL), id(0, 0, 1 << 40), 8, (), secs(1.0));
    assert!(
        matches!(far, Err(ExecError::OutOfRange { expected: 16, .. })),
        "{far:?}"
    );
    let torn = fresh().chunk_arrived(1, Some(CALL), id(0, 0, 2), 4, (), secs(1.0));
    assert!(
        matches!(torn, Err(ExecError::OutOfRange { .. })),
        "not whole elements: {torn:?}"
    );
    let mut ex = fresh();
    ex.chunk_arrived(1, Some(CALL), id(0, 0, 0), 16, (), secs(1.0))
        .expect("whole");
    let late = ex.chunk_arrived(1, Some(CALL), id(0, 0, 0), 16, (), secs(1.0));
    assert!(
        matches!(late, Err(ExecError::StepComplete { .. })),
        "{late:?}"
    );
    // A kept chunk for a step that receives nothing is refused when the step starts.
    let plan = one_lane(vec![vec![send(1, 0, 4)], vec![send(1, 0, 4)]]);
    let mut ex = Executor::<()>::new(&plan, cfg(1, 8));
    ex.chunk_arrived(1, Some(CALL), id(0, 1, 0), 8, (), secs(0.0))
        .expect("kept");
    let res = ex.start(secs(0.0));
    assert!(
        matches!(
            res,
            Err(ExecError::NotExpected {
                lane: 0,
                step: 1,
                ..
            })
        ),
        "{res:?}"
    );
}

#[test]
fn a_chunk_of_another_call_is_refused_before_it_is_applied() {
    let plan = one_lane(vec![vec![recv(1, 0, 2)]]);
    let mut ex = Executor::<()>::new(&plan, cfg(1, 8));
    ex.start(secs(0.0)).expect("starts");
    let theirs = Call {
        dtype: crate::dtype::DType::I32,
        ..CALL
    };
    let res = ex.chunk_arrived(1, Some(theirs), id(0, 0, 0), 8, (), secs(1.0));
    let want = ExecError::CallMismatch {
        op: 7,
        me: 0,
        mine: CALL,
        peer: 1,
        theirs: Some(theirs),
    };
    assert_eq!(res, Err(want.clone()));
    assert_eq!(
        want.to_string(),
        "operation 7 differs between ranks: rank 1 called allreduce(i32, 10, sum), rank 0 allreduce(f32, 10, sum)"
    );
    assert!(drain(&mut ex).is_empty(), "nothing applied");
    let none =
        Executor::<()>::new(&plan, cfg(1, 8)).chunk_arrived(1, None, id(0, 0, 0), 8, (), secs(0.0));
    assert!(
        matches!(none, Err(ExecError::CallMismatch { theirs: None, .. })),
        "{none:?}"
    );
}

/// `n` one-step lanes, each sending one element to rank 1 and receiving one.
fn ping_lanes(n: usize) -> Plan {
    let lane = |i: usize| Lane {
        steps: vec![vec![send(1, 2 * i, 1), recv(1, 2 * i + 1, 1)]],
    };
    Plan {
        lanes: (0..n).map(lane).collect(),
    }
}

#[test]
fn the_window_bounds_the_lanes_in_flight() {
    let plan = ping_lanes(3);
    let mut ex = Executor::<()>::new(&plan, cfg(2, 1 << 20));
    ex.start(secs(0.0)).expect("starts");
    let lanes = |outs: &[Output<()>]| sends(outs).iter().map(|s| s.1).collect::<Vec<_>>();
    assert_eq!(lanes(&drain(&mut ex)), vec![0, 1]);
    // Lane 2's chunk arrives early: kept until lane 2 starts.
    ex.chunk_arrived(1, Some(CALL), id(2, 0, 0), 4, (), secs(0.1))
        .expect("kept");
    assert!(drain(&mut ex).is_empty());
    ex.chunk_arrived(1, Some(CALL), id(1, 0, 0), 4, (), secs(0.2))
        .expect("fits");
    let outs = drain(&mut ex);
    assert_eq!(lanes(&outs), vec![2], "lane 1 done, lane 2 starts");
    assert!(matches!(outs.last(), Some(Output::Apply(a)) if a.id.lane == 2));
    assert!(!ex.is_done());
    ex.chunk_arrived(1, Some(CALL), id(0, 0, 0), 4, (), secs(0.3))
        .expect("fits");
    assert_eq!(drain(&mut ex).last(), Some(&Output::Done));
}

/// Sends made once at most `window` lanes are left to start are the
/// operation's tail (a striped peer cuts them across its paths); never when
/// not asked for.
#[test]
fn sends_of_the_last_two_windows_of_lanes_are_the_tail() {
    let plan = ping_lanes(6);
    for mark in [true, false] {
        let cfg = ExecConfig {
            mark_tail: mark,
            ..cfg(2, 1 << 20)
        };
        let mut ex = Executor::<()>::new(&plan, cfg);
        ex.start(secs(0.0)).expect("starts");
        let tails = |outs: &[Output<()>]| {
            outs.iter()
                .filter_map(|o| match o {
                    Output::Send(s) => Some((s.lane, s.tail)),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        let mut got = tails(&drain(&mut ex));
        for done in 0..4 {
            ex.chunk_arrived(1, Some(CALL), id(done, 0, 0), 4, (), secs(0.1))
                .expect("fits");
            got.extend(tails(&drain(&mut ex)));
        }
        let want: Vec<(usize, bool)> = (0..6).map(|l| (l, mark && l >= 3)).collect();
        assert_eq!(got, want, "lanes 3–5 start with at most 2 left");
    }
}

#[test]
fn a_peer_that_left_is_fine_only_if_nothing_more_is_owed() {
    let plan = one_lane(vec![vec![recv(1, 0, 2)], vec![recv(2, 2, 1)]]);
    let mut ex = Executor::<()>::new(&plan, cfg(1, 1 << 20));
    ex.chunk_arrived(1, Some(CALL), id(0, 0, 0), 8, (), secs(0.0))
        .expect("kept");
    ex.peer_left(1, secs(0.1))
        .expect("rank 1 delivered everything");
    ex.start(secs(0.2)).expect("starts");
    let res = ex.peer_left(2, secs(0.3));
    assert_eq!(res, Err(ExecError::PeerLeft { peer: 2 }));
}

type Sends = Vec<(Rank, usize, usize, u64, Range<usize>)>;

/// Rank 0's part of a two-domain hierarchical allreduce (3 lanes, window 2) and
/// every chunk its peers send it: (from, chunk, length).
fn rank0_and_its_chunks() -> (Vec<Plan>, Vec<(Rank, ChunkId, usize)>) {
    let topo = Topology::from_labels(&[("a", "0"), ("a", "1"), ("b", "2"), ("b", "3")]);
    let plans: Vec<Plan> = (0..4)
        .map(|r| {
            build(OpKind::Allreduce, 40, &topo, Algorithm::Hierarchical, 4, r).expect("applies")
        })
        .collect();
    let mut incoming = Vec::new();
    for (q, p) in plans.iter().enumerate().skip(1) {
        for (l, lane) in p.lanes.iter().enumerate() {
            for (s, step) in lane.steps.iter().enumerate() {
                for a in step {
                    if let Action::Send { peer: 0, span } = a {
                        let bytes = span.len * ELEM;
                        for off in (0..bytes).step_by(8) {
                            incoming.push((q, id(l, s, off as u64), (bytes - off).min(8)));
                        }
                    }
                }
            }
        }
    }
    (plans, incoming)
}

/// Feeds rank 0 its chunks in `order` (indices into the chunk list): it
/// completes, applies each chunk exactly once; returns its sends, sorted.
fn run_rank0(order: &[usize]) -> Sends {
    let (plans, incoming) = rank0_and_its_chunks();
    let mut ex = Executor::<()>::new(&plans[0], cfg(2, 8));
    ex.start(secs(0.0)).expect("starts");
    let mut outs = drain(&mut ex);
    for &i in order {
        let (q, cid, len) = incoming[i];
        ex.chunk_arrived(q, Some(CALL), cid, len, (), secs(1.0))
            .expect("every chunk fits once");
        outs.extend(drain(&mut ex));
    }
    assert!(ex.is_done(), "all {} chunks delivered", incoming.len());
    let applied = outs
        .iter()
        .filter(|o| matches!(o, Output::Apply(_)))
        .count();
    assert_eq!(applied, incoming.len());
    let mut s = sends(&outs);
    s.sort_by_key(|x| (x.1, x.2, x.0, x.3));
    s
}

fn chunk_count() -> usize {
    rank0_and_its_chunks().1.len()
}

proptest! {
    #[test]
    fn any_arrival_order_completes_with_the_same_sends(
        order in Just((0..chunk_count()).collect::<Vec<_>>()).prop_shuffle()
    ) {
        let reference = run_rank0(&(0..chunk_count()).collect::<Vec<_>>());
        prop_assert!(reference.len() > 8, "several chunks: {}", reference.len());
        prop_assert_eq!(run_rank0(&order), reference);
    }
}
