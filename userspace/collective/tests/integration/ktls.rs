//! kTLS where the kernel has the `tls` module (Debian's kernels in the VM
//! stage; the 6.18 host has none, so these are `#[ignore]`d there and
//! `cargo xtask vm-test --filter ktls` runs them): an allreduce across two
//! domains with `CAUSEWAY_KTLS=on` gives the bits of plaintext and the
//! kernel's TLS counters show it encrypted and decrypted the links; a
//! tampered record on a kTLS link is a typed error naming the peer.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;

use causeway_test_support::tamper::forward;

use causeway_collective::transport::ktls;
use causeway_collective::transport::tls::{self, RecordLayer};
use causeway_collective::transport::tls_config::{
    peer_name, KtlsMode, TlsContext, TlsFiles, TlsMode, TlsSettings,
};
use causeway_collective::transport::Transport;
use causeway_collective::TlsError;

use crate::pki::{self, Ca};
use crate::tls::{allreduce_bits, rank_settings, run};
use crate::world::Layout;

/// `/proc/net/tls_stat` of this network namespace.
fn tls_stat() -> HashMap<String, u64> {
    let text = std::fs::read_to_string("/proc/net/tls_stat")
        .expect("/proc/net/tls_stat: the kernel's tls module is not loaded");
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?.to_string(), it.next()?.parse().ok()?))
        })
        .collect()
}

fn layout() -> Layout {
    [("d0", "h0"), ("d0", "h1"), ("d1", "h2"), ("d1", "h3")]
        .iter()
        .map(|(d, h)| (d.to_string(), h.to_string()))
        .collect()
}

#[test]
#[ignore = "needs the kernel's tls module: runs in the VM stage (cargo xtask vm-test --filter ktls)"]
fn an_allreduce_over_ktls_gives_the_plaintext_bits_and_the_kernel_does_the_records() {
    assert!(
        ktls::available(),
        "this kernel has no TLS upper layer protocol"
    );
    let d = pki::dir("it-ktls");
    let layout = layout();
    let (d0, d1) = (Ca::new("d0"), Ca::new("d1"));
    let plain = run(&layout, &vec![TlsSettings::default(); 4], |c| {
        allreduce_bits(&c)
    });
    let tls: Vec<TlsSettings> = rank_settings(&d, &layout, &[&d0, &d1], TlsMode::Wan, |r| {
        layout[r].0.clone()
    })
    .into_iter()
    .map(|s| s.with_ktls(KtlsMode::On))
    .collect();
    let before = tls_stat();
    let got = run(&layout, &tls, |c| allreduce_bits(&c));
    let after = tls_stat();
    for (r, (p, t)) in plain.iter().zip(&got).enumerate() {
        let (p, t) = (p.as_ref().expect("plain"), t.as_ref().expect("kTLS"));
        assert!(p == t, "rank {r}: the kTLS result differs from plaintext");
    }
    let rose = |k: &str| after.get(k).copied().unwrap_or(0) - before.get(k).copied().unwrap_or(0);
    println!(
        "kTLS counters during the allreduce: TlsTxSw +{} TlsRxSw +{} TlsDecryptError +{}",
        rose("TlsTxSw"),
        rose("TlsRxSw"),
        rose("TlsDecryptError")
    );
    // Every cross-domain link (2 x 2 rank pairs, at least one connection
    // each) was set up in the kernel, in both directions, on both ends.
    assert!(rose("TlsTxSw") >= 8, "TlsTxSw rose by {}", rose("TlsTxSw"));
    assert!(rose("TlsRxSw") >= 8, "TlsRxSw rose by {}", rose("TlsRxSw"));
    assert_eq!(rose("TlsDecryptError"), 0);
}

fn context(d: &std::path::Path, tag: &str, ca: &Ca, host: &str) -> TlsContext {
    let [cert, key, ca_path] = pki::files(d, tag, &ca.issue(host), &[ca]);
    let files = TlsFiles {
        cert,
        key,
        ca: ca_path,
    };
    let s = TlsSettings::new(TlsMode::All, files).with_ktls(KtlsMode::On);
    let ctx = s.load().expect("load").expect("on");
    std::sync::Arc::try_unwrap(ctx).expect("one owner")
}

#[test]
#[ignore = "needs the kernel's tls module: runs in the VM stage (cargo xtask vm-test --filter ktls)"]
fn a_tampered_record_on_a_ktls_link_is_a_record_error_naming_the_peer() {
    let d = pki::dir("it-ktls-tamper");
    let ca = Ca::new("dc1");
    let server = context(&d, "a", &ca, "a");
    let client = context(&d, "b", &ca, "b");
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let h = thread::spawn(move || {
        let (s, _) = l.accept().expect("accept");
        tls::accept(&server, s, "client".into()).expect("server handshake")
    });
    // Between client and server, a proxy that flips one byte well past the
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
    let s = TcpStream::connect(paddr).expect("connect");
    let mut c = tls::connect(
        &client,
        s,
        peer_name("dc1", "a").expect("name"),
        "server".into(),
    )
    .expect("client handshake");
    let mut s = h.join().expect("server thread");
    s.set_peer("rank 1 at test".into());
    assert_eq!(c.offload().expect("client kTLS"), RecordLayer::Kernel);
    assert_eq!(s.offload().expect("server kTLS"), RecordLayer::Kernel);
    assert!(s.describe().starts_with("ktls "), "{}", s.describe());
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
        matches!(inner, Some(TlsError::Record { peer, source: rustls::Error::DecryptError }) if peer == "rank 1 at test"),
        "{e}"
    );
    let _ = writer.join();
}
