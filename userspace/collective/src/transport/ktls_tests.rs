//! kTLS selection on whatever kernel runs the tests: `auto` uses the kernel
//! when it has the `tls` module and rustls otherwise, `on` is a typed error
//! naming the peer where it cannot, `off` keeps rustls; data written before
//! the switch (the hello, and what follows it at once) is never lost, and
//! either record layer talks to the other.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::thread;

use super::*;
use crate::test_pki as pki;
use crate::transport::tls_config::{peer_name, KtlsMode, TlsFiles, TlsMode, TlsSettings};

fn context(d: &std::path::Path, tag: &str, ca: &pki::Ca, host: &str, ktls: KtlsMode) -> TlsContext {
    let [cert, key, ca_path] = pki::files(d, tag, &ca.issue(host), &[ca]);
    let mut c = TlsContext::load(
        TlsMode::All,
        &TlsFiles {
            cert,
            key,
            ca: ca_path,
        },
    )
    .expect("load");
    c.ktls = ktls;
    c
}

/// A connected pair (client, server) after the handshake.
fn pair(name: &str, client: KtlsMode, server: KtlsMode) -> (TlsTransport, TlsTransport) {
    let d = pki::dir(name);
    let ca = pki::Ca::new("dc1");
    let srv = context(&d, "s", &ca, "a", server);
    let cli = context(&d, "c", &ca, "b", client);
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let h = thread::spawn(move || {
        let (s, _) = l.accept().expect("accept");
        accept(&srv, s, "client".into()).expect("server handshake")
    });
    let s = TcpStream::connect(addr).expect("connect");
    let c = connect(
        &cli,
        s,
        peer_name("dc1", "a").expect("name"),
        "server".into(),
    )
    .expect("client handshake");
    (c, h.join().expect("server thread"))
}

fn expected(mode: KtlsMode) -> RecordLayer {
    match mode {
        KtlsMode::Off => RecordLayer::Userspace,
        _ if ktls::available() => RecordLayer::Kernel,
        _ => RecordLayer::Userspace,
    }
}

/// The hello and the first data right behind it, then the switch on both
/// ends, then 3 MB each way and a clean end of stream.
fn exchange(mut c: TlsTransport, mut s: TlsTransport, cm: KtlsMode, sm: KtlsMode) {
    c.write_all(b"hello").expect("hello");
    c.write_all(b"first data").expect("data behind the hello");
    let mut hello = [0u8; 5];
    s.read_exact(&mut hello).expect("read hello");
    assert_eq!(&hello, b"hello");
    assert_eq!(c.offload().expect("client offload"), expected(cm));
    assert_eq!(s.offload().expect("server offload"), expected(sm));
    assert_eq!(c.record_layer(), expected(cm));
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
    let (mut cr, mut cw, cc) = Box::new(c).split().expect("split");
    let (mut sr, mut sw, sc) = Box::new(s).split().expect("split");
    let d2 = data.clone();
    let server = thread::spawn(move || {
        let mut first = [0u8; 10];
        sr.read_exact(&mut first).expect("data behind the hello");
        assert_eq!(&first, b"first data");
        let mut got = vec![0u8; d2.len()];
        sr.read_exact(&mut got).expect("server read");
        sw.write_all(&got).expect("server write");
        sw.flush().expect("flush");
        sc.finish();
        let mut rest = Vec::new();
        sr.read_to_end(&mut rest)
            .expect("the client's end of stream");
        (got == d2, rest.is_empty())
    });
    cw.write_all(&data).expect("client write");
    cw.flush().expect("flush");
    let mut back = vec![0u8; data.len()];
    cr.read_exact(&mut back).expect("client read");
    let mut rest = Vec::new();
    cr.read_to_end(&mut rest)
        .expect("the server's close_notify is the end of stream");
    assert!(rest.is_empty());
    cc.finish();
    let (same, empty) = server.join().expect("server");
    assert!(same && empty, "server got other bytes");
    assert!(back == data, "echo differs");
}

#[test]
fn auto_uses_the_kernel_where_it_has_tls_and_rustls_otherwise() {
    let (c, s) = pair("ktls-auto", KtlsMode::Auto, KtlsMode::Auto);
    exchange(c, s, KtlsMode::Auto, KtlsMode::Auto);
}

#[test]
fn a_kernel_end_and_a_rustls_end_talk_to_each_other() {
    let (c, s) = pair("ktls-mixed", KtlsMode::Auto, KtlsMode::Off);
    exchange(c, s, KtlsMode::Auto, KtlsMode::Off);
}

#[test]
fn on_is_a_typed_error_naming_the_peer_where_the_kernel_has_no_tls() {
    let (mut c, s) = pair("ktls-on", KtlsMode::On, KtlsMode::Off);
    if ktls::available() {
        exchange(c, s, KtlsMode::On, KtlsMode::Off);
        return;
    }
    let e = c.offload().expect_err("no kTLS on this kernel");
    assert!(
        matches!(&e, TlsError::Ktls { peer, detail } if peer == "server" && detail.contains("CAUSEWAY_KTLS=on") && detail.contains("modprobe tls")),
        "{e}"
    );
    assert_eq!(c.record_layer(), RecordLayer::Userspace);
}

#[test]
fn the_setting_is_read_from_causeway_ktls() {
    assert_eq!(KtlsMode::parse(None).expect("unset"), KtlsMode::Auto);
    assert_eq!(KtlsMode::parse(Some("on")).expect("on"), KtlsMode::On);
    assert_eq!(KtlsMode::parse(Some("off")).expect("off"), KtlsMode::Off);
    let e = KtlsMode::parse(Some("yes")).expect_err("not a mode");
    assert!(e.to_string().contains("CAUSEWAY_KTLS"), "{e}");
    let s = TlsSettings::default().with_ktls(KtlsMode::On);
    assert_eq!(s.ktls, KtlsMode::On);
}
