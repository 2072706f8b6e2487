//! Which pairs of ranks talk over RDMA, and their queue pairs' set-up through
//! the bootstrap store (`CAUSEWAY_TRANSPORT`, see [`crate::transport::rdma`]).
//!
//! Every rank publishes whether it has a usable device (or why not) before it
//! reads anyone's, then one endpoint per RDMA peer before it reads the
//! peer's: nobody waits for a key that is published only after a wait. A
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

/// This rank's device status as published: `ok`, or why not.
fn my_status(j: &Joined, opts: &Options, me: Rank, any: bool) -> (String, Option<Device>) {
    if opts.transport == TransportChoice::Tcp {
        return ("off: CAUSEWAY_TRANSPORT=tcp".into(), None);
    }
    if !any {
        return ("off: no peer in this domain needs it".into(), None);
    }
    match open(j.addrs[me].ip()) {
        Ok(d) => (OK.into(), Some(d)),
        Err(e) => (e.to_string(), None),
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
    if !rdma::BUILT && opts.transport == TransportChoice::Auto {
        // Every rank of this build decides the same without asking.
        return Ok((0..world).map(|_| None).collect());
    }
    let cand: Vec<bool> = (0..world)
        .map(|q| candidate(j, opts, tls(q), me, q))
        .collect();
    let (status, dev) = my_status(j, opts, me, cand.iter().any(|c| *c));
    store.set(&rdma::status_key(j.session, me), status.as_bytes())?;
    let mut use_rdma = vec![false; world];
    for q in (0..world).filter(|q| cand[*q]) {
        let theirs = store.get(&rdma::status_key(j.session, q), opts.rendezvous_timeout)?;
        let theirs = String::from_utf8_lossy(&theirs).into_owned();
        let why = match (status.as_str(), theirs.as_str()) {
            (OK, OK) => {
                use_rdma[q] = true;
                continue;
            }
            (OK, t) => RdmaError::NoDevice(format!("rank {q}: {t}")),
            (m, _) => RdmaError::NoDevice(format!("rank {me}: {m}")),
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
    if !use_rdma.iter().any(|u| *u) {
        return Ok(out);
    }
    pairs(j, store, opts, me, dev, &use_rdma, &mut out)?;
    Ok(out)
}

#[cfg(feature = "rdma")]
fn pairs(
    j: &Joined,
    store: &mut StoreClient,
    opts: &Options,
    me: Rank,
    dev: Option<Device>,
    use_rdma: &[bool],
    out: &mut [Option<Box<dyn Transport>>],
) -> Result<()> {
    let err = |peer, source| CollectiveError::Rdma {
        rank: me,
        peer,
        source,
    };
    let Some(dev) = dev else {
        return Ok(());
    };
    let mut pending = Vec::new();
    for q in (0..use_rdma.len()).filter(|q| use_rdma[*q]) {
        let p = dev.prepare(RING_BYTES).map_err(|e| err(q, e))?;
        store.set(&rdma::info_key(j.session, me, q), &p.info().encode())?;
        pending.push((q, p));
    }
    for (q, p) in pending {
        let b = store.get(&rdma::info_key(j.session, q, me), opts.rendezvous_timeout)?;
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
    _: Option<Device>,
    _: &[bool],
    _: &mut [Option<Box<dyn Transport>>],
) -> Result<()> {
    Ok(())
}
