//! Shrink: the survivors find the coordinator, which decides who stays.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{listening, point_at, reach, Membership, PROBE_WAIT};
use crate::comm::Communicator;
use crate::error::{CollectiveError, Rank, Result, StoreError};
use crate::store::StoreClient;

/// How long after the operation timeout the coordinator still waits for a
/// survivor that listens but has not registered.
const AGREE_SLACK: Duration = Duration::from_secs(2);
pub(super) fn shrink(comm: &mut Communicator) -> Result<Communicator> {
    let t0 = Instant::now();
    let seat = comm.seat();
    let (me, world, epoch) = (seat.id.rank, seat.id.world, seat.membership.epoch + 1);
    let timeout = seat.opts.timeout;
    let addrs = seat.addrs.clone();
    let mut lost: Vec<Rank> = Vec::new();
    let mut coordinator = None;
    for (c, a) in addrs.iter().enumerate().take(me) {
        match reach(*a, timeout, seat.tls.as_ref()) {
            Some(store) => {
                coordinator = Some((c, store, None));
                break;
            }
            None => lost.push(c),
        }
    }
    let (coord, mut store, server) = match coordinator {
        Some(found) => found,
        None => {
            let server = comm.seat_mut().open_store()?;
            let tls = comm.seat().tls.clone();
            let mut store = StoreClient::connect_tls(server.addr(), timeout, tls.as_ref())?;
            store.set("open", epoch.to_string().as_bytes())?;
            (me, store, Some(server))
        }
    };
    store.set(&format!("alive/{me}"), b"")?;
    let list = |v: &[Rank]| {
        v.iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    if coord == me {
        let (members, lost) = decide(&mut store, me, &addrs, lost, timeout)?;
        store.set(
            "members",
            format!("{}|{}", list(&members), list(&lost)).as_bytes(),
        )?;
    }
    // The coordinator's verdict takes at most its probes plus `timeout + 2 s`.
    let verdict = timeout + AGREE_SLACK + PROBE_WAIT * world as u32;
    let rec = String::from_utf8_lossy(&store.get("members", verdict)?).into_owned();
    let seat = comm.seat();
    let (members, lost) =
        parse_members(&rec).ok_or_else(|| seat.fail(format!("bad members record {rec:?}")))?;
    let Some(rank) = members.iter().position(|&m| m == me) else {
        return Err(CollectiveError::Excluded {
            rank: me,
            epoch,
            members,
        });
    };
    let mut id = seat.id.clone();
    id.rank = rank;
    id.world = members.len();
    point_at(&mut id, addrs[coord]);
    let mut next = Communicator::start(id, seat.opts.clone(), false)?;
    let s = next.seat_mut();
    s.server = server;
    s.membership = Membership {
        epoch,
        previous: members.iter().map(|&m| Some(m)).collect(),
        lost,
    };
    next.note_epoch();
    tracing::info!(epoch, world, new_world = members.len(), took = ?t0.elapsed(), "shrunk");
    Ok(next)
}

/// The coordinator's verdict: every rank below it is lost (it could not reach
/// them); a higher rank is a member once it registers, lost if its port
/// refuses or it stays silent until `timeout + 2 s`.
fn decide(
    store: &mut StoreClient,
    me: Rank,
    addrs: &[SocketAddr],
    mut lost: Vec<Rank>,
    timeout: Duration,
) -> Result<(Vec<Rank>, Vec<Rank>)> {
    let until = Instant::now() + timeout + AGREE_SLACK;
    let mut members = vec![me];
    let mut pending: Vec<Rank> = Vec::new();
    for (q, a) in addrs.iter().enumerate().skip(me + 1) {
        if listening(*a) {
            pending.push(q);
        } else {
            lost.push(q);
        }
    }
    while !pending.is_empty() {
        let mut still = Vec::new();
        for q in pending {
            match store.get(&format!("alive/{q}"), Duration::from_millis(20)) {
                Ok(_) => members.push(q),
                Err(StoreError::Timeout { .. }) => still.push(q),
                Err(e) => return Err(e.into()),
            }
        }
        pending = still;
        if Instant::now() >= until {
            lost.append(&mut pending);
        }
    }
    members.sort_unstable();
    lost.sort_unstable();
    Ok((members, lost))
}

fn parse_members(s: &str) -> Option<(Vec<Rank>, Vec<Rank>)> {
    let ranks = |p: &str| -> Option<Vec<Rank>> {
        p.split(',')
            .filter(|x| !x.is_empty())
            .map(|x| x.parse().ok())
            .collect()
    };
    let (m, l) = s.split_once('|')?;
    Some((ranks(m)?, ranks(l)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_record_round_trips() {
        assert_eq!(parse_members("0,2,3|1"), Some((vec![0, 2, 3], vec![1])));
        assert_eq!(parse_members("1|"), Some((vec![1], vec![])));
        assert_eq!(parse_members("1,x|"), None);
        assert_eq!(parse_members("no bar"), None);
    }
}
