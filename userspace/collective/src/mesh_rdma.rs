//! Which pairs of ranks talk over RDMA, and their queue pairs' set-up through
//! the bootstrap store (`CAUSEWAY_TRANSPORT`, see [`crate::transport::rdma`]).
//!
//! Every rank's rendezvous entry says whether it has a usable device (`rdma=ok`
//! or why not; no line: RDMA off). Each rank then publishes one endpoint per
//! RDMA peer before it reads the peer's: nobody waits for a key that is
//! published only after a wait, and the wait polls for set-up failures. A
//! pair uses RDMA when both ranks are in one domain, not on a shared-memory
//! host pair, not under TLS (RDMA bypasses it) and both devices are usable;
//! both ends decide from the same published facts.

use std::net::IpAddr;

use crate::config::Options;
use crate::error::{CollectiveError, Rank, Result};
use crate::rendezvous::Joined;
use crate::store::StoreClient;
use crate::topology::LinkClass;
use crate::transport::rdma::{self, RdmaError, TransportChoice};
use crate::transport::Transport;

/// Receive ring of each RDMA connection.
#[cfg(feature = "rdma")]
pub(crate) const RING_BYTES: usize = 4 << 20;

const OK: &str = "ok";

/// The pairs that may use RDMA by placement and options alone.
pub(crate) fn candidate(j: &Joined, opts: &Options, tls: bool, me: Rank, q: Rank) -> bool {
    opts.transport != TransportChoice::Tcp
        && q != me
        && j.topology.class(me, q) != LinkClass::InterDomain
        && !(opts.shm && j.host_ids[me] == j.host_ids[q] && j.domains[me] == j.domains[q])
        && !tls
}

/// This rank's RDMA status for its rendezvous entry: `ok` when a device
/// carries `ip` with an active port, otherwise why not; `None` with
/// `CAUSEWAY_TRANSPORT=tcp` or in a build without RDMA under `auto` (the
/// entry then has no `rdma=` line, and peers use TCP with this rank).
pub(crate) fn status(opts: &Options, ip: IpAddr) -> Option<String> {
    match opts.transport {
        TransportChoice::Tcp => None,
        TransportChoice::Auto if !rdma::BUILT => None,
        _ => Some(match open(ip) {
            Ok(_) => OK.to_string(),
            Err(e) => e.to_string(),
        }),
    }
}

#[cfg(feature = "rdma")]
type Device = rdma::RdmaDevice;
#[cfg(not(feature = "rdma"))]
type Device = ();

fn open(ip: IpAddr) -> Result<Device, RdmaError> {
    let IpAddr::V4(v4) = ip else {
        return Err(RdmaError::NoDevice(format!(
            "{ip}: only IPv4 (RoCE v2 IPv4-mapped GIDs) is supported"
        )));
    };
    #[cfg(feature = "rdma")]
    {
        rdma::open_device(v4)
    }
    #[cfg(not(feature = "rdma"))]
    {
        let _ = v4;
        Err(RdmaError::NotBuilt)
    }
}

/// Why the pair `me`–`q` cannot use RDMA, from both ranks' published
/// statuses (`None`: it can).
fn refusal(j: &Joined, me: Rank, q: Rank) -> Option<RdmaError> {
    let said = |r: Rank| match j.rdma[r].as_deref() {
        Some(OK) => None,
        Some(why) => Some(format!("rank {r}: {why}")),
        None => Some(format!(
            "rank {r}: RDMA off (CAUSEWAY_TRANSPORT=tcp or not built)"
        )),
    };
    said(me).or_else(|| said(q)).map(RdmaError::NoDevice)
}

/// Sets up every RDMA pair of `me`; returns one transport per such peer
/// (`None`: the pair uses TCP).
pub(crate) fn connect(
    j: &Joined,
    store: &mut StoreClient,
    opts: &Options,
    me: Rank,
    tls: impl Fn(Rank) -> bool,
) -> Result<Vec<Option<Box<dyn Transport>>>> {
    let world = j.addrs.len();
    let mut use_rdma = vec![false; world];
    for q in (0..world).filter(|q| candidate(j, opts, tls(*q), me, *q)) {
        let Some(why) = refusal(j, me, q) else {
            use_rdma[q] = true;
            continue;
        };
        if opts.transport == TransportChoice::Rdma {
            return Err(CollectiveError::Rdma {
                rank: me,
                peer: q,
                source: why,
            });
        }
        tracing::info!(rank = me, peer = q, reason = %why, "CAUSEWAY_TRANSPORT=auto: TCP to this peer");
    }
    let mut out: Vec<Option<Box<dyn Transport>>> = (0..world).map(|_| None).collect();
    if use_rdma.iter().any(|u| *u) {
        pairs(j, store, opts, me, &use_rdma, &mut out)?;
    }
    Ok(out)
}

/// Reads `key`, polling so that another rank's set-up failure ends the wait.
#[cfg(feature = "rdma")]
fn wait_key(store: &mut StoreClient, key: &str, opts: &Options) -> Result<Vec<u8>> {
    let deadline = std::time::Instant::now() + opts.rendezvous_timeout;
    loop {
        match store.get(key, std::time::Duration::from_millis(200)) {
            Ok(v) => return Ok(v),
            Err(crate::error::StoreError::Timeout { .. })
                if std::time::Instant::now() < deadline =>
            {
                crate::setup::check(store)?;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(feature = "rdma")]
fn pairs(
    j: &Joined,
    store: &mut StoreClient,
    opts: &Options,
    me: Rank,
    use_rdma: &[bool],
    out: &mut [Option<Box<dyn Transport>>],
) -> Result<()> {
    let err = |peer, source| CollectiveError::Rdma {
        rank: me,
        peer,
        source,
    };
    let first = use_rdma.iter().position(|u| *u).unwrap_or(0);
    let dev = open(j.addrs[me].ip()).map_err(|e| err(first, e))?;
    let mut pending = Vec::new();
    for q in (0..use_rdma.len()).filter(|q| use_rdma[*q]) {
        let p = dev.prepare(RING_BYTES).map_err(|e| err(q, e))?;
        store.set(&rdma::info_key(j.session, me, q), &p.info().encode())?;
        pending.push((q, p));
    }
    let mut connected = Vec::new();
    for (q, p) in pending {
        let b = wait_key(store, &rdma::info_key(j.session, q, me), opts)?;
        let remote = rdma::ConnInfo::decode(&b).map_err(|reason| {
            err(
                q,
                RdmaError::BadInfo {
                    peer: format!("rank {q}"),
                    reason,
                },
            )
        })?;
        let t = p
            .connect(remote, format!("rank {q}"))
            .map_err(|e| err(q, e))?;
        connected.push((q, t));
    }
    // Every QP of this rank is at RTS before any handshake, so a peer
    // handshaking with us waits at most for our reaching this point.
    for (q, t) in connected {
        t.handshake(opts.rendezvous_timeout)
            .map_err(|e| err(q, e))?;
        tracing::debug!(
            rank = me,
            peer = q,
            device = dev.name(),
            gid_index = dev.gid_index(),
            "rdma queue pair ready"
        );
        out[q] = Some(Box::new(t));
    }
    Ok(())
}

#[cfg(not(feature = "rdma"))]
fn pairs(
    _: &Joined,
    _: &mut StoreClient,
    _: &Options,
    _: Rank,
    _: &[bool],
    _: &mut [Option<Box<dyn Transport>>],
) -> Result<()> {
    Ok(())
}
