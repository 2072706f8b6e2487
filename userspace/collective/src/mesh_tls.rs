//! The TLS side of the mesh's connection set-up (see [`crate::mesh`]).
//!
//! Dialing: the handshake checks the peer's chain and that its certificate
//! names the domain and host the rendezvous gave that rank, then the hello
//! goes out encrypted. Accepting: a connection that opens with a TLS record
//! is handshaken (our CA must have issued its certificate) before its hello
//! is read; once the hello names the rank, its certificate must name that
//! rank's domain and host. A plaintext connection to a link that requires
//! TLS is dropped after its hello, before any data frame.

use std::net::TcpStream;
use std::time::Duration;

use crate::error::{CollectiveError, Rank, Result};
use crate::mesh::{read_hello, tcp_transport};
use crate::pool::BufferPool;
use crate::rendezvous::Joined;
use crate::transport::tls::{self, TlsTransport};
use crate::transport::tls_config::{peer_name, TlsContext};
use crate::transport::Transport;
use crate::wire::Hello;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

fn describe(j: &Joined, q: Rank) -> String {
    format!("rank {q} at {}", j.addrs[q])
}

/// Client handshake with rank `q` over the connected `s`.
pub(crate) fn dial(ctx: &TlsContext, j: &Joined, q: Rank, s: &TcpStream) -> Result<TlsTransport> {
    let name = peer_name(&j.domains[q], &j.host_ids[q])?;
    let io = |e| CollectiveError::io(format!("socket to rank {q}"), e);
    let s = s.try_clone().map_err(io)?;
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).map_err(io)?;
    Ok(tls::connect(ctx, s, name, describe(j, q))?)
}

/// The hello of an accepted connection, through TLS when the peer starts
/// it (and this rank has an identity). `None`: refused or not a peer.
pub(crate) fn hello(
    tls: Option<&TlsContext>,
    stream: &TcpStream,
    pool: &BufferPool,
) -> Option<(Option<TlsTransport>, Hello)> {
    match (tls, tls::starts_tls(stream)) {
        (Some(ctx), Ok(Some(true))) => {
            let from = match stream.peer_addr() {
                Ok(a) => format!("connection from {a}"),
                Err(_) => "connection".into(),
            };
            let mut t = match tls::accept(ctx, stream.try_clone().ok()?, from) {
                Ok(t) => t,
                Err(e) => {
                    tracing::warn!(%e, "refused a connection");
                    return None;
                }
            };
            let h = read_hello(&mut t, pool)?;
            Some((Some(t), h))
        }
        (_, Ok(Some(false))) => {
            let mut s = stream;
            read_hello(&mut s, pool).map(|h| (None, h))
        }
        _ => None,
    }
}

/// Whether the connection whose hello says it is rank `q` may join: its
/// certificate must name `q`'s domain and host (a typed error naming the
/// peer otherwise); without TLS, only where the link does not require it.
pub(crate) fn admit(
    j: &Joined,
    me: Rank,
    q: Rank,
    secured: &mut Option<TlsTransport>,
    required: bool,
) -> Result<bool> {
    match secured {
        Some(t) => {
            t.set_peer(describe(j, q));
            t.check_peer(&j.domains[q], &j.host_ids[q])?;
            Ok(true)
        }
        None if required => {
            tracing::warn!(
                rank = me,
                peer = q,
                "refused a plaintext connection claiming rank {q}: this link requires TLS"
            );
            Ok(false)
        }
        None => Ok(true),
    }
}

/// The transport of an admitted connection.
pub(crate) fn transport(
    secured: Option<TlsTransport>,
    stream: TcpStream,
    q: Rank,
) -> Result<Box<dyn Transport>, CollectiveError> {
    match secured {
        Some(t) => Ok(Box::new(t)),
        None => tcp_transport(stream, q),
    }
}
