//! The probe loop: one UDP socket that answers every configured peer's
//! requests and sends its own requests to every peer, feeding one estimator
//! per (peer, timestamp source). Each exchange yields up to three samples
//! (kernel, SO_TIMESTAMPING, userspace stamps of the same datagrams), so the
//! sources can be compared on identical traffic.

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use bpf_maps::clock::PROBE_LEN;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

pub use super::status::{IgnoredCounters, PeerStatus, SessionStatus, SourceEstimate};
use super::{
    auth::{AuthReject, PeerGuard, ProbeKey},
    estimator::{Estimator, EstimatorConfig},
    exchange::{follow_up, respond, Requester, RxStamps},
    probe::{Kind, Probe},
    socket::StampedSocket,
    source::{Source, SyncClock},
};

/// One peer to synchronise with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerSpec {
    pub name: String,
    pub addr: SocketAddr,
    /// The file holding the key this pair shares (64 hex digits, mode
    /// 0600 or stricter): every probe to and from the peer is then tagged
    /// and checked (`causeway_core::clock::auth`). Read by the agent's
    /// configuration into `key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// The key itself (never serialised or printed).
    #[serde(skip)]
    pub key: Option<ProbeKey>,
}

/// What a [`Session`] does.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// This host's id (the probes' sender field).
    pub host_id: u32,
    pub bind: SocketAddr,
    pub peers: Vec<PeerSpec>,
    /// Probe period per peer.
    pub interval: Duration,
    /// The first `fast_start` probes go out 8× faster, for a quick first estimate.
    pub fast_start: u32,
    /// Requests sent back to back to each peer per round (1..=8). After an
    /// idle period the first datagram crosses a cold host and forwarding path
    /// (tens of µs slower here, in one direction only: a bias); the later
    /// ones find it warm, and minimum-delay filtering keeps them.
    pub burst: u32,
    /// A request unanswered for this long is forgotten.
    pub timeout: Duration,
    pub estimator: EstimatorConfig,
    pub clock: SyncClock,
    /// Send IPv4 probes with a zero UDP checksum so that the eBPF programs
    /// may stamp them (only when kernel stamping is configured).
    pub zero_checksum: bool,
}

struct Peer {
    spec: PeerSpec,
    guard: PeerGuard,
    requester: Requester,
    estimators: BTreeMap<Source, Estimator>,
}

/// What a transmit-stamp id belongs to.
enum TxRecord {
    Request {
        peer: usize,
        seq: u32,
    },
    Response {
        peer: usize,
        to: SocketAddr,
        response: Probe,
    },
}

pub struct Session {
    cfg: SessionConfig,
    sock: Arc<StampedSocket>,
    peers: Vec<Peer>,
    tx: HashMap<u32, TxRecord>,
    status: SessionStatus,
}

impl Session {
    /// Binds the socket (inside a tokio runtime) and builds one estimator
    /// per peer and source.
    pub fn new(cfg: SessionConfig) -> Result<Session, SessionError> {
        let sock =
            StampedSocket::bind(cfg.bind, cfg.clock, cfg.zero_checksum).map_err(|source| {
                SessionError::Bind {
                    addr: cfg.bind,
                    source,
                }
            })?;
        let nonce = random_u64()?;
        let mut peers = Vec::new();
        for (i, spec) in cfg.peers.iter().enumerate() {
            let mut estimators = BTreeMap::new();
            for s in Source::ALL {
                let mut ecfg = cfg.estimator.clone();
                ecfg.stamp_resolution_ns = ecfg.stamp_resolution_ns.max(s.stamp_uncertainty_ns());
                estimators.insert(s, Estimator::new(ecfg)?);
            }
            let timeout = cfg.timeout.as_nanos() as u64;
            let mut requester = Requester::new(cfg.host_id, nonce.wrapping_add(i as u64), timeout);
            if spec.key.is_some() {
                requester.check_kernel_egress_stamps();
            }
            peers.push(Peer {
                spec: spec.clone(),
                guard: PeerGuard::new(spec.key.clone()),
                requester,
                estimators,
            });
        }
        let status = SessionStatus {
            host_id: cfg.host_id,
            software_stamps: sock.software_stamps(),
            zero_checksum: sock.zero_checksum(),
            ..SessionStatus::default()
        };
        Ok(Session {
            cfg,
            sock: Arc::new(sock),
            peers,
            tx: HashMap::new(),
            status,
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// Runs until `shutdown` turns true, publishing the status after every
    /// change on `out`.
    pub async fn run(
        mut self,
        out: watch::Sender<SessionStatus>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(), SessionError> {
        let mut buf = [0u8; 2048];
        let mut sent_rounds = 0u32;
        let mut next_round = tokio::time::Instant::now();
        let mut drain = tokio::time::interval(Duration::from_millis(1));
        drain.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        self.publish(&out);
        let sock = self.sock.clone();
        loop {
            tokio::select! {
                _ = shutdown.changed() => {
                    if *shutdown.borrow() { return Ok(()); }
                }
                _ = tokio::time::sleep_until(next_round) => {
                    self.send_round().await;
                    sent_rounds = sent_rounds.saturating_add(1);
                    let period = if sent_rounds < self.cfg.fast_start {
                        self.cfg.interval / 8
                    } else {
                        self.cfg.interval
                    };
                    next_round += period;
                    self.publish(&out);
                }
                r = sock.recv(&mut buf) => {
                    let rx = match r {
                        Ok(rx) => rx,
                        Err(e) => {
                            self.io_failed("receive", &e);
                            // A persistent error must not spin the loop.
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    };
                    self.drain_tx().await;
                    let from = SocketAddr::new(rx.from.ip().to_canonical(), rx.from.port());
                    self.handle(&buf[..rx.len], from, RxStamps { user: rx.user, software: rx.software }).await;
                    self.publish(&out);
                }
                _ = drain.tick(), if !self.tx.is_empty() => {
                    self.drain_tx().await;
                }
            }
        }
    }

    /// Socket errors (an unreachable peer, a link going down) are counted
    /// and logged, never fatal: the next round tries again.
    fn io_failed(&mut self, what: &'static str, e: &std::io::Error) {
        self.status.io_errors += 1;
        if self.status.io_errors.is_power_of_two() {
            tracing::warn!(error = %e, count = self.status.io_errors, "clock probe socket: cannot {what}");
        }
    }

    async fn send_round(&mut self) {
        let now = self.cfg.clock.now();
        for i in 0..self.peers.len() {
            self.peers[i].requester.expire(now);
            for _ in 0..self.cfg.burst.max(1) {
                self.send_request(i).await;
            }
        }
    }

    async fn send_request(&mut self, i: usize) {
        let addr = self.peers[i].spec.addr;
        let t1 = self.cfg.clock.now();
        let req = self.peers[i].requester.request(addr, t1);
        let mut bytes = req.encode();
        self.peers[i].guard.seal(&mut bytes);
        let id = match self.sock.send_to(&bytes, addr).await {
            Ok(id) => id,
            Err(e) => {
                self.io_failed("send a request", &e);
                return;
            }
        };
        if self.sock.software_stamps() {
            self.tx.insert(
                id,
                TxRecord::Request {
                    peer: i,
                    seq: req.seq,
                },
            );
        }
    }

    /// Applies transmit stamps: software t1 of requests, and the follow-ups
    /// of responses.
    async fn drain_tx(&mut self) {
        for (id, stamp) in self.sock.drain_tx_stamps() {
            match self.tx.remove(&id) {
                Some(TxRecord::Request { peer, seq }) => {
                    self.peers[peer].requester.tx_software(seq, stamp)
                }
                Some(TxRecord::Response { peer, to, response }) => {
                    let mut f = follow_up(&response, stamp).encode();
                    self.peers[peer].guard.seal(&mut f);
                    // Follow-ups get no transmit stamp of their own that matters.
                    if let Err(e) = self.sock.send_to(&f, to).await {
                        self.io_failed("send a follow-up", &e);
                    }
                }
                None => {}
            }
        }
        // Stamps that never come (e.g. the datagram was dropped before the
        // driver) must not pile up.
        if self.tx.len() > 4096 {
            self.tx.clear();
        }
    }

    async fn handle(&mut self, bytes: &[u8], from: SocketAddr, rx: RxStamps) {
        let probe = match Probe::decode(bytes) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(%from, error = %e, "ignoring malformed clock probe");
                self.status.ignored.malformed += 1;
                return;
            }
        };
        let Some(idx) = self
            .peers
            .iter()
            .position(|p| p.spec.addr.ip().to_canonical() == from.ip())
        else {
            self.status.ignored.unknown_peer += 1;
            return;
        };
        // `decode` accepted exactly PROBE_LEN bytes.
        let Ok(raw) = <&[u8; PROBE_LEN]>::try_from(bytes) else {
            self.status.ignored.malformed += 1;
            return;
        };
        if let Err(e) = self.peers[idx].guard.admit(raw) {
            tracing::debug!(%from, error = %e, "ignoring clock probe");
            let c = &mut self.status.ignored;
            match e {
                AuthReject::Unauthenticated => c.unauthenticated += 1,
                AuthReject::Forged => c.forged += 1,
                AuthReject::Replayed => c.replayed += 1,
            }
            return;
        }
        if probe.kind == Kind::Request {
            let two_step = self.sock.software_stamps();
            let t3 = self.cfg.clock.now();
            let resp = respond(&probe, self.cfg.host_id, rx, t3, two_step);
            let mut bytes = resp.encode();
            self.peers[idx].guard.seal(&mut bytes);
            let id = match self.sock.send_to(&bytes, from).await {
                Ok(id) => id,
                Err(e) => {
                    self.io_failed("send a response", &e);
                    return;
                }
            };
            if resp.two_step() {
                self.tx.insert(
                    id,
                    TxRecord::Response {
                        peer: idx,
                        to: from,
                        response: resp,
                    },
                );
            }
            self.status.requests_answered += 1;
            return;
        }
        let peer = &mut self.peers[idx];
        let Ok(samples) = peer.requester.receive(from, &probe, rx) else {
            return;
        };
        for (source, sample) in samples {
            if let Some(est) = peer.estimators.get_mut(&source) {
                if est.add(sample).is_err() {
                    self.status.ignored.rejected_samples += 1;
                }
            }
        }
    }

    fn publish(&mut self, out: &watch::Sender<SessionStatus>) {
        let now = self.cfg.clock.now();
        self.status.peers = self
            .peers
            .iter()
            .map(|p| {
                let sources: Vec<SourceEstimate> = p
                    .estimators
                    .iter()
                    .filter_map(|(s, e)| {
                        e.estimate(now)
                            .map(|est| SourceEstimate::new(*s, &est, e.counts().0))
                    })
                    .collect();
                PeerStatus {
                    name: p.spec.name.clone(),
                    addr: p.spec.addr,
                    selected: sources.first().copied(),
                    sources,
                    exchanges: p.requester.counters,
                    authenticated: p.guard.requires_auth(),
                    auth: p.guard.counters,
                }
            })
            .collect();
        out.send_replace(self.status.clone());
    }
}

/// Why the session could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("cannot bind the clock probe socket to {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("estimator configuration: {0}")]
    Config(#[from] super::estimator::ConfigError),
    #[error("cannot read random bytes for the session nonce: {0}")]
    Random(#[source] std::io::Error),
}

fn random_u64() -> Result<u64, SessionError> {
    use std::io::Read;
    let mut b = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(SessionError::Random)?;
    Ok(u64::from_ne_bytes(b))
}
