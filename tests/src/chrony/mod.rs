//! chrony as an outside reference for the clock-sync benchmark: one
//! `chronyd -x` serving (`local stratum 1`) in one testbed host and one
//! `chronyd -x` synchronising to it in another, both only ever disciplining
//! chrony's own virtual clock, never the host's.
//!
//! What is measured. With `-x` chronyd keeps its corrections in software
//! (`sys_null.c`: the cooked clock is the raw clock plus a correction that
//! every clock update accrues into). `chronyc tracking` reports that
//! correction at the moment of the request ("System time"). Every testbed
//! namespace reads the same host clock, so the client's cooked clock minus
//! the server's cooked clock *is* the error of chrony's time — the
//! analogue of our agents' estimate, polled every 200 ms like theirs. The
//! regression's own offset (statistics.log "Est offset", `sourcestats`) is
//! not: it is measured against the already-corrected virtual clock, so it
//! is the next correction step, not the error (near 0 even when the clock
//! is off by its systematic bias).

#[allow(unsafe_code)] // the child is sent SIGTERM when its thread dies (prctl)
mod daemon;
mod programs;
mod tracking;

use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

pub use daemon::{ChronyPair, ErrorSample, PairSpec};
pub use programs::{clock_adjusting_chronyds, installed, Programs};
pub use tracking::{parse_tracking_csv, LogSummary, Tracking};

/// Why chrony could not serve as the reference.
#[derive(Debug, thiserror::Error)]
pub enum ChronyError {
    #[error(
        "{0} is not installed (`cargo xtask setup` installs chrony, its service kept stopped)"
    )]
    Missing(&'static str),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("chronyd in {netns} exited at start ({status}): {log}")]
    Exited {
        netns: String,
        status: std::process::ExitStatus,
        log: String,
    },
    #[error("chronyd in {netns} did not answer chronyc within {secs} s: {last}")]
    NoAnswer {
        netns: String,
        secs: u64,
        last: String,
    },
    #[error("chronyc {args}: {stderr}")]
    Chronyc { args: String, stderr: String },
    #[error("cannot read chronyc tracking line {line:?}: {why}")]
    Parse { line: String, why: String },
}

impl ChronyError {
    fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        ChronyError::Io {
            what: what.into(),
            source,
        }
    }
}

/// chrony's errors over the measured window.
#[derive(Debug, Default)]
pub struct ChronyErrors {
    /// |client cooked clock − server cooked clock| per poll, ns.
    pub abs: Vec<f64>,
    /// Polls whose error was within chrony's own maximum error
    /// (root delay / 2 + root dispersion).
    pub within_bound: usize,
    /// Polls in the window at which the client was not synchronised.
    pub unsynchronised: usize,
    /// Polls in the window at which chronyc failed, and the last failure.
    pub failed: usize,
    pub last_failure: Option<String>,
}

/// Sets the flag when dropped, also while a panic unwinds.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs `run` (our agents' measurement) while polling chrony every 200 ms
/// on another thread; keeps the polls of the last `measure` before `run`
/// returned, so chrony gets at least the agents' warmup and is measured
/// over the same window.
pub fn measure_alongside<R>(
    pair: &ChronyPair,
    measure: Duration,
    run: impl FnOnce() -> R,
) -> (R, ChronyErrors) {
    let stop = AtomicBool::new(false);
    let (result, end, polls) = std::thread::scope(|s| {
        let poller = s.spawn(|| {
            let mut polls = Vec::new();
            let mut server = Err("not asked yet".to_string());
            for n in 0u64.. {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                // The server's correction never changes (no sources, -x):
                // asking once a second keeps chronyc runs few.
                if n % 5 == 0 {
                    server = pair.server_tracking().map_err(|e| e.to_string());
                }
                let at = Instant::now();
                let sample = server.clone().and_then(|server| {
                    let client = pair.client_tracking().map_err(|e| e.to_string())?;
                    Ok(ErrorSample::between(&client, &server))
                });
                polls.push((at, sample));
                std::thread::sleep(Duration::from_millis(200));
            }
            polls
        });
        let guard = SetOnDrop(&stop);
        let result = run();
        let end = Instant::now();
        drop(guard);
        (result, end, poller.join().expect("the chrony poller"))
    });
    let mut errors = ChronyErrors::default();
    let start = end.checked_sub(measure).unwrap_or(end);
    for (at, sample) in polls {
        if at < start || at > end {
            continue;
        }
        match sample {
            Ok(s) if !s.synchronised => errors.unsynchronised += 1,
            Ok(s) => {
                let abs = s.error_ns.abs();
                errors.abs.push(abs);
                errors.within_bound += usize::from(abs <= s.bound_ns);
            }
            Err(e) => {
                errors.failed += 1;
                errors.last_failure = Some(e);
            }
        }
    }
    (result, errors)
}
