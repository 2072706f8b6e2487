use std::io::{Read, Write};
use std::net::TcpStream;

use super::*;
use crate::transport::tls_config::{TlsFiles, TlsMode, TlsSettings};

use crate::test_pki as pki;

fn server() -> StoreServer {
    StoreServer::bind("127.0.0.1:0".parse().expect("addr")).expect("bind")
}

#[test]
fn set_get_add_wait() {
    let s = server();
    let mut c = StoreClient::connect(s.addr(), Duration::from_secs(5)).expect("connect");
    c.set("a", b"1").expect("set");
    assert_eq!(c.get("a", Duration::from_secs(1)).expect("get"), b"1");
    assert_eq!(c.add("n", 5).expect("add"), 5);
    assert_eq!(c.add("n", -2).expect("add"), 3);
    assert!(matches!(c.add("a", 1), Ok(2)));
    c.set("s", b"text").expect("set");
    assert!(matches!(c.add("s", 1), Err(StoreError::Protocol(_))));
    let addr = s.addr();
    let setter = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        let mut c2 = StoreClient::connect(addr, Duration::from_secs(5)).expect("connect");
        c2.set("late", b"x").expect("set");
    });
    c.wait(&["a", "late"], Duration::from_secs(5))
        .expect("wait");
    setter.join().expect("setter");
}

#[test]
fn get_times_out_with_the_key_named() {
    let s = server();
    let mut c = StoreClient::connect(s.addr(), Duration::from_secs(5)).expect("connect");
    let t = Instant::now();
    let err = c
        .get("never", Duration::from_millis(200))
        .expect_err("timeout");
    assert!(
        matches!(&err, StoreError::Timeout { key, .. } if key == "never"),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(3));
}

#[test]
fn a_will_is_set_when_its_connection_ends_unless_revoked_or_preempted() {
    let s = server();
    let mut watcher = StoreClient::connect(s.addr(), Duration::from_secs(5)).expect("connect");
    let mut c = StoreClient::connect(s.addr(), Duration::from_secs(5)).expect("connect");
    c.set_on_close("gone", b"c").expect("will");
    drop(c);
    assert_eq!(
        watcher.get("gone", Duration::from_secs(5)).expect("will"),
        b"c"
    );
    // Revoked: nothing happens.
    let mut c = StoreClient::connect(s.addr(), Duration::from_secs(5)).expect("connect");
    c.set_on_close("revoked", b"x").expect("will");
    c.clear_on_close().expect("revoke");
    drop(c);
    // The first value stays.
    let mut c = StoreClient::connect(s.addr(), Duration::from_secs(5)).expect("connect");
    c.set_on_close("gone", b"later").expect("will");
    drop(c);
    std::thread::sleep(Duration::from_millis(200));
    assert!(watcher.get("revoked", Duration::from_millis(100)).is_err());
    assert_eq!(watcher.get("gone", Duration::ZERO).expect("get"), b"c");
    assert_eq!(s.clients(), 1, "only the watcher is still connected");
    assert_eq!(s.accepted(), 4);
}

#[test]
fn oversized_requests_are_refused() {
    let s = server();
    let mut c = StoreClient::connect(s.addr(), Duration::from_secs(5)).expect("connect");
    assert!(c.set(&"k".repeat(2000), b"").is_err());
    // A hostile client announcing a 4 GiB value is disconnected, not served.
    let mut raw = TcpStream::connect(s.addr()).expect("connect");
    raw.write_all(&[OP_SET, 1, 0, b'k', 255, 255, 255, 255])
        .expect("write");
    let mut b = [0u8; 1];
    assert!(matches!(raw.read(&mut b), Ok(0) | Err(_)));
}

fn limited(l: StoreLimits) -> StoreServer {
    StoreServer::bind_with("127.0.0.1:0".parse().expect("addr"), None, l).expect("bind")
}

#[test]
fn limits_refuse_requests_and_the_connection_goes_on() {
    let s = limited(StoreLimits {
        max_keys: 2,
        requests_per_sec: 5,
        burst: 6,
        ..StoreLimits::default()
    });
    let mut c = StoreClient::connect(s.addr(), Duration::from_secs(5)).expect("connect");
    c.set("a", b"1").expect("set");
    c.set("b", b"2").expect("set");
    let e = c.set("c", b"3").expect_err("full");
    assert!(
        matches!(&e, StoreError::Refused { key, .. } if key == "c"),
        "{e}"
    );
    c.set("a", b"again").expect("an existing key may change");
    // Past the burst: refused, named, and the connection still answers later.
    let refused = (0..10)
        .filter(|_| c.get("a", Duration::ZERO).is_err())
        .count();
    assert!(refused >= 5, "only {refused} of 10 refused");
    thread::sleep(Duration::from_millis(600));
    assert_eq!(
        c.get("a", Duration::ZERO).expect("rate recovered"),
        b"again"
    );
}

#[test]
fn connections_past_the_limit_are_closed_at_accept() {
    let s = limited(StoreLimits {
        max_connections: 2,
        ..StoreLimits::default()
    });
    let mut a = StoreClient::connect(s.addr(), Duration::from_secs(5)).expect("a");
    let mut b = StoreClient::connect(s.addr(), Duration::from_secs(5)).expect("b");
    a.set("k", b"v").expect("a works");
    b.set("k", b"w").expect("b works");
    let mut extra = TcpStream::connect(s.addr()).expect("tcp connect");
    extra
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let _ = extra.write_all(&[OP_GET, 1, 0, b'k', 0, 0, 0, 0, 0, 0, 0, 0]);
    let mut buf = [0u8; 8];
    assert!(
        matches!(extra.read(&mut buf), Ok(0) | Err(_)),
        "served past the limit"
    );
    assert_eq!(s.turned_away(), 1);
    drop(a);
    thread::sleep(Duration::from_millis(200));
    let mut c = StoreClient::connect(s.addr(), Duration::from_secs(5)).expect("room again");
    assert_eq!(c.get("k", Duration::ZERO).expect("get"), b"w");
}

#[test]
fn with_tls_a_rank_keys_belong_to_the_certificate_that_claimed_it() {
    let d = pki::dir("store-owners");
    let ca = pki::Ca::new("d0");
    let ctx = |tag: &str, host: &str| {
        let [cert, key, ca_path] = pki::files(&d, tag, &ca.issue(host), &[&ca]);
        let t = TlsSettings::new(
            TlsMode::Wan,
            TlsFiles {
                cert,
                key,
                ca: ca_path,
            },
        );
        t.load().expect("load").expect("on")
    };
    let (server_ctx, a_ctx, b_ctx) = (ctx("s", "h0"), ctx("a", "h1"), ctx("b", "h2"));
    let s = StoreServer::bind_tls("127.0.0.1:0".parse().expect("addr"), Some(server_ctx))
        .expect("bind");
    let t = Duration::from_secs(5);
    let mut a = StoreClient::connect_tls(s.addr(), t, Some(&a_ctx)).expect("a");
    let mut b = StoreClient::connect_tls(s.addr(), t, Some(&b_ctx)).expect("b");
    assert_eq!(a.add("claim/1", 1).expect("a claims rank 1"), 1);
    a.set("rank/1", b"a's address").expect("own key");
    for e in [
        b.add("claim/1", 1).map(drop),
        b.set("rank/1", b"attacker"),
        b.set("session", b"0000"),
    ] {
        assert!(matches!(e, Err(StoreError::Refused { .. })), "{e:?}");
    }
    assert_eq!(
        b.get("rank/1", Duration::ZERO).expect("read"),
        b"a's address"
    );
    b.set("error-free-key", b"ok")
        .expect("shared keys stay writable");
}
