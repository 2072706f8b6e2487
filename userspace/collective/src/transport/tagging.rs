//! Marks the library's sockets for the kernel: a DSCP (`IP_TOS` /
//! `IPV6_TCLASS`) and an `SO_PRIORITY` per kind of connection, and listeners
//! on a known port range (`CAUSEWAY_PORT_BASE`, `CAUSEWAY_PORT_COUNT`), so a
//! Causeway policy classifies gradient, latency and control traffic by port
//! and DSCP. The values live in [`causeway_core::traffic`], which
//! `causeway policy example` renders into the matching rules.
//!
//! Where each kind is set: the dialing side after the connect, before the
//! first frame (the handshake itself is sent untagged and is classified by
//! port alone); the accepting side right after the peer's hello names the
//! connection (accepted sockets start with the listener's DSCP, control,
//! which the SYN-ACK carries, but priority 0); the bootstrap store on both
//! of its ends.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener};

use socket2::SockRef;

pub use causeway_core::traffic::{ListenPorts, TrafficKind};

use crate::wire::ConnRole;

/// Sets `kind`'s DSCP and priority on a socket (connected, or a listener
/// whose accepted sockets inherit both).
pub fn tag<'a>(socket: impl Into<SockRef<'a>>, kind: TrafficKind) -> io::Result<()> {
    let s: SockRef<'a> = socket.into();
    let v6 = s.local_addr()?.as_socket().is_some_and(|a| a.is_ipv6());
    if v6 {
        s.set_tclass_v6(u32::from(kind.tos()))?;
    } else {
        s.set_tos_v4(u32::from(kind.tos()))?;
    }
    // After the TOS: setting IP_TOS also rewrites sk_priority (rt_tos2priority).
    s.set_priority(kind.priority())
}

/// The kind of a mesh connection: its role in the hello, and whether it is
/// the latency connection across domains.
pub fn kind_of(role: ConnRole, latency: bool) -> TrafficKind {
    match (role, latency) {
        (ConnRole::TcpControl | ConnRole::RdmaControl, _) => TrafficKind::Control,
        (ConnRole::TcpData, true) => TrafficKind::Latency,
        (ConnRole::TcpData, false) => TrafficKind::Bulk,
    }
}

/// Binds the first free port of `ports` on `ip` with `bind` (e.g.
/// [`super::tcp::listen`] with its tuning) and tags the listener as control.
/// Every port taken is `AddrInUse` naming the range.
pub fn listen_in(
    ip: IpAddr,
    ports: ListenPorts,
    bind: impl Fn(SocketAddr) -> io::Result<TcpListener>,
) -> io::Result<TcpListener> {
    for port in ports.candidates() {
        match bind(SocketAddr::new(ip, port)) {
            Ok(l) => {
                tag(&l, TrafficKind::Control)?;
                return Ok(l);
            }
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && port != 0 => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!(
            "every port of {}-{} is taken on {ip} (CAUSEWAY_PORT_BASE, CAUSEWAY_PORT_COUNT)",
            ports.base,
            ports.last().unwrap_or(0)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use std::net::TcpStream;

    use super::*;
    use crate::transport::tcp::{self, TcpTuning};

    const NO_TUNING: TcpTuning = TcpTuning {
        socket_buffer: None,
    };

    fn read_back(s: &TcpStream) -> (u32, u32) {
        let s = SockRef::from(s);
        let v6 = s.local_addr().unwrap().as_socket().unwrap().is_ipv6();
        let tos = if v6 { s.tclass_v6() } else { s.tos_v4() };
        (tos.expect("tos"), s.priority().expect("priority"))
    }

    #[test]
    fn each_kind_sets_its_dscp_and_priority() {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        for kind in TrafficKind::ALL {
            let s = TcpStream::connect(l.local_addr().unwrap()).expect("connect");
            tag(&s, kind).expect("tag");
            assert_eq!(read_back(&s), (u32::from(kind.tos()), kind.priority()));
        }
        assert_eq!(kind_of(ConnRole::TcpControl, true), TrafficKind::Control);
        assert_eq!(kind_of(ConnRole::TcpData, true), TrafficKind::Latency);
        assert_eq!(kind_of(ConnRole::TcpData, false), TrafficKind::Bulk);
    }

    #[test]
    fn ipv6_sockets_get_the_traffic_class() {
        let Ok(l) = TcpListener::bind("[::1]:0") else {
            eprintln!("no IPv6 loopback here: skipped");
            return;
        };
        let s = TcpStream::connect(l.local_addr().unwrap()).expect("connect");
        tag(&s, TrafficKind::Latency).expect("tag");
        let k = TrafficKind::Latency;
        assert_eq!(read_back(&s), (u32::from(k.tos()), k.priority()));
    }

    #[test]
    fn accepted_sockets_inherit_the_listeners_tag_and_the_range_is_used_in_order() {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        // A range of its own: a free port found by the kernel, and the next.
        let probe = TcpListener::bind("127.0.0.1:0").expect("bind");
        let base = probe.local_addr().unwrap().port();
        drop(probe);
        let ports = ListenPorts::new(base, 2).expect("range");
        let Ok(first) = listen_in(ip, ports, |a| tcp::listen(a, NO_TUNING)) else {
            eprintln!("port {base} was taken again meanwhile: skipped");
            return;
        };
        assert_eq!(first.local_addr().unwrap().port(), base);
        let c = TcpStream::connect(first.local_addr().unwrap()).expect("connect");
        let (accepted, _) = first.accept().expect("accept");
        // The TOS is inherited (the SYN-ACK carries it), the priority is not.
        let control = TrafficKind::Control;
        assert_eq!(read_back(&accepted).0, u32::from(control.tos()));
        tag(&accepted, control).expect("tag");
        assert_eq!(
            read_back(&accepted),
            (u32::from(control.tos()), control.priority())
        );
        drop((c, accepted));
        if let Ok(second) = listen_in(ip, ports, |a| tcp::listen(a, NO_TUNING)) {
            assert_eq!(second.local_addr().unwrap().port(), base + 1);
            let e = listen_in(ip, ports, |a| tcp::listen(a, NO_TUNING)).expect_err("full");
            assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
            assert!(
                e.to_string().contains(&format!("{base}-{}", base + 1)),
                "{e}"
            );
        }
        // Port 0: the kernel picks.
        let any = ListenPorts::new(0, 0).unwrap();
        assert!(listen_in(ip, any, |a| tcp::listen(a, NO_TUNING)).is_ok());
    }
}
