//! The RDMA transport on Soft-RoCE (`rdma_rxe`), which only the VM stage's
//! kernels have: two rxe devices on a veth pair (in a test namespace on 7.x,
//! in the guest's own namespace on 6.x, see [`Place`]; policy routing keeps
//! the traffic off `lo`), ranks bound to the two addresses. On the host these are `#[ignore]`d (listed as ignored), and
//! `cargo xtask vm-test --filter rdma::` runs them; a guest without rxe
//! fails them. Every op and size over RDMA; the zero-copy send path; flat
//! registrations over 1,000 operations; a killed peer.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::time::{Duration, Instant};

use causeway_collective::pool::{self, BufferPool};
use causeway_collective::store::StoreServer;
use causeway_collective::topology::LinkClass;
use causeway_collective::transport::rdma::{self, TransportChoice};
use causeway_collective::transport::Transport;
use causeway_collective::wire::{
    read_frame_from, write_frame, Frame, FrameHeader, FrameKind, HEADER_LEN,
};
use causeway_collective::{CommBuf, Communicator, Options, ReduceOp, Registered};
use causeway_test_support::netns::{run, unique_name, Netns};
use causeway_test_support::require_root;

use crate::ops::all_ops;
use crate::procs::{free_port, spawn_ranks};

/// A measurement line the VM stage's log keeps (libtest captures the
/// print macros of passing tests, not the stderr handle).
fn report(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "rdma: {line}");
}

/// The running kernel's major version (0 if unreadable).
fn kernel_major() -> u32 {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    release
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0)
}

const A: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);

/// Where the veth pair lives: a fresh namespace on kernels ≥ 7 (rxe follows
/// its netdev's namespace there); the guest's own namespace before, where
/// rxe sends only from the initial one (its route lookups use `init_net`:
/// in a namespace every send completes with LOC_QP_OP_ERR).
struct Place {
    ns: Option<Netns>,
    rules: Vec<Vec<String>>,
    links: Vec<String>,
}

impl Place {
    fn new() -> Self {
        Place {
            ns: (kernel_major() >= 7).then(|| Netns::new("rd")),
            rules: Vec::new(),
            links: Vec::new(),
        }
    }

    fn ip(&self, args: &[&str]) {
        match &self.ns {
            Some(ns) => {
                ns.ip(args);
            }
            None => {
                run("ip", args);
            }
        }
    }

    fn exec(&self, args: &[&str]) {
        match &self.ns {
            Some(ns) => {
                ns.exec(args);
            }
            None => {
                run(args[0], &args[1..]);
            }
        }
    }

    fn in_ns<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        match &self.ns {
            Some(ns) => ns.in_ns(f),
            None => std::thread::spawn(f)
                .join()
                .unwrap_or_else(|e| std::panic::resume_unwind(e)),
        }
    }
}

impl Place {
    /// `sh -c CMD` here, its stdout and stderr (never panics: diagnostics).
    fn sh(&self, cmd: &str) -> String {
        let out = match &self.ns {
            Some(ns) => Command::new("ip")
                .args(["netns", "exec", ns.name(), "sh", "-c", cmd])
                .output(),
            None => Command::new("sh").args(["-c", cmd]).output(),
        };
        match out {
            Ok(o) => format!(
                "$ {cmd}\n{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => format!("$ {cmd}\n{e}\n"),
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if self.ns.is_some() {
            return; // the namespace takes everything with it
        }
        for r in &self.rules {
            let mut del = vec!["rule", "del"];
            del.extend(r.iter().map(String::as_str));
            let _ = Command::new("ip").args(&del).status();
        }
        for l in &self.links {
            let _ = Command::new("ip").args(["link", "del", l]).status();
        }
    }
}

/// Two rxe devices on the two ends of a veth pair per address pair (see
/// [`Place`]); removed on drop (also when the test panics).
struct Rxe {
    devs: Vec<String>,
    ns: Place,
}

impl Rxe {
    fn new() -> Self {
        Self::with_pairs(&[(A, B)])
    }

    /// One veth pair, with an rxe device on each end, per `(x, y)`.
    fn with_pairs(pairs: &[(Ipv4Addr, Ipv4Addr)]) -> Self {
        for m in ["rdma_rxe", "ib_uverbs"] {
            assert!(
                std::path::Path::new(&format!("/sys/module/{m}")).exists(),
                "module {m} is not loaded: Soft-RoCE tests need the VM stage's kernels"
            );
        }
        let mut rxe = Rxe {
            devs: Vec::new(),
            ns: Place::new(),
        };
        for (i, &(a, b)) in pairs.iter().enumerate() {
            rxe.add_pair(a, b, 100 + 2 * i);
        }
        // The GID table fills in from the addresses shortly after.
        let deadline = Instant::now() + Duration::from_secs(10);
        for ip in pairs.iter().flat_map(|(a, b)| [*a, *b]) {
            while rdma::find_gid(std::path::Path::new("/sys/class/infiniband"), ip).is_err() {
                assert!(
                    Instant::now() < deadline,
                    "no RoCE v2 GID for {ip} after 10 s"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        rxe
    }

    /// A veth pair with `a` and `b` on its ends, routing tables `table` and
    /// `table + 1`, and an rxe device on each end.
    fn add_pair(&mut self, a: Ipv4Addr, b: Ipv4Addr, table: usize) {
        let ns = &mut self.ns;
        let (va, vb) = (unique_name("va"), unique_name("vb"));
        ns.ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb]);
        ns.links.push(va.clone());
        for (v, ip) in [(&va, a), (&vb, b)] {
            ns.ip(&["addr", "add", &format!("{ip}/24"), "dev", v]);
            ns.ip(&["link", "set", v, "up"]);
        }
        // Both addresses are local: route each destination out of the other
        // end for locally made packets only (iif lo), accept them coming in.
        for key in ["all", "default", va.as_str(), vb.as_str()] {
            ns.exec(&["sysctl", "-qw", &format!("net.ipv4.conf.{key}.rp_filter=0")]);
            ns.exec(&[
                "sysctl",
                "-qw",
                &format!("net.ipv4.conf.{key}.accept_local=1"),
            ]);
        }
        for (to, via, src, table) in [(b, &va, a, table), (a, &vb, b, table + 1)] {
            let (to, table) = (to.to_string(), table.to_string());
            let rule: Vec<String> = ["pref", "10", "iif", "lo", "to", &to, "lookup", &table]
                .iter()
                .map(|s| s.to_string())
                .collect();
            let mut add = vec!["rule", "add"];
            add.extend(rule.iter().map(String::as_str));
            ns.ip(&add);
            ns.rules.push(rule);
            let src = src.to_string();
            ns.ip(&[
                "route", "add", &to, "dev", via, "src", &src, "table", &table,
            ]);
        }
        for v in [&va, &vb] {
            let d = unique_name(if v == &va { "rxa" } else { "rxb" });
            ns.exec(&["rdma", "link", "add", &d, "type", "rxe", "netdev", v]);
            self.devs.push(d);
        }
    }
}

impl Drop for Rxe {
    fn drop(&mut self) {
        for d in &self.devs {
            let _ = Command::new("rdma").args(["link", "delete", d]).status();
        }
    }
}

/// What rxe and the link saw (counters, neighbours, drops): for failures.
fn diag(rxe: &Rxe) -> String {
    let mut out = String::new();
    for d in &rxe.devs {
        out += &rxe.ns.sh(&format!("rdma statistic show link {d}/1"));
    }
    out += &rxe.ns.sh("rdma resource show qp");
    out += &rxe
        .ns
        .sh("ip -s link; ip neigh; cat /proc/net/softnet_stat");
    out += &rxe.ns.sh("nstat -as | grep -iv ' 0 ' ; dmesg | tail -n 20");
    out
}

/// Lines of `rdma resource show KIND` naming one of our devices.
fn resources(rxe: &Rxe, kind: &str) -> usize {
    let out = run("rdma", &["resource", "show", kind]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| rxe.devs.iter().any(|d| l.contains(d.as_str())))
        .count()
}

fn rdma_options() -> Options {
    Options {
        timeout: Duration::from_secs(60),
        rendezvous_timeout: Duration::from_secs(60),
        probe: false,
        transport: TransportChoice::Rdma,
        ..Options::default()
    }
}

/// Runs `f` on two ranks (threads inside the namespace, bound to A and B).
fn two_ranks<R: Send + 'static>(
    rxe: &Rxe,
    opts: Options,
    f: impl Fn(&Communicator) -> R + Send + Sync + Clone + 'static,
) -> Vec<R> {
    ranks(rxe, vec![(A, "d0"), (B, "d0")], opts, f)
}

/// Runs `f` on one rank per `(address, domain)` (threads inside the
/// namespace, each on its own host).
fn ranks<R: Send + 'static>(
    rxe: &Rxe,
    members: Vec<(Ipv4Addr, &'static str)>,
    opts: Options,
    f: impl Fn(&Communicator) -> R + Send + Sync + Clone + 'static,
) -> Vec<R> {
    rxe.ns.in_ns(move || {
        let server = StoreServer::bind("127.0.0.1:0".parse().expect("addr")).expect("store");
        let n = members.len();
        std::thread::scope(|s| {
            let hs: Vec<_> = members
                .iter()
                .enumerate()
                .map(|(r, (ip, domain))| {
                    let b = Communicator::builder(r, n)
                        .master(server.addr())
                        .host_store(false)
                        .domain(*domain)
                        .host_id(format!("h{r}"))
                        .listen_ip(IpAddr::V4(*ip))
                        .options(opts.clone());
                    let f = f.clone();
                    s.spawn(move || {
                        let c = b.build().unwrap_or_else(|e| panic!("rank {r}: {e}"));
                        f(&c)
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("rank thread"))
                .collect()
        })
    })
}

#[test]
#[ignore = "needs Soft-RoCE (rdma_rxe): runs in the VM stage (cargo xtask vm-test --filter rdma::)"]
fn every_op_and_size_is_correct_over_rdma() {
    require_root!();
    let rxe = Rxe::new();
    let before = rdma::counters();
    two_ranks(&rxe, rdma_options(), |c| {
        // f32 at 0, 1, odd, 4 KiB and 1 MiB; the other dtypes at the small sizes.
        for len in [0usize, 1, 1001, 1024, 1 << 18] {
            all_ops::<f32>(c, len, len as u64 * 31 + 7)
                .unwrap_or_else(|e| panic!("f32 len {len}: {e}"));
        }
        for len in [0usize, 1, 1001] {
            let seed = len as u64 + 3;
            all_ops::<f64>(c, len, seed).unwrap_or_else(|e| panic!("f64 {len}: {e}"));
            all_ops::<half::f16>(c, len, seed).unwrap_or_else(|e| panic!("f16 {len}: {e}"));
            all_ops::<half::bf16>(c, len, seed).unwrap_or_else(|e| panic!("bf16 {len}: {e}"));
            all_ops::<i32>(c, len, seed).unwrap_or_else(|e| panic!("i32 {len}: {e}"));
            all_ops::<i64>(c, len, seed).unwrap_or_else(|e| panic!("i64 {len}: {e}"));
            all_ops::<u8>(c, len, seed).unwrap_or_else(|e| panic!("u8 {len}: {e}"));
        }
        // 64 MiB of f32: rank r contributes r + 1 everywhere.
        let n = 16 << 20;
        let mut big = vec![(c.rank() + 1) as f32; n];
        let t = Instant::now();
        c.allreduce(&mut big, ReduceOp::Sum)
            .expect("64 MiB allreduce");
        let took = t.elapsed();
        assert!(big.iter().all(|v| *v == 3.0), "64 MiB allreduce: wrong sum");
        report(&format!(
            "rank {}: 64 MiB f32 allreduce in {took:?}",
            c.rank()
        ));
    });
    let after = rdma::counters();
    let (zc, cp) = (
        after.zero_copy_bytes - before.zero_copy_bytes,
        after.copied_bytes - before.copied_bytes,
    );
    report(&format!(
        "send bytes: {zc} zero-copy from pool buffers, {cp} through the staging copy"
    ));
    assert!(
        zc > 64 << 20,
        "the 64 MiB allreduce was sent zero-copy ({zc} bytes)"
    );
}

#[test]
#[ignore = "needs Soft-RoCE (rdma_rxe): runs in the VM stage (cargo xtask vm-test --filter rdma::)"]
fn registrations_and_queue_pairs_do_not_grow_over_1000_allreduces() {
    require_root!();
    let rxe = Rxe::new();
    let qps_before = resources(&rxe, "qp");
    let rxe_ref = &rxe;
    let counts = std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel::<(usize, usize)>();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let go_rx = std::sync::Arc::new(std::sync::Mutex::new(go_rx));
        let h = s.spawn(move || {
            two_ranks(rxe_ref, rdma_options(), move |c| {
                let mut buf = vec![1.0f32; 4096];
                for _ in 0..10 {
                    c.allreduce(&mut buf, ReduceOp::Sum).expect("warm-up");
                }
                c.barrier().expect("barrier");
                if c.rank() == 0 {
                    let _ = tx.send((0, 0));
                    let _ = go_rx.lock().map(|g| g.recv());
                }
                c.barrier().expect("barrier");
                for i in 0..1000 {
                    buf.fill(1.0);
                    c.allreduce(&mut buf, ReduceOp::Sum)
                        .unwrap_or_else(|e| panic!("op {i}: {e}"));
                    assert_eq!(buf[4095], 2.0);
                }
                c.barrier().expect("barrier");
                if c.rank() == 0 {
                    let _ = tx.send((1, 0));
                    let _ = go_rx.lock().map(|g| g.recv());
                }
                c.barrier().expect("barrier");
            })
        });
        let mut counts = Vec::new();
        for _ in 0..2 {
            rx.recv_timeout(Duration::from_secs(600))
                .expect("ranks reach the checkpoint");
            counts.push((resources(rxe_ref, "mr"), rdma::counters().registrations));
            go_tx.send(()).expect("go");
        }
        h.join().expect("ranks");
        counts
    });
    report(&format!(
        "registrations (rdma resource show mr, in-process) after warm-up and after 1,000 allreduces: {counts:?}; ibv_reg_mr for send buffers so far: {}",
        rdma::counters().cache_misses
    ));
    assert_eq!(
        counts[0], counts[1],
        "registrations grew over 1,000 allreduces"
    );
    // Every QP is destroyed once its communicator is gone (progress threads
    // end within 100 ms of their connection's halves).
    let deadline = Instant::now() + Duration::from_secs(5);
    while resources(&rxe, "qp") != qps_before {
        assert!(
            Instant::now() < deadline,
            "queue pairs leaked: {} before, {} after",
            qps_before,
            resources(&rxe, "qp")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A queue pair between the devices of A and B, each end with a receive
/// ring of `ring` bytes (inside the test's namespace).
fn connected_pair(ring: usize) -> (rdma::RdmaTransport, rdma::RdmaTransport) {
    let da = rdma::open_device(A).expect("device of A");
    let db = rdma::open_device(B).expect("device of B");
    let (pa, pb) = (da.prepare(ring).expect("A"), db.prepare(ring).expect("B"));
    let (ia, ib) = (pa.info(), pb.info());
    let ta = pa.connect(ib, "B".into()).expect("connect A");
    let tb = pb.connect(ia, "A".into()).expect("connect B");
    (ta, tb)
}

#[test]
#[ignore = "needs Soft-RoCE (rdma_rxe): runs in the VM stage (cargo xtask vm-test --filter rdma::)"]
fn sends_go_zero_copy_from_the_pool_buffer_through_a_small_ring() {
    require_root!();
    let rxe = Rxe::new();
    rxe.ns.in_ns(|| {
        // A 64 KiB ring: 3 MiB wraps it 48 times, on credits alone.
        let (ta, tb) = connected_pair(64 << 10);
        let pool = BufferPool::new(2);
        let mut buf = pool.take(3 << 20);
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i * 7 % 251) as u8;
        }
        assert_eq!(
            ta.registered_start(&buf[100..200]),
            Some(buf.as_ptr() as usize),
            "a send from a pool buffer uses the registration of that very buffer"
        );
        assert_eq!(
            ta.registered_start(&[0u8; 100]),
            None,
            "other memory is copied"
        );
        let before = rdma::counters();
        let (_ra, mut wa, ca) = Box::new(ta).split().expect("split A");
        let (mut rb, _wb, _cb) = Box::new(tb).split().expect("split B");
        let expect = buf.to_vec();
        let writer = std::thread::spawn(move || {
            let mut off = 0;
            for k in [1usize, 4095, 70_000, 1 << 20].iter().cycle() {
                if off == buf.len() {
                    break;
                }
                let end = (off + k).min(buf.len());
                wa.write_all(&buf[off..end]).expect("write");
                off = end;
            }
            ca.finish();
            buf
        });
        let mut got = Vec::new();
        rb.read_to_end(&mut got).expect("read to the end of stream");
        let buf = writer.join().expect("writer");
        assert!(got == expect, "bytes arrive in order and intact");
        let after = rdma::counters();
        assert_eq!(
            after.zero_copy_bytes - before.zero_copy_bytes,
            buf.len() as u64
        );
        assert_eq!(
            after.copied_bytes, before.copied_bytes,
            "nothing was copied on the send side"
        );
    });
}

/// Frames read in place: each payload is handed out where the peer wrote it
/// in the receive ring (through the ring's second mapping when it wraps),
/// the reader keeps a few while reading on, and gives them back in reverse
/// order. The held bytes never change while later frames arrive (the peer
/// never writes over a payload not given back), every payload arrives
/// intact, and none is copied out of the ring.
#[test]
#[ignore = "needs Soft-RoCE (rdma_rxe): runs in the VM stage (cargo xtask vm-test --filter rdma::)"]
fn frames_read_in_place_are_never_overwritten_until_given_back() {
    require_root!();
    let rxe = Rxe::new();
    rxe.ns.in_ns(|| {
        // A 64 KiB ring: the payloads (up to 20 KiB, odd sizes) wrap it
        // about 100 times.
        const FRAMES: usize = 600;
        let size = |i: usize| 1 + (i * 7919) % (20 << 10);
        let fill = |i: usize, b: &mut [u8]| {
            b.iter_mut()
                .enumerate()
                .for_each(|(k, x)| *x = (i * 31 + k * 7) as u8)
        };
        let (ta, tb) = connected_pair(64 << 10);
        let (_ra, mut wa, ca) = Box::new(ta).split().expect("split A");
        let (mut rb, _wb, _cb) = Box::new(tb).split().expect("split B");
        let before = rdma::counters();
        let writer = std::thread::spawn(move || {
            for i in 0..FRAMES {
                let mut p = vec![0u8; size(i)];
                fill(i, &mut p);
                let mut h = FrameHeader::control(FrameKind::Data, p.len() as u32);
                h.op = i as u64;
                write_frame(&mut wa, &h, &p).expect("write a frame");
            }
            ca.finish();
        });
        let pool = BufferPool::new(2);
        let mut held: Vec<(usize, Frame)> = Vec::new();
        let mut payload = 0u64;
        for i in 0..FRAMES {
            let f = read_frame_from(&mut *rb, 1 << 20, &pool).expect("read a frame");
            assert_eq!(f.header.op, i as u64, "frames in order");
            assert!(f.payload.is_borrowed(), "frame {i} read in place");
            payload += f.payload.len() as u64;
            held.push((i, f));
            // Every frame still held is as it was sent.
            for (k, h) in &held {
                let mut want = vec![0u8; size(*k)];
                fill(*k, &mut want);
                assert!(h.payload[..] == want[..], "frame {k} changed while held (at {i})");
            }
            if held.len() == 3 {
                while let Some(f) = held.pop() {
                    drop(f);
                }
            }
        }
        drop(held);
        writer.join().expect("writer");
        let after = rdma::counters();
        let in_place = after.received_in_place_bytes - before.received_in_place_bytes;
        let copied = after.received_copied_bytes - before.received_copied_bytes;
        report(&format!(
            "{FRAMES} frames through a 64 KiB ring: {in_place} of {payload} payload bytes read in place, {copied} bytes (headers) copied out"
        ));
        assert_eq!(in_place, payload, "every payload read in place");
        assert_eq!(copied, (FRAMES * HEADER_LEN) as u64, "only headers copied");
    });
}

/// A blocking call on a [`CommBuf`] sends straight from it: every settled
/// byte goes from the caller's memory (registered on its first send, that
/// registration reused by every later call) and nothing but frame headers is
/// copied; the call returns only once the device has read the bytes: the
/// root overwrites its buffer at once, and the peer must still get what was
/// there. A plain `Vec` is copied into the registered pool instead (never
/// registered per call).
#[test]
#[ignore = "needs Soft-RoCE (rdma_rxe): runs in the VM stage (cargo xtask vm-test --filter rdma::)"]
fn a_blocking_call_on_a_comm_buf_sends_from_the_callers_memory() {
    require_root!();
    let rxe = Rxe::new();
    const ROUNDS: usize = 20;
    const LEN: usize = 1 << 20; // f32: 4 MiB
    fn rounds(c: &Communicator, buf: &mut [f32], n: usize) -> Vec<u64> {
        let mut regs = Vec::new();
        for round in 0..n {
            let v = (round + 1) as f32;
            if c.rank() == 0 {
                buf.iter_mut()
                    .enumerate()
                    .for_each(|(i, x)| *x = v + i as f32);
            }
            c.broadcast(buf, 0).expect("broadcast");
            if c.rank() == 0 {
                // Returned: the device has read every byte it sends.
                buf.iter_mut().for_each(|x| *x = -1.0);
            } else {
                let bad = buf.iter().enumerate().find(|&(i, x)| *x != v + i as f32);
                assert!(bad.is_none(), "round {round}: rank 1 got {bad:?}");
            }
            c.barrier().expect("barrier");
            regs.push(rdma::counters().registrations);
        }
        regs
    }
    let before = rdma::counters();
    let detached_before = pool::detached_bytes();
    let regs = two_ranks(&rxe, rdma_options(), |c| {
        let mut buf = CommBuf::<f32>::zeroed(LEN);
        rounds(c, &mut buf, ROUNDS)
    });
    let after = rdma::counters();
    let (lent, copied, made) = (
        after.lent_bytes - before.lent_bytes,
        after.copied_bytes - before.copied_bytes,
        after.cache_misses - before.cache_misses,
    );
    let (in_place, read_copied, detached) = (
        after.received_in_place_bytes - before.received_in_place_bytes,
        after.received_copied_bytes - before.received_copied_bytes,
        pool::detached_bytes() - detached_before,
    );
    let sent = (ROUNDS * LEN * 4) as u64;
    report(&format!(
        "CommBuf: {lent} of {sent} broadcast bytes sent from it as they are, {copied} bytes copied, {made} send registrations made, registrations per round {:?}; received: {in_place} bytes read in place, {read_copied} copied out of the ring, {detached} copied to be kept for later",
        regs[0]
    ));
    assert!(
        in_place >= sent,
        "every broadcast payload read where it arrived ({in_place} of {sent})"
    );
    assert!(
        read_copied + detached < sent / 100,
        "received bytes copied out of the ring: {read_copied}, kept for later: {detached}"
    );
    assert_eq!(lent, sent, "every byte from the caller's buffer");
    assert!(
        copied < sent / 100,
        "only headers and control frames copied ({copied} bytes)"
    );
    assert!(made <= 2, "registered once, not per call ({made})");
    for r in &regs {
        assert_eq!(
            r.first(),
            r.last(),
            "registrations stay flat over the rounds"
        );
    }
    // Memory another owner keeps alive, registered through that owner (as a
    // framework's tensor would be): sent from as a CommBuf is.
    let before = rdma::counters();
    two_ranks(&rxe, rdma_options(), |c| {
        let mut owner = Box::new(vec![0f32; LEN]);
        let (p, bytes) = (owner.as_mut_ptr(), LEN * 4);
        // SAFETY: the Vec's heap block does not move or change size while
        // the registration holds the Box (it is only written through `p`
        // below, by this thread, between calls).
        let reg =
            unsafe { Registered::new(p.cast(), bytes, owner) }.expect("not registered before");
        // SAFETY: the registration keeps the block alive until `reg` drops,
        // after the last use of this slice; nothing else accesses it.
        let buf = unsafe { std::slice::from_raw_parts_mut(p, LEN) };
        rounds(c, buf, 3);
        drop(reg);
    });
    let after = rdma::counters();
    let lent = after.lent_bytes - before.lent_bytes;
    report(&format!(
        "registered memory: {lent} of {} broadcast bytes sent from it, {} send registrations",
        3 * LEN * 4,
        after.cache_misses - before.cache_misses
    ));
    assert_eq!(
        lent,
        (3 * LEN * 4) as u64,
        "sent from the registered memory"
    );
    // A plain Vec: copied into the pool (zero-copy from there), no per-call
    // registration either.
    let before = rdma::counters();
    two_ranks(&rxe, rdma_options(), |c| {
        let mut buf = vec![0f32; LEN];
        rounds(c, &mut buf, 3);
    });
    let after = rdma::counters();
    report(&format!(
        "plain Vec: {} bytes sent from it, {} zero-copy from pool buffers, {} send registrations",
        after.lent_bytes - before.lent_bytes,
        after.zero_copy_bytes - before.zero_copy_bytes,
        after.cache_misses - before.cache_misses
    ));
    assert_eq!(
        after.lent_bytes, before.lent_bytes,
        "a plain Vec is not registered per call"
    );
    assert!(after.zero_copy_bytes - before.zero_copy_bytes >= (3 * LEN * 4) as u64);
}

/// The writer returns before the device has read what it sent (successive
/// writes overlap): a pool buffer dropped and taken again at once, and a
/// plain buffer overwritten right after its write returns, must not change
/// a byte that arrives.
#[test]
#[ignore = "needs Soft-RoCE (rdma_rxe): runs in the VM stage (cargo xtask vm-test --filter rdma::)"]
fn buffers_reused_as_soon_as_their_write_returns_change_nothing_in_flight() {
    require_root!();
    let rxe = Rxe::new();
    rxe.ns.in_ns(|| {
        const MSG: usize = 256 << 10;
        const PLAIN: usize = 70_000;
        const ROUNDS: usize = 48;
        let (ta, tb) = connected_pair(1 << 20);
        let (_ra, mut wa, ca) = Box::new(ta).split().expect("split A");
        let (mut rb, _wb, _cb) = Box::new(tb).split().expect("split B");
        let before = rdma::counters();
        let writer = std::thread::spawn(move || {
            let pool = BufferPool::new(2);
            let mut plain = vec![0u8; PLAIN];
            for i in 0..ROUNDS {
                let mut b = pool.take(MSG);
                b.fill(i as u8);
                wa.write_all(&b).expect("write from the pool");
                // Back to the pool, and taken again by the next round.
                drop(b);
                plain.fill(!(i as u8));
                wa.write_all(&plain).expect("write from plain memory");
                plain.fill(0xee);
            }
            ca.finish();
            pool.allocations()
        });
        let mut got = Vec::new();
        rb.read_to_end(&mut got).expect("read to the end of stream");
        let allocations = writer.join().expect("writer");
        assert_eq!(got.len(), ROUNDS * (MSG + PLAIN), "every byte arrives");
        for (i, round) in got.chunks(MSG + PLAIN).enumerate() {
            let (pooled, plain) = round.split_at(MSG);
            assert!(
                pooled.iter().all(|&b| b == i as u8),
                "round {i}: the pool buffer's bytes changed in flight"
            );
            assert!(
                plain.iter().all(|&b| b == !(i as u8)),
                "round {i}: the plain buffer's bytes changed in flight"
            );
        }
        let after = rdma::counters();
        assert_eq!(
            after.zero_copy_bytes - before.zero_copy_bytes,
            (ROUNDS * MSG) as u64,
            "pool buffers went zero-copy"
        );
        assert_eq!(
            after.copied_bytes - before.copied_bytes,
            (ROUNDS * PLAIN) as u64,
            "plain memory went through the staging ring"
        );
        report(&format!(
            "{ROUNDS} rounds reusing buffers at once: the pool allocated {allocations} buffers of {} KiB",
            MSG >> 10
        ));
    });
}

#[test]
#[ignore = "needs Soft-RoCE (rdma_rxe): runs in the VM stage (cargo xtask vm-test --filter rdma::)"]
fn a_killed_peer_is_a_typed_error_within_the_timeout_and_leaks_no_queue_pair() {
    require_root!();
    let rxe = Rxe::new();
    let qps_before = resources(&rxe, "qp");
    let port = free_port();
    let (mut ranks, rx) = rxe.ns.in_ns(move || {
        spawn_ranks(
            2,
            &[0, 1],
            port,
            |r| {
                vec![
                    ("CAUSEWAY_ADDR".into(), [A, B][r].to_string()),
                    ("CAUSEWAY_TRANSPORT".into(), "rdma".into()),
                    ("CAUSEWAY_TIMEOUT".into(), "5s".into()),
                ]
            },
            &["--elems", "500000", "--iters", "100000"],
        )
    });
    // Both ranks iterate once (an error before that is the test's failure).
    let mut iterated = [false; 2];
    while !iterated.iter().all(|i| *i) {
        let (r, v) = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("ranks make progress");
        if v["event"] == "error" {
            // The other rank's lines (it fails too, later) and rxe's view.
            let rest: Vec<String> =
                std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(10)).ok())
                    .map(|(r, v)| format!("rank {r}: {v}"))
                    .take(4)
                    .collect();
            panic!(
                "rank {r} before the kill: {v}\nthen: {rest:?}\n{}",
                diag(&rxe)
            );
        }
        iterated[r] |= v["event"] == "iter";
    }
    ranks.0[1].kill().expect("kill rank 1");
    let killed = Instant::now();
    let (r, v) = loop {
        let (r, v) = rx
            .recv_timeout(Duration::from_secs(15))
            .expect("the survivor reports an error in time");
        if v["event"] == "error" {
            break (r, v);
        }
    };
    let after = killed.elapsed();
    assert_eq!(r, 0);
    assert_eq!(v["peer"], 1, "the survivor blames the dead rank: {v}");
    assert!(after < Duration::from_secs(8), "took {after:?}: {v}");
    report(&format!(
        "survivor's error {after:?} after the kill: {}",
        v["error"]
    ));
    let status = ranks.0[0].wait().expect("wait");
    assert_eq!(status.code(), Some(3), "the collective-error exit code");
    let deadline = Instant::now() + Duration::from_secs(5);
    while resources(&rxe, "qp") != qps_before {
        assert!(Instant::now() < deadline, "queue pairs left behind");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
#[ignore = "needs Soft-RoCE (rdma_rxe): runs in the VM stage (cargo xtask vm-test --filter rdma::)"]
fn a_mixed_world_uses_rdma_inside_domains_and_tcp_across() {
    require_root!();
    // Domain d0: ranks 0, 1 on the pair (A, B); d1: ranks 2, 3 on (C, D).
    const C: Ipv4Addr = Ipv4Addr::new(10, 77, 1, 1);
    const D: Ipv4Addr = Ipv4Addr::new(10, 77, 1, 2);
    let rxe = Rxe::with_pairs(&[(A, B), (C, D)]);
    let devs = rxe.devs.clone();
    let members = vec![(A, "d0"), (B, "d0"), (C, "d1"), (D, "d1")];
    let seen = ranks(&rxe, members, rdma_options(), move |c| {
        let me = c.rank();
        for q in 0..4 {
            let want = if q / 2 == me / 2 {
                LinkClass::IntraDomain
            } else {
                LinkClass::InterDomain
            };
            if q != me {
                assert_eq!(c.topology().class(me, q), want, "rank {me} to {q}");
            }
        }
        all_ops::<f32>(c, 1001, 17).unwrap_or_else(|e| panic!("rank {me}: {e}"));
        let mut v = vec![(me + 1) as f32; 1 << 18];
        c.allreduce(&mut v, ReduceOp::Sum).expect("1 MiB allreduce");
        assert!(v.iter().all(|x| *x == 10.0), "rank {me}: wrong sum");
        // Every rank is connected now: look at the links while they live.
        c.barrier().expect("barrier");
        let seen = (me == 0).then(|| {
            let qps = String::from_utf8_lossy(&run("rdma", &["resource", "show", "qp"]).stdout)
                .into_owned();
            let per_dev: Vec<usize> = devs
                .iter()
                .map(|d| {
                    qps.lines()
                        .filter(|l| l.contains(d.as_str()) && l.contains("type RC"))
                        .count()
                })
                .collect();
            let mut peers: Vec<String> = rdma::states()
                .iter()
                .map(|s| s.split(" qp ").next().unwrap_or_default().to_string())
                .collect();
            peers.sort();
            (per_dev, peers)
        });
        c.barrier().expect("barrier");
        seen
    });
    let (per_dev, peers) = seen.into_iter().flatten().next().expect("rank 0 looked");
    report(&format!(
        "mixed world: RC QPs per rxe device {per_dev:?}, RDMA connections to {peers:?}"
    ));
    assert_eq!(
        per_dev,
        [1, 1, 1, 1],
        "one RC QP per device: each rank's only RDMA peer is the other rank of its domain"
    );
    assert_eq!(
        peers,
        ["rank 0", "rank 1", "rank 2", "rank 3"],
        "four RDMA connections, all inside a domain (cross-domain pairs are TCP)"
    );
}
