//! Mutual TLS between ranks and with the bootstrap store: an allreduce over
//! TLS gives the bits plaintext gives; a store client without a trusted
//! certificate cannot claim a rank (and the job completes); a rank whose
//! certificate names another domain is refused with a typed error naming it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use causeway_collective::store::{StoreClient, StoreServer};
use causeway_collective::transport::tls_config::{StoreId, TlsFiles, TlsMode, TlsSettings};
use causeway_collective::{CollectiveError, Communicator, ReduceOp, StoreError, TlsError};

use crate::pki::{self, Ca};
use crate::world::{test_options, two_domains, Layout};

fn settings(mode: TlsMode, [cert, key, ca]: [std::path::PathBuf; 3]) -> TlsSettings {
    TlsSettings::new(mode, TlsFiles { cert, key, ca })
}

/// Per rank: its TLS settings, with a certificate from its domain's CA
/// (`cert_domain` overrides which domain's CA signs it and the name).
pub(crate) fn rank_settings(
    dir: &Path,
    layout: &Layout,
    cas: &[&Ca],
    mode: TlsMode,
    cert_domain: impl Fn(usize) -> String,
) -> Vec<TlsSettings> {
    (0..layout.len())
        .map(|r| {
            let d = cert_domain(r);
            let ca = cas
                .iter()
                .find(|c| c.domain == d)
                .expect("a CA of that domain");
            let id = ca.issue(&layout[r].1);
            settings(mode, pki::files(dir, &format!("r{r}"), &id, cas))
        })
        .collect()
}

/// Runs every rank of `layout` with its own TLS settings; rank 0 hosts the store.
pub(crate) fn run<R: Send>(
    layout: &Layout,
    tls: &[TlsSettings],
    f: impl Fn(Communicator) -> R + Sync,
) -> Vec<Result<R, CollectiveError>> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let master: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let n = layout.len();
    let f = &f;
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let (d, h) = layout[r].clone();
                let b = Communicator::builder(r, n)
                    .master(master)
                    .domain(d)
                    .host_id(h)
                    .options(test_options())
                    .tls(tls[r].clone());
                s.spawn(move || b.build().map(f))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    })
}

fn input(rank: usize, len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 31 + rank * 7) % 1000) as f32 * 0.001 + rank as f32 / 3.0)
        .collect()
}

pub(crate) fn allreduce_bits(c: &Communicator) -> Vec<u32> {
    let mut v = input(c.rank(), 50_000);
    c.allreduce(&mut v, ReduceOp::Sum).expect("allreduce");
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn allreduce_over_tls_gives_the_bits_of_plaintext() {
    let d = pki::dir("it-bits");
    let layout = two_domains(4);
    let (d0, d1) = (Ca::new("d0"), Ca::new("d1"));
    let plain = run(&layout, &vec![TlsSettings::default(); 4], |c| {
        allreduce_bits(&c)
    });
    for mode in [TlsMode::Wan, TlsMode::All] {
        let tls = rank_settings(&d, &layout, &[&d0, &d1], mode, |r| layout[r].0.clone());
        let got = run(&layout, &tls, |c| allreduce_bits(&c));
        for (r, (p, t)) in plain.iter().zip(&got).enumerate() {
            let (p, t) = (p.as_ref().expect("plain"), t.as_ref().expect("tls"));
            assert!(
                p == t,
                "rank {r} under {mode:?}: TLS result differs from plaintext"
            );
        }
    }
}

#[test]
fn a_rank_whose_certificate_names_another_domain_is_refused_by_name() {
    let d = pki::dir("it-wrong-domain");
    let layout: Layout = vec![("d0".into(), "h0".into()), ("d1".into(), "h1".into())];
    let (d0, d1) = (Ca::new("d0"), Ca::new("d1"));
    // Rank 1 says it is in d1 but holds a d0 certificate.
    let tls = rank_settings(&d, &layout, &[&d0, &d1], TlsMode::Wan, |_| "d0".into());
    let got = run(&layout, &tls, |_| ());
    let e = got[0].as_ref().expect_err("rank 0 refuses rank 1");
    assert!(
        matches!(e, CollectiveError::Tls(TlsError::WrongIdentity { peer, expected })
            if peer.starts_with("rank 1 at") && expected == "h1.d1.causeway"),
        "{e}"
    );
    assert!(got[1].is_err(), "rank 1 hears of the failure");
}

/// A request as the store's wire format has it: claim rank 1.
fn claim_rank_one() -> Vec<u8> {
    let key = b"claim/1";
    let mut req = vec![3u8];
    req.extend_from_slice(&(key.len() as u16).to_le_bytes());
    req.extend_from_slice(key);
    req.extend_from_slice(&8u32.to_le_bytes());
    req.extend_from_slice(&1i64.to_le_bytes());
    req.extend_from_slice(&0u32.to_le_bytes());
    req
}

#[test]
fn a_store_client_without_a_trusted_certificate_cannot_claim_a_rank_and_the_job_completes() {
    let d = pki::dir("it-store");
    let layout: Layout = vec![("d0".into(), "h0".into()), ("d1".into(), "h1".into())];
    let (d0, d1, rogue) = (Ca::new("d0"), Ca::new("d1"), Ca::new("rogue"));
    let tls = rank_settings(&d, &layout, &[&d0, &d1], TlsMode::Wan, |r| {
        layout[r].0.clone()
    });
    let ctx = tls[0].load().expect("load").expect("on");
    let server =
        StoreServer::bind_tls("127.0.0.1:0".parse().expect("addr"), Some(ctx)).expect("store");
    // Plaintext: the server reads a TLS ClientHello, gets none, and closes
    // without answering (nothing was stored).
    let mut raw = TcpStream::connect(server.addr()).expect("connect");
    raw.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    raw.write_all(&claim_rank_one()).expect("send");
    let mut b = [0u8; 64];
    let answer = raw.read(&mut b).unwrap_or(0);
    assert!(
        answer == 0 || b[0] == 0x15,
        "a plaintext client got a store answer"
    );
    // A certificate from an untrusted CA: the handshake fails, typed.
    let foreign = settings(
        TlsMode::Wan,
        pki::files(&d, "rogue", &rogue.issue("x"), &[&d0]),
    );
    let fctx = foreign.load().expect("load").expect("on");
    let e = StoreClient::connect_tls(server.addr(), Duration::from_secs(5), Some(&fctx))
        .and_then(|mut c| c.add("claim/1", 1).map(drop));
    assert!(
        matches!(
            &e,
            Err(StoreError::Tls(_)) | Err(StoreError::Io { .. }) | Err(StoreError::Protocol(_))
        ),
        "a foreign certificate reached the store: {e:?}"
    );
    // The real job on that store: rank 1's slot is still free.
    let n = layout.len();
    let results = std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let b = Communicator::builder(r, n)
                    .master(server.addr())
                    .host_store(false)
                    .domain(layout[r].0.clone())
                    .host_id(layout[r].1.clone())
                    .options(test_options())
                    .tls(tls[r].clone());
                s.spawn(move || b.build().map(|c| allreduce_bits(&c)))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank"))
            .collect::<Vec<_>>()
    });
    let (a, b) = (input(0, 50_000), input(1, 50_000));
    let want: Vec<u32> = a.iter().zip(&b).map(|(x, y)| (x + y).to_bits()).collect();
    for (r, got) in results.into_iter().enumerate() {
        assert_eq!(
            got.unwrap_or_else(|e| panic!("rank {r}: {e}")),
            want,
            "rank {r}"
        );
    }
}

/// `CAUSEWAY_STORE_ID` pins the store to one host's certificate: a store
/// served with another host's certificate (same trusted CA) is refused in
/// the handshake, before any request is sent; the pinned host is accepted.
#[test]
fn a_pinned_store_id_refuses_a_store_served_by_another_host() {
    let d = pki::dir("it-store-pin");
    let layout: Layout = vec![("d0".into(), "h0".into()), ("d1".into(), "h1".into())];
    let (d0, d1) = (Ca::new("d0"), Ca::new("d1"));
    let tls = rank_settings(&d, &layout, &[&d0, &d1], TlsMode::Wan, |r| {
        layout[r].0.clone()
    });
    // The store is served by rank 0's host, h0 of d0.
    let ctx = tls[0].load().expect("load").expect("on");
    let server =
        StoreServer::bind_tls("127.0.0.1:0".parse().expect("addr"), Some(ctx)).expect("store");
    let client = |pin: &str| {
        let s = tls[1]
            .clone()
            .with_store(StoreId::parse(pin).expect("a valid store id"));
        let ctx = s.load().expect("load").expect("on");
        StoreClient::connect_tls(server.addr(), Duration::from_secs(5), Some(&ctx))
            .and_then(|mut c| c.add("probe", 1))
    };
    // Pinned to another host of the same domain, and to the right host in
    // another domain: both refused as the wrong identity.
    for wrong in ["h9.d0", "h0.d1"] {
        let e = client(wrong);
        assert!(
            matches!(&e, Err(StoreError::Tls(t)) if matches!(**t, TlsError::Handshake { .. })),
            "a store pinned to {wrong} was accepted with h0.d0's certificate: {e:?}"
        );
    }
    assert_eq!(
        client("h0.d0").expect("the pinned host serves the store"),
        1
    );
    // A malformed pin is a configuration error naming the variable.
    let e = StoreId::parse("no-domain").expect_err("refused");
    assert!(e.to_string().contains("CAUSEWAY_STORE_ID"), "{e}");
}

#[test]
fn rotating_a_certificate_during_a_sequence_of_allreduces_fails_none_of_them() {
    let d = pki::dir("it-rotate");
    let layout: Layout = vec![("d0".into(), "h0".into()), ("d1".into(), "h1".into())];
    let (d0, d1) = (Ca::new("d0"), Ca::new("d1"));
    let tls = rank_settings(&d, &layout, &[&d0, &d1], TlsMode::Wan, |r| {
        layout[r].0.clone()
    });
    let rotate = |r: usize| {
        // A new key and certificate in place of the old files, as an
        // operator's rotation would leave them.
        let ca = if r == 0 { &d0 } else { &d1 };
        let (cert, key) = ca.issue(&layout[r].1);
        let f = tls[r].files.as_ref().expect("files");
        std::fs::write(&f.cert, cert).expect("write");
        std::fs::write(&f.key, key).expect("write");
    };
    let want = {
        let (a, b) = (input(0, 50_000), input(1, 50_000));
        a.iter()
            .zip(&b)
            .map(|(x, y)| (x + y).to_bits())
            .collect::<Vec<u32>>()
    };
    // Rank 1's files change between allreduces: the running job keeps its
    // connections, every call completes.
    let got = run(&layout, &tls, |c| {
        (0..6)
            .map(|i| {
                if i == 3 && c.rank() == 1 {
                    rotate(1);
                }
                allreduce_bits(&c)
            })
            .collect::<Vec<_>>()
    });
    for (r, g) in got.into_iter().enumerate() {
        let g = g.unwrap_or_else(|e| panic!("rank {r}: {e}"));
        assert!(g.iter().all(|v| *v == want), "rank {r}: a result differs");
    }
    // The next job starts with rank 1's new certificate, rank 0 keeps its old one.
    let got = run(&layout, &tls, |c| allreduce_bits(&c));
    for (r, g) in got.into_iter().enumerate() {
        assert_eq!(
            g.unwrap_or_else(|e| panic!("rank {r}: {e}")),
            want,
            "rank {r}"
        );
    }
}

/// With TLS on every link, rank 3 leaves; the survivors (two domains) shrink
/// through a TLS standby store and TLS links, and their allreduce is exact.
#[test]
fn survivors_shrink_over_tls() {
    let d = pki::dir("it-shrink");
    let layout: Layout = (0..4)
        .map(|r| (format!("d{}", r % 2), format!("h{r}")))
        .collect();
    let (d0, d1) = (Ca::new("d0"), Ca::new("d1"));
    let tls = rank_settings(&d, &layout, &[&d0, &d1], TlsMode::All, |r| {
        layout[r].0.clone()
    });
    let all_done = crate::world::AllArrive::new(4);
    let got = run(&layout, &tls, |mut c| {
        allreduce_bits(&c);
        // Rank 3 leaves only once every rank has its result.
        all_done.wait();
        if c.rank() == 3 {
            return None;
        }
        // Until the loss of rank 3 shows.
        while c.barrier().is_ok() {}
        let next = c
            .shrink()
            .unwrap_or_else(|e| panic!("rank {}: shrink: {e}", c.rank()));
        let mut v = vec![next.rank() as f32 + 1.0; 1000];
        next.allreduce(&mut v, ReduceOp::Sum)
            .expect("allreduce after shrink");
        Some((next.world_size(), v))
    });
    for (r, g) in got.into_iter().enumerate().take(3) {
        let (world, v) = g.expect("rank").expect("survivor");
        assert_eq!(world, 3, "rank {r}");
        assert!(v.iter().all(|x| *x == 6.0), "rank {r}: {:?}", &v[..4]);
    }
}
