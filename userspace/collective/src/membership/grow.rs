//! Grow: newcomers take tickets at rank 0's standby store; the members admit them.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{point_at, reach, Membership};
use crate::builder::CommunicatorBuilder;
use crate::comm::Communicator;
use crate::error::{CollectiveError, Result};
use crate::store::StoreClient;

impl CommunicatorBuilder {
    /// Joins the communicator whose [`Communicator::grow_address`] is `addr`
    /// when its members call [`Communicator::grow`]. The rank and world given
    /// to the builder are ignored: they are assigned.
    pub fn join(self, addr: SocketAddr) -> Result<Communicator> {
        let (mut id, opts) = self.into_parts();
        let deadline = Instant::now() + opts.rendezvous_timeout;
        let left = || deadline.saturating_duration_since(Instant::now());
        let fail = |detail: String| CollectiveError::Membership { epoch: 0, detail };
        let tls = opts.tls.load()?;
        let mut store = StoreClient::connect_once_tls(addr, left(), tls.as_ref(), left())?;
        store.get("open", left())?;
        let ticket = store.add("join/ticket", 1)? - 1;
        let grown = String::from_utf8_lossy(&store.get("grown", left())?).into_owned();
        let (epoch, world, admitted) =
            parse_grown(&grown).ok_or_else(|| fail(format!("bad grow record {grown:?}")))?;
        if ticket < 0 || ticket as usize >= admitted {
            return Err(fail(format!(
                "joiner {ticket} was not admitted (the members admitted {admitted})"
            )));
        }
        id.rank = world - admitted + ticket as usize;
        id.world = world;
        point_at(&mut id, addr);
        let mut comm = Communicator::start(id, opts, false)?;
        comm.seat_mut().membership = Membership {
            epoch,
            previous: (0..world)
                .map(|r| (r < world - admitted).then_some(r))
                .collect(),
            lost: Vec::new(),
        };
        comm.note_epoch();
        Ok(comm)
    }
}

fn parse_grown(s: &str) -> Option<(u64, usize, usize)> {
    let mut it = s.split(' ').map(str::parse::<u64>);
    let (e, w, k) = (it.next()?.ok()?, it.next()?.ok()?, it.next()?.ok()?);
    Some((e, w as usize, k as usize))
}
pub(super) fn grow(comm: &mut Communicator, joiners: usize) -> Result<Communicator> {
    let t0 = Instant::now();
    let seat = comm.seat();
    let (me, world, epoch) = (seat.id.rank, seat.id.world, seat.membership.epoch + 1);
    let (timeout, deadline) = (seat.opts.timeout, t0 + seat.opts.rendezvous_timeout);
    let left = || deadline.saturating_duration_since(Instant::now());
    let addr = seat.addrs[0];
    let (mut store, server) = if me == 0 {
        let server = comm.seat_mut().open_store()?;
        let tls = comm.seat().tls.clone();
        let mut store = StoreClient::connect_tls(server.addr(), timeout, tls.as_ref())?;
        store.set("open", epoch.to_string().as_bytes())?;
        while (store.add("join/ticket", 0)? as usize) < joiners {
            if Instant::now() >= deadline {
                let n = store.add("join/ticket", 0)?;
                return Err(comm.seat().fail(format!(
                    "{n} of {joiners} joiners arrived within {:?}",
                    comm.seat().opts.rendezvous_timeout
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        store.set(
            "grown",
            format!("{epoch} {} {joiners}", world + joiners).as_bytes(),
        )?;
        (store, Some(server))
    } else {
        let store = reach(addr, left(), seat.tls.as_ref())
            .ok_or_else(|| seat.fail("rank 0 did not open its store"))?;
        (store, None)
    };
    let rec = String::from_utf8_lossy(&store.get("grown", left())?).into_owned();
    let seat = comm.seat();
    let (_, new_world, _) =
        parse_grown(&rec).ok_or_else(|| seat.fail(format!("bad grow record {rec:?}")))?;
    let mut id = seat.id.clone();
    id.world = new_world;
    point_at(&mut id, addr);
    let mut next = Communicator::start(id, seat.opts.clone(), false)?;
    let s = next.seat_mut();
    s.server = server;
    s.membership = Membership {
        epoch,
        previous: (0..new_world).map(|r| (r < world).then_some(r)).collect(),
        lost: Vec::new(),
    };
    next.note_epoch();
    tracing::info!(epoch, world, new_world, took = ?t0.elapsed(), "grown");
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grow_record_parses() {
        assert_eq!(parse_grown("3 5 1"), Some((3, 5, 1)));
        assert_eq!(parse_grown("3 5"), None);
        assert_eq!(parse_grown("3 x 1"), None);
    }
}
