//! TLS record layer throughput on one core: for each TLS 1.3 cipher suite of
//! rustls' ring provider, a client and a server connection of this host's
//! identity (`CAUSEWAY_TLS_CERT`, `CAUSEWAY_TLS_KEY`, `CAUSEWAY_TLS_CA`,
//! made by `causeway certs`) handshake in memory; then the client seals
//! `--mib` MiB in writes of the transport's slice (256 KiB, full 16 KiB
//! records) and the server opens them, on this thread. Prints a markdown
//! table of plaintext GB/s (seal, open, and both on one core); used by
//! `cargo xtask bench tls`.

use std::io::{ErrorKind, Read, Write};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use causeway_collective::cli;
use causeway_collective::transport::tls::WRITE_SLICE;
use causeway_collective::transport::tls_config::{TlsContext, TlsMode, TlsSettings};
use rustls::crypto::ring::cipher_suite;

const USAGE: &str = "causeway-tls-bench [--mib 256] [--runs 5]\n\
  Seal + open GB/s per TLS 1.3 cipher suite on one core, through a rustls\n\
  connection pair in memory. Reads CAUSEWAY_TLS_CERT, CAUSEWAY_TLS_KEY, CAUSEWAY_TLS_CA.";

/// Seconds to seal and to open `total` bytes through the pair.
fn once(ctx: &TlsContext, total: usize) -> Result<(f64, f64)> {
    let (mut client, mut server) = ctx.memory_pair()?;
    // As the transport's split writer has it: one slice sealed per call.
    client.set_buffer_limit(Some(2 * WRITE_SLICE));
    let chunk: Vec<u8> = (0..WRITE_SLICE).map(|i| (i * 31 % 251) as u8).collect();
    let mut wire = Vec::with_capacity(WRITE_SLICE + (WRITE_SLICE >> 6));
    let mut out = vec![0u8; WRITE_SLICE];
    let (mut seal, mut open) = (0.0, 0.0);
    let mut received = 0usize;
    let mut sent = 0usize;
    while sent < total {
        wire.clear();
        let t = Instant::now();
        let mut done = 0;
        while done < chunk.len() {
            let n = client.writer().write(&chunk[done..])?;
            done += n;
            while client.wants_write() {
                client.write_tls(&mut wire)?;
            }
            if n == 0 && done < chunk.len() {
                bail!("rustls took none of the plaintext");
            }
        }
        seal += t.elapsed().as_secs_f64();
        sent += chunk.len();
        let t = Instant::now();
        let mut rd = &wire[..];
        let mut filled = 0;
        while !rd.is_empty() {
            server.read_tls(&mut rd)?;
            server.process_new_packets().context("opening a record")?;
            while filled < out.len() {
                match server.reader().read(&mut out[filled..]) {
                    Ok(0) => bail!("the server saw the end of the stream"),
                    Ok(n) => filled += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        open += t.elapsed().as_secs_f64();
        if out[..filled] != chunk[..filled] || filled != chunk.len() {
            bail!("the opened plaintext differs from what was sealed");
        }
        received += filled;
    }
    if received != sent {
        bail!("sealed {sent} bytes, opened {received}");
    }
    Ok((seal, open))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> std::process::ExitCode {
    causeway_core::cli_main::run(|| {
        causeway_collective::cli::init_logging();
        run()
    })
}

fn run() -> Result<()> {
    let args = cli::Args::parse(&["mib", "runs"], USAGE)?;
    let mib: usize = args.num("mib", 256)?;
    let runs: usize = args.num("runs", 5)?;
    if runs == 0 || mib == 0 {
        bail!("--mib and --runs must be at least 1");
    }
    let files = TlsSettings::from_env()?
        .files
        .context("set CAUSEWAY_TLS_CERT, CAUSEWAY_TLS_KEY and CAUSEWAY_TLS_CA")?;
    let total = mib << 20;
    cli::outln(format!(
        "TLS 1.3 record layer, rustls (ring), one core, {mib} MiB in {} KiB writes, 1 warm-up + {runs} runs (median [min–max] of seal+open GB/s)",
        WRITE_SLICE >> 10
    ))?;
    cli::outln("| suite | seal+open GB/s | [min–max] | seal GB/s | open GB/s |")?;
    cli::outln("|---|---:|---|---:|---:|")?;
    for suite in [
        cipher_suite::TLS13_AES_128_GCM_SHA256,
        cipher_suite::TLS13_AES_256_GCM_SHA384,
        cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
    ] {
        let ctx = TlsContext::load_with_suites(TlsMode::All, &files, &[suite])?;
        once(&ctx, total.min(16 << 20))?;
        let (mut both, mut seal, mut open) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            let (s, o) = once(&ctx, total)?;
            let gb = total as f64 / 1e9;
            both.push(gb / (s + o));
            seal.push(gb / s);
            open.push(gb / o);
        }
        let (lo, hi) = (
            both.iter().copied().fold(f64::INFINITY, f64::min),
            both.iter().copied().fold(0.0, f64::max),
        );
        cli::outln(format!(
            "| {:?} | {:.2} | [{lo:.2}–{hi:.2}] | {:.2} | {:.2} |",
            suite.suite(),
            median(&mut both),
            median(&mut seal),
            median(&mut open)
        ))?;
    }
    Ok(())
}
