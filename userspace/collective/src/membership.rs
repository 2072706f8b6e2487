//! Shrink and grow: a new communicator from the survivors of a failure, or
//! from the members plus newcomers, without restarting the process.
//!
//! ## Protocol
//!
//! Every communicator keeps its mesh listener after set-up. Every peer already
//! knows its address (it connected to it), so it doubles as the rank's *standby
//! store*: idle (the kernel queues connections, nobody serves them) until that
//! rank coordinates a membership change, then a fresh [`StoreServer`] on it.
//! The bootstrap store of rank 0 is not needed, so losing rank 0 is no special
//! case.
//!
//! **Shrink** (every survivor calls [`Communicator::shrink`] after its
//! operation failed):
//! 1. *Coordinator*: survivor `s` tries the standby stores of old ranks
//!    `0, 1, …` in order. A rank whose listener refuses the connection (its
//!    process is gone), or that does not open its store within the operation
//!    timeout, is taken as lost; when `s` reaches itself, it is the
//!    coordinator and opens its store. So every survivor ends at the lowest
//!    live old rank.
//! 2. *Survivor set*: each survivor sets `alive/<old rank>` there. The
//!    coordinator connects once to every higher rank's listener: refused means
//!    lost; otherwise it waits for that rank's `alive` key until
//!    `timeout + 2 s` and then leaves it out. It publishes
//!    `members` (old ranks that stay) and `lost`.
//! 3. *Renumbering*: new ranks are dense in old-rank order (the coordinator
//!    becomes rank 0); a survivor that finds itself left out gets
//!    [`CollectiveError::Excluded`].
//! 4. *New communicator*: the ordinary rendezvous and mesh set-up, run on the
//!    coordinator's store with a fresh session id, so every connection is new.
//!
//! **Grow** (every member calls [`Communicator::grow`]`(k)`; each newcomer
//! calls [`CommunicatorBuilder::join`] with [`Communicator::grow_address`]):
//! rank 0's standby store opens, each joiner takes a ticket (`join/ticket`),
//! rank 0 admits the first `k` (`grown`), members keep their ranks and joiner
//! `i` becomes rank `world + i`.
//!
//! ## Epochs
//!
//! The first communicator has epoch 0; every shrink or grow makes epoch + 1.
//! Frames of one epoch cannot reach another: the new communicator opens new
//! connections, whose hello carries the new session id (checked by the mesh),
//! and the old ones stay with the old engine. A communicator that was shrunk
//! or grown is retired: its engine has stopped and every later operation on it
//! fails with [`CollectiveError::Retired`], never `Ok`.
//!
//! ## Bounds and limits
//!
//! With `T` the operation timeout and `W` the old world size, a survivor's
//! shrink takes:
//! - coordinator search: nothing for a dead lower rank (its port refuses, or
//!   1 s for a host that does not answer at all); `T + 10 s` (the store
//!   client's reply slack) for a lower rank that is alive but never opens its
//!   store — hung (SIGSTOP) or not calling `shrink`; it is then taken as lost;
//! - agreement: at most `W × 1 s` of probes plus `T + 2 s` for a survivor that
//!   listens but has not registered; it is then left out;
//! - the new set-up: the rendezvous timeout, as at start.
//!
//! Measured on one machine (tests in `tests/integration/shrink.rs`): 10–25 ms
//! after a killed rank or domain (dead ports refuse), ~2.8 s when a survivor
//! stays away (`T` = 0.8 s), ~12 s with a SIGSTOPped rank 0 (`T` = 2 s);
//! a grow by one joiner 20–45 ms.
//!
//! The failure model is crash-stop. Survivors must call `shrink` within
//! `T + 10 s` of each other, and see the same processes dead: survivors that
//! reach different lowest ranks (a partition, or one arriving after the
//! coordinator's new communicator is gone) do not merge, each side forms its
//! own communicator or times out; a left-out rank that reaches the
//! coordinator's store gets [`CollectiveError::Excluded`]. If the coordinator
//! dies during the shrink, the shrink fails with a typed error on every
//! survivor (no retry). The retired engine is stopped after the new
//! communicator is up, so an operation still pending on it delays `shrink` by
//! at most its own timeout. A joiner must be told the address of rank 0's
//! standby store out of band ([`Communicator::grow_address`]); `grow` admits
//! exactly the number of joiners the members ask for, later ones get
//! [`CollectiveError::Membership`]. Probing runs again in the new
//! communicator if the options ask for it.
mod grow;
mod shrink;

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use crate::builder::CommunicatorBuilder;
use crate::comm::Communicator;
use crate::config::{Identity, Options};
use crate::error::{CollectiveError, Rank, Result};
use crate::store::{StoreClient, StoreServer};
/// How this communicator came to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// 0 for the first communicator, one more for each shrink or grow.
    pub epoch: u64,
    /// For each rank, its rank in the previous communicator (`None`: it joined).
    pub previous: Vec<Option<Rank>>,
    /// Ranks of the previous communicator that are not in this one.
    pub lost: Vec<Rank>,
}

/// What a communicator keeps to take part in the next membership change.
pub(crate) struct Seat {
    pub id: Identity,
    pub opts: Options,
    /// Every rank's mesh listener: its standby store.
    pub addrs: Vec<SocketAddr>,
    listener: Option<TcpListener>,
    server: Option<StoreServer>,
    /// This rank's TLS identity: standby stores and their clients use it too.
    pub tls: Option<std::sync::Arc<crate::transport::tls_config::TlsContext>>,
    pub membership: Membership,
    retired: bool,
}

impl Seat {
    pub fn new(
        id: &Identity,
        opts: &Options,
        addrs: Vec<SocketAddr>,
        listener: TcpListener,
        tls: Option<std::sync::Arc<crate::transport::tls_config::TlsContext>>,
    ) -> Self {
        Seat {
            id: id.clone(),
            opts: opts.clone(),
            addrs,
            listener: Some(listener),
            server: None,
            tls,
            membership: Membership {
                epoch: 0,
                previous: (0..id.world).map(Some).collect(),
                lost: Vec::new(),
            },
            retired: false,
        }
    }

    /// The error an operation on this communicator gets once it cannot run.
    pub fn closed_error(&self) -> CollectiveError {
        if self.retired {
            CollectiveError::Retired {
                epoch: self.membership.epoch,
            }
        } else {
            CollectiveError::Closed
        }
    }

    /// Closes the standby listener: connections to it are refused from now on.
    pub fn close(&mut self) {
        self.listener.take();
    }

    /// `Err(Retired)` once shrunk or grown (successfully or not: no second try).
    fn usable(&self) -> Result<()> {
        if self.retired {
            return Err(self.closed_error());
        }
        Ok(())
    }

    pub fn retire(&mut self) {
        self.retired = true;
    }

    /// Opens this rank's standby store (once per communicator).
    fn open_store(&mut self) -> Result<StoreServer> {
        let l = self.listener.take().ok_or_else(|| {
            self.fail("this communicator already coordinated a membership change")
        })?;
        Ok(StoreServer::serve_on_tls(l, self.tls.clone())?)
    }

    fn fail(&self, detail: impl Into<String>) -> CollectiveError {
        CollectiveError::Membership {
            epoch: self.membership.epoch + 1,
            detail: detail.into(),
        }
    }
}

impl Communicator {
    /// Number of membership changes since the first communicator (see [`Membership`]).
    pub fn epoch(&self) -> u64 {
        self.seat().membership.epoch
    }

    /// How this communicator was formed from the previous one.
    pub fn membership(&self) -> &Membership {
        &self.seat().membership
    }

    /// Where newcomers connect to join at the next [`grow`](Self::grow):
    /// rank 0's standby store (the same on every rank).
    pub fn grow_address(&self) -> SocketAddr {
        self.seat().addrs[0]
    }

    /// A builder for a process that joins an existing communicator at its next
    /// [`grow`](Self::grow): set its domain, host id and options, then
    /// [`CommunicatorBuilder::join`].
    pub fn joiner() -> CommunicatorBuilder {
        CommunicatorBuilder::new(0, 1)
    }

    /// After an operation failed because peers died: every survivor calls this
    /// and gets a communicator of the survivors (dense new ranks in old-rank
    /// order, epoch + 1). `self` is retired whatever the outcome. See the
    /// module docs of `membership` for the protocol and its limits.
    pub fn shrink(&mut self) -> Result<Communicator> {
        self.seat().usable()?;
        let out = shrink::shrink(self);
        self.retire();
        out
    }

    /// Every member calls this with the same `joiners`; it waits (up to the
    /// rendezvous timeout) until that many processes have called
    /// [`CommunicatorBuilder::join`] and returns the grown communicator:
    /// members keep their ranks, joiners follow. `self` is retired.
    pub fn grow(&mut self, joiners: usize) -> Result<Communicator> {
        self.seat().usable()?;
        let out = grow::grow(self, joiners);
        self.retire();
        out
    }
}

type Tls = std::sync::Arc<crate::transport::tls_config::TlsContext>;

fn point_at(id: &mut Identity, store: SocketAddr) {
    id.master_addr = store.ip().to_string();
    id.master_port = store.port();
}
/// Connection attempt to a rank's listener (refused at once when it is gone).
const PROBE_WAIT: Duration = Duration::from_secs(1);
/// The standby store of `addr`, once its owner has opened it; `None` when the
/// process is gone or does not open it within `timeout`.
fn reach(addr: SocketAddr, timeout: Duration, tls: Option<&Tls>) -> Option<StoreClient> {
    let mut c =
        StoreClient::connect_once_tls(addr, timeout.min(PROBE_WAIT * 2), tls, timeout).ok()?;
    c.get("open", timeout).ok()?;
    Some(c)
}

/// Whether a process still listens at `addr` (a connection is accepted).
fn listening(addr: SocketAddr) -> bool {
    StoreClient::connect_once(addr, PROBE_WAIT).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_closed_port_is_no_store_and_an_open_one_is_reached() {
        let gone = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = gone.local_addr().expect("addr");
        drop(gone);
        let t = Instant::now();
        assert!(reach(addr, Duration::from_secs(5), None).is_none());
        assert!(!listening(addr));
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        assert!(listening(addr), "a bound, unserved listener still accepts");
        let server = StoreServer::serve_on(l).expect("serve");
        StoreClient::connect(server.addr(), Duration::from_secs(5))
            .and_then(|mut c| c.set("open", b"1"))
            .expect("open");
        assert!(reach(addr, Duration::from_secs(5), None).is_some());
    }
}
