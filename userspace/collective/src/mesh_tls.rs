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
        Some(t) => secured_link(t),
        None => tcp_transport(stream, q),
    }
}

/// A TLS link once its hello is exchanged: its records go to the kernel
/// where `CAUSEWAY_KTLS` and the kernel allow (see [`TlsTransport::offload`]).
pub(crate) fn secured_link(mut t: TlsTransport) -> Result<Box<dyn Transport>, CollectiveError> {
    let layer = t.offload()?;
    tracing::debug!(link = %t.describe(), ?layer, "TLS link ready");
    Ok(Box::new(t))
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::{SocketAddr, TcpListener};
    use std::sync::Arc;

    use super::*;
    use crate::test_pki as pki;
    use crate::topology::Topology;
    use crate::transport::tls_config::{TlsFiles, TlsMode, TlsSettings};
    use crate::wire::{write_frame, ConnRole, FrameHeader, FrameKind};

    fn ctx(d: &std::path::Path, tag: &str, cas: &[&pki::Ca], host: &str) -> Arc<TlsContext> {
        let [cert, key, ca_path] = pki::files(d, tag, &cas[0].issue(host), cas);
        let files = TlsFiles {
            cert,
            key,
            ca: ca_path,
        };
        TlsSettings::new(TlsMode::Wan, files)
            .load()
            .expect("load")
            .expect("on")
    }

    /// Rank 0 (d0/h0) listening, rank 1 in d1/h1.
    fn joined(tls: Arc<TlsContext>) -> Joined {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("addr");
        let labels = [("d0", "h0"), ("d1", "h1")];
        Joined {
            session: 7,
            topology: Topology::from_labels(&labels),
            host_ids: vec!["h0".into(), "h1".into()],
            domains: vec!["d0".into(), "d1".into()],
            addrs: vec![addr, addr],
            rdma: vec![None, None],
            listener,
            paths: Vec::new(),
            tls: Some(tls),
            wan_bulk: Default::default(),
        }
    }

    fn hello_bytes() -> Vec<u8> {
        let h = Hello {
            session: 7,
            rank: 1,
            world: 2,
            index: 0,
            role: ConnRole::TcpData,
            shm: None,
        };
        let p = h.encode();
        let mut out = Vec::new();
        write_frame(
            &mut out,
            &FrameHeader::control(FrameKind::Hello, p.len() as u32),
            &p,
        )
        .expect("encode");
        out
    }

    #[test]
    fn a_plaintext_peer_on_a_tls_link_is_refused_before_its_data_is_read() {
        let d = pki::dir("mesh-plain");
        let ca = pki::Ca::new("d0");
        let j = joined(ctx(&d, "r0", &[&ca], "h0"));
        let mut c = TcpStream::connect(j.addrs[0]).expect("connect");
        c.write_all(&hello_bytes()).expect("hello");
        c.write_all(b"TENSOR BYTES").expect("data");
        let (s, _) = j.listener.accept().expect("accept");
        let pool = BufferPool::new(1);
        let (mut secured, h) = hello(j.tls.as_deref(), &s, &pool).expect("a hello");
        assert!(secured.is_none() && h.rank == 1);
        assert!(
            !admit(&j, 0, 1, &mut secured, true).expect("no error"),
            "admitted"
        );
        // What followed the hello is still unread in the socket.
        let mut b = [0u8; 12];
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(s.peek(&mut b).expect("peek"), 12);
        assert_eq!(&b, b"TENSOR BYTES");
    }

    #[test]
    fn a_tls_peer_whose_certificate_names_another_rank_is_a_typed_error() {
        let d = pki::dir("mesh-wrong");
        let (d0, d1) = (pki::Ca::new("d0"), pki::Ca::new("d1"));
        let j = joined(ctx(&d, "r0", &[&d0, &d1], "h0"));
        // Rank 1's certificate names h9, not h1 (the rendezvous' host of rank 1).
        let [cert, key, ca] = pki::files(&d, "r1", &d1.issue("h9"), &[&d0, &d1]);
        let files = TlsFiles { cert, key, ca };
        let client = TlsSettings::new(TlsMode::Wan, files)
            .load()
            .expect("load")
            .expect("on");
        let addr = j.addrs[0];
        let dialer = std::thread::spawn(move || {
            let s = TcpStream::connect(addr).expect("connect");
            let name = peer_name("d0", "h0").expect("name");
            let mut t = tls::connect(&client, s, name, "rank 0".into()).expect("handshake");
            t.write_all(&hello_bytes()).expect("hello");
            std::thread::sleep(Duration::from_millis(200));
        });
        let (s, _) = j.listener.accept().expect("accept");
        s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))
            .expect("timeout");
        let pool = BufferPool::new(1);
        let (mut secured, h) = hello(j.tls.as_deref(), &s, &pool).expect("a hello");
        assert!(secured.is_some() && h.rank == 1);
        let e = admit(&j, 0, 1, &mut secured, true).expect_err("wrong host");
        assert!(
            matches!(&e, CollectiveError::Tls(crate::error::TlsError::WrongIdentity { peer, expected })
                if peer.starts_with("rank 1 at") && expected == "h1.d1.causeway"),
            "{e}"
        );
        dialer.join().expect("dialer");
    }
}
