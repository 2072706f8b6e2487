//! `causeway paths monitor`: the path-steering controller of a gateway. It
//! probes every path (a UDP socket per path, marked with the path's routing
//! mark, to an address on the far side that answers: another monitor's
//! `--listen`), runs each path's estimator (`causeway_core::paths::estimator`:
//! RTT, loss, up/down with hysteresis; down after `down_after` without a
//! reply), and applies its decisions to the steering maps: a path that dies
//! is marked down and its flows move to the live path with the lowest RTT
//! (`causeway_core::paths::failover`); once it is back up they move home.
//! Its latest estimates go to `monitor.json` in the interface's steering
//! state directory, where `causeway paths show` reads them.
//!
//! Probe datagram (24 bytes): `CWPP`, version 1, kind (1 request, 2 reply),
//! 2 zero bytes, sequence (u64 BE), an opaque token echoed back (u64). A
//! datagram that is not exactly this is ignored.

use std::{
    collections::HashMap,
    net::{SocketAddr, UdpSocket},
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc, Arc,
    },
    thread,
    time::{Duration, Instant},
};

use bpf_maps::paths::FlowKey;
use causeway_core::paths::{
    estimator::{EstimatorConfig, PathEstimate, PathEstimator, PathState},
    failover,
};

use super::{flow::FlowSpec, maps::PathMaps, maps::PathMapsError};

const MAGIC: &[u8; 4] = b"CWPP";
const VERSION: u8 = 1;
const REQUEST: u8 = 1;
const REPLY: u8 = 2;
const PROBE_LEN: usize = 24;

/// A probe datagram.
fn encode(kind: u8, seq: u64, token: u64) -> [u8; PROBE_LEN] {
    let mut b = [0u8; PROBE_LEN];
    b[..4].copy_from_slice(MAGIC);
    b[4] = VERSION;
    b[5] = kind;
    b[8..16].copy_from_slice(&seq.to_be_bytes());
    b[16..24].copy_from_slice(&token.to_be_bytes());
    b
}

/// (kind, seq, token) of a well-formed probe datagram.
fn decode(b: &[u8]) -> Option<(u8, u64, u64)> {
    if b.len() != PROBE_LEN || &b[..4] != MAGIC || b[4] != VERSION || b[6..8] != [0, 0] {
        return None;
    }
    let kind = b[5];
    if kind != REQUEST && kind != REPLY {
        return None;
    }
    let seq = u64::from_be_bytes(b[8..16].try_into().ok()?);
    let token = u64::from_be_bytes(b[16..24].try_into().ok()?);
    Some((kind, seq, token))
}

/// Why the monitor could not run.
#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Maps(#[from] PathMapsError),
    #[error("nothing to do: give --probe PATH=ADDR (to steer) or --listen ADDR (to answer)")]
    Nothing,
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> MonitorError {
    let what = what.into();
    move |source| MonitorError::Io { what, source }
}

/// What the monitor does.
pub struct MonitorConfig {
    /// The steering maps to drive (`None`: answer probes only).
    pub maps: Option<PathMaps>,
    /// Where to write `monitor.json`.
    pub state_file: Option<PathBuf>,
    /// (path id, address answering probes over that path).
    pub probes: Vec<(u32, SocketAddr)>,
    /// Answer probes on this address.
    pub listen: Option<SocketAddr>,
    pub interval: Duration,
    pub estimator: EstimatorConfig,
    /// Stop after this long (`None`: until `stop` is set).
    pub duration: Option<Duration>,
}

/// One path's line of the monitor's report.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct PathHealth {
    pub path: u32,
    pub probe: SocketAddr,
    /// `unknown`, `up` or `down`.
    pub state: String,
    pub srtt_ms: f64,
    pub rttvar_ms: f64,
    pub min_rtt_ms: f64,
    pub loss: f64,
    pub sent: u64,
    pub replies: u64,
}

/// What the monitor tells its caller.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum MonitorEvent {
    /// A path changed state, `at_s` after the monitor started.
    State {
        path: u32,
        from: String,
        to: String,
        at_s: f64,
    },
    /// A flow was moved to another path.
    Moved {
        flow: String,
        from: u32,
        to: u32,
        at_s: f64,
    },
    /// Every path's estimate (once a second).
    Paths { at_s: f64, paths: Vec<PathHealth> },
}

fn state_name(s: PathState) -> String {
    match s {
        PathState::Unknown => "unknown",
        PathState::Up => "up",
        PathState::Down { .. } => "down",
    }
    .to_string()
}

/// Answers probe requests on `sock` until `stop`.
fn respond(sock: UdpSocket, stop: Arc<AtomicBool>) {
    let mut buf = [0u8; 64];
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, from)) = sock.recv_from(&mut buf) else {
            continue; // the read timeout, or a transient error
        };
        if let Some((REQUEST, seq, token)) = decode(&buf[..n]) {
            let _ = sock.send_to(&encode(REPLY, seq, token), from);
        }
    }
}

/// Receives replies on one path's socket, stamped as they arrive.
fn receive(
    path: usize,
    sock: UdpSocket,
    token: u64,
    tx: mpsc::Sender<(usize, u64, Instant)>,
    stop: Arc<AtomicBool>,
) {
    let mut buf = [0u8; 64];
    while !stop.load(Ordering::Relaxed) {
        let Ok(n) = sock.recv(&mut buf) else {
            continue;
        };
        let at = Instant::now();
        if let Some((REPLY, seq, t)) = decode(&buf[..n]) {
            if t == token && tx.send((path, seq, at)).is_err() {
                return;
            }
        }
    }
}

struct Probed {
    id: u32,
    addr: SocketAddr,
    sock: UdpSocket,
    est: PathEstimator,
    state: PathState,
    sent: u64,
    replies: u64,
}

/// Runs the monitor until `stop` is set (or `duration` passes), calling
/// `on_event` for every event.
pub fn run(
    mut cfg: MonitorConfig,
    stop: Arc<AtomicBool>,
    mut on_event: impl FnMut(&MonitorEvent),
) -> Result<(), MonitorError> {
    if cfg.probes.is_empty() && cfg.listen.is_none() {
        return Err(MonitorError::Nothing);
    }
    let tick = Duration::from_millis(200);
    let mut threads = Vec::new();
    if let Some(addr) = cfg.listen {
        let sock = UdpSocket::bind(addr).map_err(io(format!("binding {addr}")))?;
        sock.set_read_timeout(Some(tick))
            .map_err(io("setting a read timeout"))?;
        let stop = stop.clone();
        threads.push(thread::spawn(move || respond(sock, stop)));
    }
    // Replies carry it back: another monitor's replies (or stale ones of an
    // earlier run on a reused port) are not ours.
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let token = clock ^ u64::from(std::process::id()) << 40;
    let (tx, rx) = mpsc::channel();
    let mut paths = Vec::new();
    for (i, &(id, addr)) in cfg.probes.iter().enumerate() {
        let local: SocketAddr = if addr.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let sock = UdpSocket::bind(local).map_err(io("binding a probe socket"))?;
        let mark = match &cfg.maps {
            Some(m) => m.path(id)?.mark,
            None => 0,
        };
        if mark != 0 {
            nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::Mark, &mark)
                .map_err(|e| io(format!("setting SO_MARK {mark:#x} for path {id}"))(e.into()))?;
        }
        sock.connect(addr)
            .map_err(io(format!("connecting path {id}'s probe socket to {addr}")))?;
        sock.set_read_timeout(Some(tick))
            .map_err(io("setting a read timeout"))?;
        let rsock = sock.try_clone().map_err(io("cloning a probe socket"))?;
        let (tx, stop) = (tx.clone(), stop.clone());
        threads.push(thread::spawn(move || receive(i, rsock, token, tx, stop)));
        paths.push(Probed {
            id,
            addr,
            sock,
            est: PathEstimator::new(cfg.estimator.clone()),
            state: PathState::Unknown,
            sent: 0,
            replies: 0,
        });
    }
    drop(tx);
    let start = Instant::now();
    let ns = |t: Instant| t.duration_since(start).as_nanos() as u64;
    let mut homes: HashMap<FlowKey, u32> = HashMap::new();
    let mut placed: HashMap<FlowKey, u32> = HashMap::new();
    let mut seq = 0u64;
    let mut next_probe = start;
    let mut next_report = start + Duration::from_secs(1);
    let result = loop {
        let now = Instant::now();
        if stop.load(Ordering::Relaxed) || cfg.duration.is_some_and(|d| now - start >= d) {
            break Ok(());
        }
        if paths.is_empty() {
            thread::sleep(tick);
            continue;
        }
        if now >= next_probe {
            seq += 1;
            for p in &mut paths {
                // A failed send is a lost probe, as on the wire.
                let _ = p.sock.send(&encode(REQUEST, seq, token));
                p.est.probe_sent(seq, ns(now));
                p.sent += 1;
            }
            next_probe += cfg.interval;
            if next_probe < now {
                next_probe = now + cfg.interval;
            }
        }
        let wait = next_probe.saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok((i, s, at)) => {
                if paths[i].est.probe_reply(s, ns(at)).is_some() {
                    paths[i].replies += 1;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break Ok(()),
        }
        let now = Instant::now();
        let at_s = (now - start).as_secs_f64();
        let estimates: Vec<PathEstimate> =
            paths.iter_mut().map(|p| p.est.estimate(ns(now))).collect();
        let mut changed = false;
        for (p, e) in paths.iter_mut().zip(&estimates) {
            let (old, new) = (p.state, e.state);
            if std::mem::discriminant(&old) != std::mem::discriminant(&new) {
                on_event(&MonitorEvent::State {
                    path: p.id,
                    from: state_name(old),
                    to: state_name(new),
                    at_s,
                });
                changed = true;
            }
            p.state = new;
        }
        let report_due = now >= next_report;
        if let Some(maps) = cfg.maps.as_mut() {
            // On every change, and once a second for flows routed since.
            if changed || report_due {
                if let Err(e) = apply(maps, &paths, &estimates, &mut homes, &mut placed, |ev| {
                    on_event(&MonitorEvent::Moved {
                        flow: ev.0,
                        from: ev.1,
                        to: ev.2,
                        at_s,
                    })
                }) {
                    break Err(e);
                }
            }
        }
        if report_due {
            next_report += Duration::from_secs(1);
            let report = MonitorEvent::Paths {
                at_s,
                paths: health(&paths, &estimates),
            };
            if let (Some(file), MonitorEvent::Paths { paths, .. }) = (&cfg.state_file, &report) {
                // Best effort: `paths show` reads it when it is there.
                let _ = crate::datapath::state::write_json(file, paths);
            }
            on_event(&report);
        }
    };
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    result
}

fn health(paths: &[Probed], estimates: &[PathEstimate]) -> Vec<PathHealth> {
    paths
        .iter()
        .zip(estimates)
        .map(|(p, e)| PathHealth {
            path: p.id,
            probe: p.addr,
            state: state_name(e.state),
            srtt_ms: e.srtt_ns / 1e6,
            rttvar_ms: e.rttvar_ns / 1e6,
            min_rtt_ms: e.min_rtt_ns as f64 / 1e6,
            loss: e.loss,
            sent: p.sent,
            replies: p.replies,
        })
        .collect()
}

/// Writes the paths' states and moves every flow to where it belongs.
fn apply(
    maps: &mut PathMaps,
    paths: &[Probed],
    estimates: &[PathEstimate],
    homes: &mut HashMap<FlowKey, u32>,
    placed: &mut HashMap<FlowKey, u32>,
    mut moved: impl FnMut((String, u32, u32)),
) -> Result<(), MonitorError> {
    // Estimates indexed by path id (paths not probed count as unknown).
    let max = paths.iter().map(|p| p.id as usize + 1).max().unwrap_or(0);
    let mut by_id = vec![
        PathEstimate {
            state: PathState::Unknown,
            srtt_ns: 0.0,
            rttvar_ns: 0.0,
            min_rtt_ns: 0,
            loss: 0.0,
            bw_bytes_per_s: 0.0,
            bw_age_ns: 0,
        };
        max
    ];
    for (p, e) in paths.iter().zip(estimates) {
        by_id[p.id as usize] = e.clone();
        let entry = maps.path(p.id)?;
        let up = !matches!(e.state, PathState::Down { .. });
        maps.set_path(p.id, entry.mark, up)?;
    }
    let flows = maps.flows()?;
    homes.retain(|k, _| flows.iter().any(|(f, _)| f == k));
    placed.retain(|k, _| flows.iter().any(|(f, _)| f == k));
    for (key, cur) in flows {
        // A flow we did not place (new, or re-routed by someone else) is
        // home where it is.
        let home = match (homes.get(&key), placed.get(&key)) {
            (Some(&h), Some(&p)) if p == cur => h,
            _ => cur,
        };
        homes.insert(key, home);
        let want = failover::place(home, &by_id).unwrap_or(cur);
        if want != cur {
            maps.route(&key, want)?;
            moved((FlowSpec::from_key(&key).to_string(), cur, want));
        }
        placed.insert(key, want);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_round_trip_and_anything_else_is_ignored() {
        let b = encode(REQUEST, 7, 0xabc);
        assert_eq!(decode(&b), Some((REQUEST, 7, 0xabc)));
        assert_eq!(decode(&b[..20]), None);
        let mut bad = b;
        bad[0] = b'X';
        assert_eq!(decode(&bad), None);
        let mut bad = b;
        bad[5] = 9;
        assert_eq!(decode(&bad), None);
        let mut bad = b;
        bad[4] = 2;
        assert_eq!(decode(&bad), None);
    }

    #[test]
    fn a_responder_and_a_prober_on_loopback_see_each_other_up() {
        let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let sock = UdpSocket::bind(listen).unwrap();
        let addr = sock.local_addr().unwrap();
        drop(sock);
        let stop = Arc::new(AtomicBool::new(false));
        let responder = {
            let stop = stop.clone();
            thread::spawn(move || {
                run(
                    MonitorConfig {
                        maps: None,
                        state_file: None,
                        probes: vec![],
                        listen: Some(addr),
                        interval: Duration::from_millis(20),
                        estimator: EstimatorConfig::default(),
                        duration: None,
                    },
                    stop,
                    |_| {},
                )
            })
        };
        let mut events = Vec::new();
        run(
            MonitorConfig {
                maps: None,
                state_file: None,
                probes: vec![(0, addr)],
                listen: None,
                interval: Duration::from_millis(20),
                estimator: EstimatorConfig::default(),
                duration: Some(Duration::from_millis(1_200)),
            },
            Arc::new(AtomicBool::new(false)),
            |e| events.push(serde_json::to_value(e).unwrap()),
        )
        .unwrap();
        stop.store(true, Ordering::Relaxed);
        responder.join().unwrap().unwrap();
        assert!(
            events
                .iter()
                .any(|e| e["event"] == "state" && e["to"] == "up"),
            "{events:?}"
        );
        let report = events.iter().find(|e| e["event"] == "paths").unwrap();
        assert!(
            report["paths"][0]["replies"].as_u64() > Some(10),
            "{report}"
        );
    }
}
