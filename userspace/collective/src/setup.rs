//! Set-up failures reach every rank: a rank that fails during rendezvous or
//! connection set-up publishes why under [`SETUP_ERROR`] in the bootstrap store
//! (the first report stays), and every rank watches that key while it waits,
//! failing with the report instead of waiting for its own deadline. A rank
//! that dies after registering leaves the same report through its store will
//! ([`StoreClient::set_on_close`]).

use std::time::Duration;

use crate::error::{CollectiveError, Rank, Result, StoreError};
use crate::store::{StoreClient, StoreServer};

/// The key of the first set-up failure: `REPORTER PEERS\nCAUSE`, PEERS a
/// comma-separated list or `-`.
pub(crate) const SETUP_ERROR: &str = "setup-error";
const CLAIM: &str = "setup-error-claim";

pub(crate) fn encode(reporter: Rank, peers: &[Rank], cause: &str) -> String {
    let peers = if peers.is_empty() {
        "-".to_string()
    } else {
        peers
            .iter()
            .map(Rank::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    format!("{reporter} {peers}\n{cause}")
}

pub(crate) fn decode(s: &str) -> CollectiveError {
    let parsed = s.split_once('\n').and_then(|(head, cause)| {
        let (reporter, peers) = head.split_once(' ')?;
        let peers = match peers {
            "-" => Vec::new(),
            p => p
                .split(',')
                .map(str::parse)
                .collect::<std::result::Result<_, _>>()
                .ok()?,
        };
        Some(CollectiveError::SetupFailed {
            reporter: reporter.parse().ok()?,
            peers,
            cause: cause.to_string(),
        })
    });
    parsed.unwrap_or_else(|| CollectiveError::Rendezvous(format!("another rank failed: {s}")))
}

/// Leaves this rank's will: if it dies before [`done`], every rank learns it.
pub(crate) fn will(store: &mut StoreClient, me: Rank) -> Result<()> {
    let cause = "its connection to the bootstrap store closed during set-up \
                 (the process exited or was killed)";
    Ok(store.set_on_close(SETUP_ERROR, encode(me, &[], cause).as_bytes())?)
}

/// Set-up succeeded on this rank: revoke the will.
pub(crate) fn done(store: &mut StoreClient) -> Result<()> {
    Ok(store.clear_on_close()?)
}

/// Fails when a rank has reported a set-up failure (or the store is gone).
pub(crate) fn check(store: &mut StoreClient) -> Result<()> {
    match store.get(SETUP_ERROR, Duration::ZERO) {
        Ok(v) => Err(decode(&String::from_utf8_lossy(&v))),
        Err(StoreError::Timeout { .. }) => Ok(()),
        Err(e) => Err(CollectiveError::SetupFailed {
            reporter: 0,
            peers: Vec::new(),
            cause: format!("lost the bootstrap store rank 0 serves: {e}"),
        }),
    }
}

/// A rank whose own configuration is refused before it could join (a bad
/// `CAUSEWAY_*` value) still tells the others, when it knows its rank and
/// the store: otherwise they would wait for their deadline and only learn
/// that it never came. Rank 0 serves the store and cannot. Best effort, over
/// mutual TLS when `CAUSEWAY_TLS*` configure it.
pub(crate) fn report_unstarted(e: &CollectiveError) {
    let num = |n: &str| {
        std::env::var(n)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    let (Some(rank), Some(port), Ok(host)) = (
        num("RANK"),
        num("MASTER_PORT"),
        std::env::var("MASTER_ADDR"),
    ) else {
        return;
    };
    let (Ok(rank), Ok(port)) = (Rank::try_from(rank), u16::try_from(port)) else {
        return;
    };
    if rank == 0 {
        return;
    }
    let Ok(addr) = crate::rendezvous::resolve(&host, port) else {
        return;
    };
    // Over TLS when this rank's TLS settings load (the store refuses
    // plaintext then); when they are what was refused, there is no way in.
    let tls = match crate::transport::tls_config::TlsSettings::from_env().map(|s| s.load()) {
        Ok(Ok(tls)) => tls,
        _ => return,
    };
    if let Ok(mut store) = StoreClient::connect_tls(addr, Duration::from_secs(5), tls.as_ref()) {
        give_up(&mut store, rank, 0, None, e);
    }
}

/// Errors every rank finds by itself from the same registrations: nothing to report.
fn found_by_all(e: &CollectiveError) -> bool {
    matches!(
        e,
        CollectiveError::DomainUnset { .. }
            | CollectiveError::DomainConflict { .. }
            | CollectiveError::ConfigMismatch { .. }
            | CollectiveError::DuplicateRank { .. }
            | CollectiveError::Inconsistent { .. }
    )
}

/// This rank gives up on set-up with `e`: reports it (unless every rank finds
/// it alone, or it is another rank's report), revokes the will, and when this
/// rank serves the store, keeps it up until `world` clients have come and all
/// others have gone, or [`LINGER`] passed. Best effort: the store may be gone.
pub(crate) fn give_up(
    store: &mut StoreClient,
    me: Rank,
    world: usize,
    server: Option<&StoreServer>,
    e: &CollectiveError,
) {
    let own = match e {
        CollectiveError::SetupFailed { reporter, .. } => *reporter == me,
        _ => !found_by_all(e),
    };
    if own {
        let peers = match e {
            CollectiveError::SetupFailed { peers, .. } => peers.clone(),
            CollectiveError::RendezvousTimeout { missing, .. } => missing.clone(),
            _ => e.peer().into_iter().collect(),
        };
        let cause = match e {
            CollectiveError::SetupFailed { cause, .. } => cause.clone(),
            _ => e.to_string(),
        };
        if store.add(CLAIM, 1).is_ok_and(|n| n == 1) {
            let _ = store.set(SETUP_ERROR, encode(me, &peers, &cause).as_bytes());
        }
    }
    let _ = store.clear_on_close();
    if let Some(server) = server {
        // This rank's own connection stays open.
        server.linger(world, 1, crate::store::LINGER);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_round_trip() {
        let e = decode(&encode(2, &[1, 3], "connect refused\nsecond line"));
        assert!(
            matches!(&e, CollectiveError::SetupFailed { reporter: 2, peers, cause }
                if peers == &[1, 3] && cause == "connect refused\nsecond line"),
            "{e}"
        );
        assert_eq!(e.peer(), Some(1));
        let gone = decode(&encode(4, &[], "left"));
        assert_eq!(gone.peer(), Some(4));
        assert!(matches!(decode("garbage"), CollectiveError::Rendezvous(_)));
    }
}
