//! One plan, two drivers: the virtual-clock simulator and the real engine over
//! loopback TCP run the same executor, so they must send and apply the same
//! chunks.
//!
//! What is compared, per rank, for each recorded message (direction, peer, lane,
//! step, offset, length):
//! - window 1 (one lane in flight): the whole sequence of sends and applies,
//!   exactly, in order;
//! - window 3: for each lane, its sequence of sends and applies exactly, in
//!   order; and the rank's multiset of messages. How the lanes interleave with
//!   each other depends on when chunks arrive, which is the one nondeterminism
//!   of a real run.
//!
//! Both hold exactly because every step of these plans receives from at most
//! one peer (asserted), over one connection per peer (`streams_* = 1`, no
//! latency stream): the chunks of one step arrive in the order they were sent.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::drive::exec_config;
use super::JobKind;
use crate::cost::{CostModel, CostedNet, Setting};
use crate::dtype::ReduceOp;
use crate::exec::trace::Message;
use crate::schedule::sim::{self, SimConfig, SimData};
use crate::schedule::{build, Action, Algorithm, OpKind, Plan};
use crate::store::StoreServer;
use crate::topology::Topology;
use crate::{Communicator, Options};

/// 68-byte chunks of f32 (17 elements), sent as frames of 64 + 4 bytes.
fn options(algo: Algorithm, window: usize) -> Options {
    Options {
        timeout: Duration::from_secs(20),
        rendezvous_timeout: Duration::from_secs(20),
        streams_wan: 1,
        streams_lan: 1,
        wan_latency_stream: false,
        shm: false,
        chunk_bytes: 68,
        window,
        algorithm: Some(algo),
        probe: false,
        wan_warm_bytes: 0,
        ..Options::default()
    }
}

const COUNT: usize = 330;

fn input(rank: usize) -> Vec<f32> {
    (0..COUNT)
        .map(|i| ((i * 3 + rank * 5) % 11) as f32)
        .collect()
}

/// Runs one allreduce on 4 ranks in two domains (0,1 | 2,3), each rank on its
/// own host, recording what every rank's engine sent and applied.
fn engine_run(opts: &Options) -> (Topology, Vec<Vec<Message>>, Vec<Vec<f32>>) {
    let server = StoreServer::bind("127.0.0.1:0".parse().expect("addr")).expect("store");
    let out: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|r| {
                let b = Communicator::builder(r, 4)
                    .master(server.addr())
                    .host_store(false)
                    .domain(format!("d{}", r / 2))
                    .host_id(format!("h{r}"))
                    .options(opts.clone());
                s.spawn(move || {
                    let c = b.build().unwrap_or_else(|e| panic!("rank {r}: {e}"));
                    let record = Arc::new(Mutex::new(Vec::new()));
                    let kind = JobKind::Op(OpKind::Allreduce);
                    let h = c.submit_recorded(
                        kind,
                        ReduceOp::Sum,
                        input(r),
                        Some(record.clone()),
                        |v| v,
                    );
                    let v = h.wait().unwrap_or_else(|e| panic!("rank {r}: {e}"));
                    let trace = record.lock().map(|t| t.clone()).unwrap_or_default();
                    (c.topology().clone(), trace, v)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    });
    let topo = out[0].0.clone();
    let (traces, results) = out.into_iter().map(|(_, t, v)| (t, v)).unzip();
    (topo, traces, results)
}

/// The same operation on the simulator, with the engine's plans and executor settings.
fn sim_run(topo: &Topology, opts: &Options) -> (Vec<Vec<Message>>, Vec<Vec<f64>>) {
    let esize = 4;
    let model = CostModel::default();
    let setting = Setting::new(topo, &model, opts, esize);
    let algo = opts.algorithm.expect("forced");
    let plans: Vec<Plan> = (0..topo.world())
        .map(|r| build(OpKind::Allreduce, COUNT, topo, algo, setting.chunk, r).expect("applies"))
        .collect();
    for p in &plans {
        for step in p.lanes.iter().flat_map(|l| &l.steps) {
            let recvs = step
                .iter()
                .filter(|a| matches!(a, Action::Recv { .. }))
                .count();
            assert!(recvs <= 1, "the comparison needs one receive per step");
        }
    }
    let call = crate::wire::Call {
        kind: crate::wire::CallKind::Allreduce,
        dtype: crate::dtype::DType::F32,
        count: COUNT as u64,
        reduce: ReduceOp::Sum,
        root: 0,
        codec: crate::wire::Codec::Raw,
    };
    let ec = exec_config(opts, 0, 0, call, esize);
    let cfg = SimConfig {
        elem_bytes: ec.elem_bytes,
        window: ec.window,
        frame_bytes: ec.frame_bytes,
    };
    let mut bufs: Vec<Vec<f64>> = (0..topo.world())
        .map(|r| input(r).into_iter().map(f64::from).collect())
        .collect();
    let net = CostedNet {
        topo,
        model: &model,
    };
    let mut traces = Vec::new();
    let data = SimData {
        buffers: &mut bufs,
        reduce: &|a, b| a + b,
    };
    sim::run(&plans, &cfg, &net, Some(data), Some(&mut traces)).expect("simulates");
    (traces, bufs)
}

fn by_lane(t: &[Message]) -> BTreeMap<usize, Vec<Message>> {
    let mut m: BTreeMap<usize, Vec<Message>> = BTreeMap::new();
    for x in t {
        m.entry(x.lane).or_default().push(*x);
    }
    m
}

fn sorted(t: &[Message]) -> Vec<Message> {
    let mut v = t.to_vec();
    v.sort();
    v
}

fn compare(algo: Algorithm, window: usize) {
    let opts = options(algo, window);
    let (topo, real, results) = engine_run(&opts);
    let (simulated, sim_bufs) = sim_run(&topo, &opts);
    let want: Vec<f32> = (0..COUNT)
        .map(|i| (0..4).map(|r| input(r)[i]).sum())
        .collect();
    for r in 0..4 {
        assert_eq!(results[r], want, "{algo:?} rank {r}: engine result");
        let sim_r: Vec<f32> = sim_bufs[r].iter().map(|&x| x as f32).collect();
        assert_eq!(sim_r, want, "{algo:?} rank {r}: simulated result");
        let (e, s) = (&real[r], &simulated[r]);
        assert!(
            e.len() > 40 && by_lane(e).len() >= 5,
            "{algo:?} rank {r}: several lanes and chunks ({} messages)",
            e.len()
        );
        assert!(
            e.iter().any(|m| m.offset > 0),
            "{algo:?} rank {r}: transfers of several frames"
        );
        if window == 1 {
            assert_eq!(e, s, "{algo:?} rank {r}: the whole sequence");
        }
        assert_eq!(
            by_lane(e),
            by_lane(s),
            "{algo:?} rank {r}: each lane's sequence"
        );
        assert_eq!(sorted(e), sorted(s), "{algo:?} rank {r}: the same messages");
    }
}

#[test]
fn simulator_and_engine_send_the_same_messages_hierarchical() {
    compare(Algorithm::Hierarchical, 1);
    compare(Algorithm::Hierarchical, 3);
}

#[test]
fn simulator_and_engine_send_the_same_messages_ring() {
    compare(Algorithm::Ring, 1);
    compare(Algorithm::Ring, 3);
}
