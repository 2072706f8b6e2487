//! Connects every pair of ranks: rank r dials every lower rank and accepts every
//! higher one. Same-host pairs get a shared-memory channel plus one TCP control
//! connection (liveness, aborts); RDMA pairs inside a domain (`mesh_rdma`) a
//! queue pair plus one TCP control connection; other pairs get several TCP
//! data connections.

use std::io::Read;
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::config::Options;
use crate::error::{CollectiveError, Rank, Result};
use crate::mesh_tls;
use crate::pool::BufferPool;
use crate::rendezvous::Joined;
use crate::setup;
use crate::store::StoreClient;
use crate::topology::LinkClass;
use crate::transport::shm::{ShmRing, ShmTransport};
use crate::transport::tagging;
use crate::transport::tcp::{self, TcpTransport, TcpTuning};
use crate::transport::tls_config::{TlsContext, TlsMode};
use crate::transport::Transport;
use crate::wire::{read_frame, write_frame, ConnRole, FrameHeader, FrameKind, Hello};

/// How often a rank waiting for connections looks for another rank's set-up failure.
const CHECK_EVERY: Duration = Duration::from_millis(50);

/// One connection to a peer; `data` ones carry chunks, the others only control
/// frames. The `latency` one (across domains) carries the small transfers.
pub(crate) struct Conn {
    pub transport: Box<dyn Transport>,
    pub data: bool,
    pub latency: bool,
    /// A bulk connection of a striped peer: its WAN path and a handle on
    /// its socket (for `TCP_INFO`), see [`crate::stripe`].
    pub path: Option<StripedSocket>,
}

/// A striped bulk connection's path and a handle on its socket.
pub(crate) type StripedSocket = (usize, TcpStream);

/// WAN paths `me` and `q` stripe over (1: no striping).
fn paths(j: &Joined, me: Rank, q: Rank) -> usize {
    if j.topology.class(me, q) != LinkClass::InterDomain {
        return 1;
    }
    crate::stripe::shared_paths(&j.paths, me, q).max(1)
}

/// Whether connection `index` between `me` and `q` is the latency connection:
/// across domains, the one after the bulk streams (of every path).
fn is_latency(j: &Joined, opts: &Options, me: Rank, q: Rank, index: usize) -> bool {
    opts.wan_latency_stream
        && j.topology.class(me, q) == LinkClass::InterDomain
        && index == opts.streams_wan * paths(j, me, q)
}

/// The path of bulk connection `index` of a striped pair (path-major).
fn path_of(j: &Joined, opts: &Options, me: Rank, q: Rank, index: usize) -> Option<usize> {
    let n = paths(j, me, q);
    (n > 1 && index < opts.streams_wan * n).then(|| index / opts.streams_wan)
}

/// How many connections `me` and `q` open between them, and whether via shared memory.
/// An RDMA pair (`rdma`) opens one TCP control connection next to its queue pair.
fn shape(j: &Joined, opts: &Options, me: Rank, q: Rank, rdma: bool) -> (bool, usize) {
    let shm = opts.shm && j.host_ids[me] == j.host_ids[q] && j.domains[me] == j.domains[q];
    if shm {
        return (true, 1);
    }
    if rdma {
        return (false, 1);
    }
    match j.topology.class(me, q) {
        LinkClass::InterDomain => (
            false,
            opts.streams_wan * paths(j, me, q) + usize::from(opts.wan_latency_stream),
        ),
        _ => (false, opts.streams_lan),
    }
}

fn ring_path(session: u64, from: Rank, to: Rank) -> PathBuf {
    PathBuf::from(format!(
        "/dev/shm/causeway-{session:016x}-{}-{from}-{to}",
        std::process::id()
    ))
}

pub(crate) fn connect_all(
    j: &Joined,
    store: &mut StoreClient,
    opts: &Options,
    me: Rank,
) -> Result<Vec<Vec<Conn>>> {
    let world = j.addrs.len();
    let deadline = Instant::now() + opts.rendezvous_timeout;
    let mut conns: Vec<Vec<Conn>> = (0..world).map(|_| Vec::new()).collect();
    // Queue pairs first (through the store): a pair's QPs are ready before
    // its TCP control connection exists, so no data can reach a QP too early.
    let mut rdma = crate::mesh_rdma::connect(j, store, opts, me, |q| tls_for(j, me, q).is_some())?;
    for (q, c) in conns.iter_mut().enumerate().take(me) {
        // Another rank's failure ends this rank's set-up too.
        setup::check(store)?;
        *c = dial_peer(j, opts, me, q, rdma[q].take()).map_err(|e| {
            CollectiveError::SetupFailed {
                reporter: me,
                peers: vec![q],
                cause: e.to_string(),
            }
        })?;
    }
    // Accept from the higher ranks.
    let mut expected: Vec<usize> = (0..world)
        .map(|q| {
            if q > me {
                shape(j, opts, me, q, rdma[q].is_some()).1
            } else {
                0
            }
        })
        .collect();
    let mut seen: Vec<Vec<bool>> = expected.iter().map(|n| vec![false; *n]).collect();
    j.listener
        .set_nonblocking(true)
        .map_err(|e| CollectiveError::io("listener", e))?;
    let pool = BufferPool::new(4);
    let mut last_check = Instant::now();
    while expected.iter().any(|n| *n > 0) {
        let stream = match j.listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if last_check.elapsed() >= CHECK_EVERY {
                    setup::check(store)?;
                    last_check = Instant::now();
                }
                if Instant::now() >= deadline {
                    let missing: Vec<Rank> = (0..world).filter(|q| expected[*q] > 0).collect();
                    return Err(CollectiveError::RendezvousTimeout {
                        missing,
                        stage: "connect",
                        after: opts.rendezvous_timeout,
                    });
                }
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(e) => return Err(CollectiveError::io("accept", e)),
        };
        let stream = stream;
        stream
            .set_nonblocking(false)
            .map_err(|e| CollectiveError::io("accept", e))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| CollectiveError::io("accept", e))?;
        // TLS first when the peer starts it: nothing it sends is read
        // before its certificate is verified.
        let Some((mut secured, h)) = mesh_tls::hello(j.tls.as_deref(), &stream, &pool) else {
            continue;
        };
        let q = h.rank as usize;
        if h.session != j.session || h.world as usize != world || q <= me || q >= world {
            // A stray or stale connection: not part of this communicator.
            continue;
        }
        if !mesh_tls::admit(j, me, q, &mut secured, tls_for(j, me, q).is_some())? {
            continue;
        }
        let i = h.index as usize;
        if i >= seen[q].len() || seen[q][i] {
            return Err(CollectiveError::Rendezvous(format!(
                "rank {q} opened connection {i} twice or out of range"
            )));
        }
        seen[q][i] = true;
        expected[q] -= 1;
        let kind = Kind {
            latency: is_latency(j, opts, me, q, i),
            path: path_of(j, opts, me, q, i),
        };
        tune(j, opts, me, q, &stream, kind);
        tag(
            &stream,
            tagging::kind_of(h.role, is_latency(j, opts, me, q, i)),
        )?;
        match (h.role, h.shm) {
            (ConnRole::TcpControl, Some((theirs, ours))) => {
                let shm_err =
                    |e: std::io::Error| CollectiveError::Shm(format!("map ring of rank {q}: {e}"));
                let rx = ShmRing::open(theirs.as_ref()).map_err(shm_err)?;
                let tx = ShmRing::open(ours.as_ref()).map_err(shm_err)?;
                conns[q].push(Conn {
                    transport: Box::new(ShmTransport::new(tx, rx)),
                    data: true,
                    latency: false,
                    path: None,
                });
                conns[q].push(Conn {
                    transport: mesh_tls::transport(secured, stream, q)?,
                    data: false,
                    latency: false,
                    path: None,
                });
            }
            (ConnRole::RdmaControl, None) => {
                let Some(t) = rdma[q].take() else {
                    return Err(CollectiveError::Rendezvous(format!(
                        "rank {q} opened an RDMA control connection, but this pair has no queue pair"
                    )));
                };
                conns[q].push(Conn {
                    transport: t,
                    data: true,
                    latency: false,
                    path: None,
                });
                conns[q].push(Conn {
                    transport: mesh_tls::transport(secured, stream, q)?,
                    data: false,
                    latency: false,
                    path: None,
                });
            }
            (ConnRole::TcpData, None) => {
                let path = match path_of(j, opts, me, q, i) {
                    Some(p) => Some((p, clone_for_info(&stream, q)?)),
                    None => None,
                };
                conns[q].push(Conn {
                    transport: mesh_tls::transport(secured, stream, q)?,
                    data: true,
                    latency: is_latency(j, opts, me, q, i),
                    path,
                })
            }
            _ => {
                return Err(CollectiveError::Rendezvous(format!(
                    "rank {q} sent an inconsistent hello"
                )))
            }
        }
    }
    Ok(conns)
}

/// Opens every connection `me` dials to the lower rank `q`.
fn dial_peer(
    j: &Joined,
    opts: &Options,
    me: Rank,
    q: Rank,
    rdma: Option<Box<dyn Transport>>,
) -> Result<Vec<Conn>> {
    let world = j.addrs.len();
    let tuning = opts
        .wan_socket_buffer
        .map(TcpTuning::for_long_fat_pipes)
        .unwrap_or(TcpTuning {
            socket_buffer: None,
        });
    let mut out = Vec::new();
    let (shm, n) = shape(j, opts, me, q, rdma.is_some());
    let hello = |index: u32, role, shm| Hello {
        session: j.session,
        rank: me as u32,
        world: world as u32,
        index,
        role,
        shm,
    };
    let dial = |h: Hello| -> Result<(Box<dyn Transport>, Option<StripedSocket>)> {
        let latency = is_latency(j, opts, me, q, h.index as usize);
        let cc: &[&str] = if latency {
            &tcp::LATENCY_CONGESTION
        } else {
            &[]
        };
        // A striped pair's bulk connection goes to the peer's address on its path.
        let to = match path_of(j, opts, me, q, h.index as usize) {
            Some(p) => std::net::SocketAddr::new(j.paths[q][p], j.addrs[q].port()),
            None => j.addrs[q],
        };
        let mut s = tcp::connect(to, tuning, Duration::from_secs(10), cc)
            .map_err(|e| CollectiveError::io(format!("connect to rank {q} at {to}"), e))?;
        tag(&s, tagging::kind_of(h.role, latency))?;
        let p = h.encode();
        let hello = FrameHeader::control(FrameKind::Hello, p.len() as u32);
        let sent = |e| CollectiveError::io(format!("hello to rank {q}"), e);
        let t: Box<dyn Transport> = match tls_for(j, me, q) {
            Some(ctx) => {
                let mut t = mesh_tls::dial(ctx, j, q, &s)?;
                write_frame(&mut t, &hello, &p).map_err(sent)?;
                mesh_tls::secured_link(t)?
            }
            None => {
                write_frame(&mut s, &hello, &p).map_err(sent)?;
                tcp_transport(s.try_clone().map_err(sent)?, q)?
            }
        };
        let path = path_of(j, opts, me, q, h.index as usize);
        tune(j, opts, me, q, &s, Kind { latency, path });
        let path = match path {
            Some(p) => Some((p, clone_for_info(&s, q)?)),
            None => None,
        };
        Ok((t, path))
    };
    if shm {
        let (tx_path, rx_path) = (ring_path(j.session, me, q), ring_path(j.session, q, me));
        let shm_err =
            |e: std::io::Error| CollectiveError::Shm(format!("create ring for rank {q}: {e}"));
        let tx = ShmRing::create(&tx_path, opts.shm_ring_bytes).map_err(shm_err)?;
        let rx = ShmRing::create(&rx_path, opts.shm_ring_bytes).map_err(shm_err)?;
        let paths = (tx_path.display().to_string(), rx_path.display().to_string());
        let (t, _) = dial(hello(0, ConnRole::TcpControl, Some(paths)))?;
        out.push(Conn {
            transport: Box::new(ShmTransport::new(tx, rx)),
            data: true,
            latency: false,
            path: None,
        });
        out.push(Conn {
            transport: t,
            data: false,
            latency: false,
            path: None,
        });
    } else if let Some(qp) = rdma {
        let (t, _) = dial(hello(0, ConnRole::RdmaControl, None))?;
        out.push(Conn {
            transport: qp,
            data: true,
            latency: false,
            path: None,
        });
        out.push(Conn {
            transport: t,
            data: false,
            latency: false,
            path: None,
        });
    } else {
        for i in 0..n {
            let (t, path) = dial(hello(i as u32, ConnRole::TcpData, None))?;
            out.push(Conn {
                transport: t,
                data: true,
                latency: is_latency(j, opts, me, q, i),
                path,
            });
        }
    }
    Ok(out)
}

/// The TLS identity to use between `me` and `q`, if their link is encrypted:
/// every TCP connection under `all`, those across domains under `wan`.
fn tls_for(j: &Joined, me: Rank, q: Rank) -> Option<&TlsContext> {
    let ctx = j.tls.as_deref()?;
    match ctx.mode {
        TlsMode::All => Some(ctx),
        TlsMode::Wan if j.topology.class(me, q) == LinkClass::InterDomain => Some(ctx),
        _ => None,
    }
}

pub(crate) fn read_hello(s: &mut (impl Read + ?Sized), pool: &BufferPool) -> Option<Hello> {
    let mut s = s;
    let f = read_frame(&mut s, 4096, pool).ok()?;
    (f.header.kind == FrameKind::Hello)
        .then(|| Hello::decode(&f.payload).ok())
        .flatten()
}

/// What a connection to a peer is for, as far as [`tune`] cares.
#[derive(Clone, Copy)]
struct Kind {
    /// The latency connection across domains.
    latency: bool,
    /// A bulk connection of a striped pair: its WAN path (one of several).
    path: Option<usize>,
}

/// Congestion control and pacing of one TCP connection to `q`. Across domains
/// the bulk connections get the configured congestion control and, when the WAN
/// rate is known, a pacing cap (see [`wan_pacing_share`]). The latency connection
/// keeps the one it was created with ([`tcp::LATENCY_CONGESTION`], set before the
/// handshake) and no cap. Other connections accepted from the listener (which
/// carries the latency choice) get the system default back.
///
/// Every bulk connection across domains goes to [`Joined::wan_bulk`] with its
/// path (0 when not striped), for the estimates sampler of that path
/// (`crate::estimates::paths`). A striped pair's bulk connections
/// ([`Kind::path`]) get no pacing cap from a fixed `wan_rate_bps`: it is one
/// path's rate, and would hold the faster path's connections to a share of it.
fn tune(j: &Joined, opts: &Options, me: Rank, q: Rank, s: &TcpStream, kind: Kind) {
    if kind.latency {
        return;
    }
    let wan = j.topology.class(me, q) == LinkClass::InterDomain;
    let cc = match (&opts.wan_congestion, wan) {
        (Some(cc), true) => Some(cc.clone()),
        _ if opts.wan_latency_stream => tcp::system_congestion(),
        _ => None,
    };
    if let Some(cc) = cc {
        if !tcp::set_congestion(s, &cc) {
            tracing::debug!(cc, "congestion control not available; keeping the default");
        }
    }
    if wan {
        if let Ok(dup) = s.try_clone() {
            j.wan_bulk
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((kind.path.unwrap_or(0), dup));
        }
    }
    if let (true, None, true, Some(rate_bps)) = (wan, kind.path, opts.wan_pacing, opts.wan_rate_bps)
    {
        let mine = j.topology.domain_of(me);
        let ranks = (0..j.topology.world())
            .filter(|&r| j.topology.domain_of(r) == mine)
            .count();
        let rate = wan_pacing_share(rate_bps, ranks, opts.streams_wan);
        if let Err(e) = tcp::set_max_pacing_rate(s, rate) {
            tracing::debug!(%e, "pacing cap not accepted");
        }
    }
}

/// Share of a WAN path (`rate_bps` bit/s per direction) one connection may use:
/// every rank of a domain sends to its counterpart at once (hierarchical
/// allreduce), each over `streams` connections, and together they aim at
/// [`WAN_PACING_TARGET`] of the rate so the bottleneck queue stays short.
/// Bytes per second.
pub(crate) fn wan_pacing_share(rate_bps: u64, ranks_in_domain: usize, streams: usize) -> u64 {
    let flows = (ranks_in_domain.max(1) * streams.max(1)) as f64;
    (rate_bps as f64 / 8.0 * WAN_PACING_TARGET / flows) as u64
}

/// Fraction of the WAN rate the paced flows of a domain aim at together.
pub(crate) const WAN_PACING_TARGET: f64 = 0.96;

fn clone_for_info(s: &TcpStream, q: Rank) -> Result<TcpStream> {
    s.try_clone()
        .map_err(|e| CollectiveError::io(format!("socket to rank {q}"), e))
}

fn tag(s: &TcpStream, kind: tagging::TrafficKind) -> Result<()> {
    tagging::tag(s, kind).map_err(|e| CollectiveError::io(format!("tag a {kind:?} connection"), e))
}

pub(crate) fn tcp_transport(s: TcpStream, q: Rank) -> Result<Box<dyn Transport>> {
    Ok(Box::new(TcpTransport::new(s).map_err(|e| {
        CollectiveError::io(format!("socket to rank {q}"), e)
    })?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacing_shares_the_wan_between_every_flow_of_a_domain() {
        // 200 Mbit/s, 2 ranks per domain, 2 streams each: 4 flows at 6 MB/s.
        let share = wan_pacing_share(200_000_000, 2, 2);
        assert_eq!(share, (25e6 * WAN_PACING_TARGET / 4.0) as u64);
        assert!(share * 4 < 25_000_000);
        // One flow alone gets the whole target; zero counts are treated as one.
        let m100 = 100_000_000;
        assert_eq!(wan_pacing_share(m100, 0, 0), wan_pacing_share(m100, 1, 1));
        assert!(wan_pacing_share(m100, 1, 1) > wan_pacing_share(m100, 1, 2));
    }
}
