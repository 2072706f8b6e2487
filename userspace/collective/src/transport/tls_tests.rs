use std::net::{SocketAddr, TcpListener};
use std::thread;

use causeway_test_support::tamper::forward;

use time::{Duration, OffsetDateTime};

use super::*;
use crate::transport::tls_config::{peer_name, TlsFiles, TlsMode};

use crate::test_pki as pki;

fn context(
    dir: &std::path::Path,
    tag: &str,
    id: &(String, String),
    trusted: &[&pki::Ca],
) -> TlsContext {
    let [cert, key, ca] = pki::files(dir, tag, id, trusted);
    TlsContext::load(TlsMode::All, &TlsFiles { cert, key, ca }).expect("load")
}

/// A listener and a thread that accepts one connection with `server`.
fn serve(
    server: TlsContext,
) -> (
    SocketAddr,
    thread::JoinHandle<Result<TlsTransport, TlsError>>,
) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let h = thread::spawn(move || {
        let (s, _) = l.accept().expect("accept");
        accept(&server, s, "client".into())
    });
    (addr, h)
}

fn dial(
    client: &TlsContext,
    addr: SocketAddr,
    domain: &str,
    host: &str,
) -> Result<TlsTransport, TlsError> {
    let s = TcpStream::connect(addr).expect("connect");
    connect(
        client,
        s,
        peer_name(domain, host).expect("name"),
        "server".into(),
    )
}

#[test]
fn a_split_connection_carries_large_writes_both_ways_bit_identical() {
    let d = pki::dir("unit-ok");
    let ca = pki::Ca::new("dc1");
    let srv = context(&d, "a", &ca.issue("a"), &[&ca]);
    let cli = context(&d, "b", &ca.issue("b"), &[&ca]);
    let (addr, h) = serve(srv);
    let c = dial(&cli, addr, "dc1", "a").expect("client handshake");
    let s = h.join().expect("thread").expect("server handshake");
    s.check_peer("dc1", "b").expect("names dc1/b");
    let e = s.check_peer("dc2", "b").expect_err("not dc2");
    assert!(
        matches!(&e, TlsError::WrongIdentity { peer, .. } if peer == "client"),
        "{e}"
    );
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
    let (mut cr, mut cw, _cc) = Box::new(c).split().expect("split");
    let (mut sr, mut sw, _sc) = Box::new(s).split().expect("split");
    let d2 = data.clone();
    let echo = thread::spawn(move || {
        let mut got = vec![0u8; d2.len()];
        sr.read_exact(&mut got).expect("server read");
        sw.write_all(&got).expect("server write");
        sw.flush().expect("flush");
        got == d2
    });
    let d3 = data.clone();
    let send = thread::spawn(move || {
        cw.write_all(&d3).expect("client write");
        cw.flush().expect("flush");
    });
    let mut back = vec![0u8; data.len()];
    cr.read_exact(&mut back).expect("client read");
    send.join().expect("sender");
    assert!(echo.join().expect("echo"), "server got other bytes");
    assert!(back == data, "echo differs");
}

fn handshake_failure(e: &TlsError) -> &rustls::Error {
    match e {
        TlsError::Handshake { source, .. } => source,
        e => panic!("not a handshake error: {e}"),
    }
}

#[test]
fn another_ca_an_expired_certificate_and_the_wrong_name_are_refused() {
    let d = pki::dir("unit-refused");
    let (dc1, dc2) = (pki::Ca::new("dc1"), pki::Ca::new("dc2"));
    let srv = || context(&d, "srv", &dc1.issue("a"), &[&dc1, &dc2]);
    // A client certificate from a CA the server does not trust (one that
    // even copies dc1's CA name: its signature gives it away).
    let rogue = pki::Ca::new("dc1");
    let (addr, h) = serve(srv());
    let cli = context(&d, "rogue", &rogue.issue("b"), &[&dc1]);
    let _ = dial(&cli, addr, "dc1", "a");
    let e = h.join().expect("thread").expect_err("refused");
    assert!(
        matches!(
            handshake_failure(&e),
            rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer | rustls::CertificateError::BadSignature
            )
        ),
        "{e}"
    );
    // An expired client certificate.
    let old = dc1.issue_name(
        "b.dc1.causeway",
        OffsetDateTime::now_utc() - Duration::days(1),
    );
    let (addr, h) = serve(srv());
    let cli = context(&d, "old", &old, &[&dc1]);
    let _ = dial(&cli, addr, "dc1", "a");
    let e = h.join().expect("thread").expect_err("refused");
    assert!(
        matches!(
            handshake_failure(&e),
            rustls::Error::InvalidCertificate(
                rustls::CertificateError::Expired | rustls::CertificateError::ExpiredContext { .. }
            )
        ),
        "{e}"
    );
    // The dialer expects rank a of dc2; the server's certificate names dc1.
    let (addr, h) = serve(srv());
    let cli = context(&d, "b", &dc2.issue("b"), &[&dc1, &dc2]);
    let e = dial(&cli, addr, "dc2", "a").expect_err("wrong name");
    assert!(
        matches!(&e, TlsError::Handshake { peer, source: rustls::Error::InvalidCertificate(_) } if peer == "server"),
        "{e}"
    );
    let _ = h.join();
    // dc2's CA cannot vouch for a dc1 host: its name constraint forbids it.
    let forged = dc2.issue_name(
        "b.dc1.causeway",
        OffsetDateTime::now_utc() + Duration::days(1),
    );
    let (addr, h) = serve(srv());
    let cli = context(&d, "forged", &forged, &[&dc1, &dc2]);
    let _ = dial(&cli, addr, "dc1", "a");
    let e = h.join().expect("thread").expect_err("refused");
    assert!(
        matches!(handshake_failure(&e), rustls::Error::InvalidCertificate(_)),
        "{e}"
    );
}

#[test]
fn a_plaintext_client_is_told_apart_and_refused() {
    let d = pki::dir("unit-plain");
    let ca = pki::Ca::new("dc1");
    let (addr, h) = serve(context(&d, "a", &ca.issue("a"), &[&ca]));
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(b"CWCL hello in plaintext").expect("write");
    let e = h.join().expect("thread").expect_err("refused");
    assert!(matches!(e, TlsError::Handshake { .. }), "{e}");
    // The mesh peeks first: a hello frame starts with 'C', a TLS record with 0x16.
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
    let (a, _) = l.accept().expect("accept");
    c.write_all(b"CWCL").expect("write");
    assert_eq!(starts_tls(&a).expect("peek"), Some(false));
    drop(c);
    let mut rest = Vec::new();
    let _ = (&a).read_to_end(&mut rest);
    assert_eq!(starts_tls(&a).expect("peek"), None);
}

#[test]
fn tampered_ciphertext_closes_the_connection_with_a_record_error_naming_the_peer() {
    let d = pki::dir("unit-tamper");
    let ca = pki::Ca::new("dc1");
    let (addr, h) = serve(context(&d, "a", &ca.issue("a"), &[&ca]));
    // A proxy between client and server that flips one byte well past the
    // handshake (client to server: a few KiB).
    let proxy = TcpListener::bind("127.0.0.1:0").expect("bind");
    let paddr = proxy.local_addr().expect("addr");
    thread::spawn(move || {
        let (c, _) = proxy.accept().expect("accept");
        let s = TcpStream::connect(addr).expect("connect");
        let (c2, s2) = (c.try_clone().expect("clone"), s.try_clone().expect("clone"));
        thread::spawn(move || forward(s2, c2, None));
        forward(c, s, Some(40_000));
    });
    let cli = context(&d, "b", &ca.issue("b"), &[&ca]);
    let c = dial(&cli, paddr, "dc1", "a").expect("client handshake");
    let mut s = h.join().expect("thread").expect("server handshake");
    s.set_peer("rank 1 at test".into());
    let (_cr, mut cw, _cc) = Box::new(c).split().expect("split");
    let writer = thread::spawn(move || {
        let _ = cw.write_all(&vec![7u8; 200_000]);
        let _ = cw.flush();
    });
    let (mut sr, _sw, _sc) = Box::new(s).split().expect("split");
    let mut got = vec![0u8; 200_000];
    let e = sr.read_exact(&mut got).expect_err("tampered");
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<TlsError>());
    assert!(
        matches!(inner, Some(TlsError::Record { peer, .. }) if peer == "rank 1 at test"),
        "{e}"
    );
    let _ = writer.join();
}
