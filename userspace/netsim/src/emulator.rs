//! The emulator's I/O side: one thread per direction moves frames between two
//! interfaces through a [`LinkCore`], on the real monotonic clock.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::core::{Counters, LinkCore};
use crate::params::{LinkParams, ParamsError, ParamsPatch};
use crate::sys;

/// Which direction(s) a change applies to. `a_to_b` carries frames that arrive
/// on interface A and leave on interface B.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dir {
    AToB,
    BToA,
    Both,
}

impl Dir {
    fn covers(self, index: usize) -> bool {
        matches!(
            (self, index),
            (Dir::Both, _) | (Dir::AToB, 0) | (Dir::BToA, 1)
        )
    }
}

/// Default spin window before a departure: above this machine's typical
/// SCHED_FIFO wake-up lateness (≈90 µs).
pub const DEFAULT_SPIN_NS: u64 = 200_000;
/// Default share of one core a direction may spend spinning.
pub const DEFAULT_SPIN_SHARE: f64 = 0.05;

/// What the emulator needs to run.
#[derive(Debug, Clone)]
pub struct EmulatorConfig {
    /// Named network namespace the emulator's sockets live in (None: the caller's).
    pub netns: Option<String>,
    pub iface_a: String,
    pub iface_b: String,
    pub a_to_b: LinkParams,
    pub b_to_a: LinkParams,
    /// Seed of the loss/jitter/reorder generators (each direction derives its own).
    pub seed: u64,
    /// Wake this long before a departure and busy-wait up to it (sleep wake-ups
    /// are late by tens of µs; spinning is exact but burns CPU)...
    pub spin_ns: u64,
    /// ...within this share of one core per direction (0.0–1.0): see
    /// [`SpinBudget`](crate::spin_budget::SpinBudget).
    pub spin_share: f64,
    /// Turn off GRO/GSO/TSO/checksum offloads on both interfaces at start.
    pub disable_offloads: bool,
    /// Run the direction threads under SCHED_FIFO at this priority (None: normal
    /// scheduling). Without it, a busy machine delays departures by milliseconds.
    pub realtime_priority: Option<i32>,
}

impl EmulatorConfig {
    pub fn new(iface_a: &str, iface_b: &str, params: LinkParams) -> Self {
        Self {
            netns: None,
            iface_a: iface_a.to_string(),
            iface_b: iface_b.to_string(),
            a_to_b: params,
            b_to_a: params,
            seed: 1,
            spin_ns: DEFAULT_SPIN_NS,
            spin_share: DEFAULT_SPIN_SHARE,
            disable_offloads: true,
            realtime_priority: Some(10),
        }
    }
}

/// Failures of the emulator.
#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    #[error("invalid link parameters: {0}")]
    Params(#[from] ParamsError),
    #[error("setting up {what}: {source}")]
    Setup { what: String, source: io::Error },
    #[error("emulator thread failed: {0}")]
    Thread(String),
}

/// Counters and state of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DirStats {
    pub params: Option<LinkParams>,
    pub counters: Counters,
    /// Frames held right now (queued or in the delay line).
    pub in_flight: u64,
    /// Frames larger than the receive buffer (MTU + headroom), dropped.
    pub oversize: u64,
    /// GSO super-frames (segmentation offload on upstream), dropped.
    pub gso_dropped: u64,
    /// Frames whose L4 checksum was left to offload and completed here.
    pub checksums_fixed: u64,
    /// Frames dropped by the kernel before the emulator read them (receive buffer full).
    pub rx_socket_drops: u64,
    /// Frames the kernel refused to send.
    pub tx_errors: u64,
    /// How late frames left relative to their scheduled departure: sum and max, ns.
    pub late_ns_total: u64,
    pub late_ns_max: u64,
    /// How long before a departure the thread wakes and spins now: it
    /// adapts to how late this machine's sleeps wake (`spin_budget`).
    #[serde(default)]
    pub spin_window_ns: u64,
    /// Frames by how late they left: counts per [`LATE_BUCKETS_NS`] bucket
    /// (at most that late), the last one for anything later.
    #[serde(default)]
    pub late_hist: [u64; LATE_BUCKETS_NS.len() + 1],
}

/// Upper bounds of the lateness histogram's buckets, ns.
pub const LATE_BUCKETS_NS: [u64; 9] = [
    2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000,
];

impl DirStats {
    /// Counts a frame that left `late_ns` after its departure time.
    pub fn count_late(&mut self, late_ns: u64) {
        self.late_ns_total += late_ns;
        self.late_ns_max = self.late_ns_max.max(late_ns);
        let i = LATE_BUCKETS_NS.partition_point(|&b| b < late_ns);
        self.late_hist[i] += 1;
    }
}

/// Both directions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EmulatorStats {
    pub a_to_b: DirStats,
    pub b_to_a: DirStats,
    /// Set when a direction thread stopped on an error.
    pub error: Option<String>,
}

struct DirShared {
    params: Mutex<LinkParams>,
    generation: AtomicU64,
    stats: Mutex<DirStats>,
}

struct Shared {
    dirs: [DirShared; 2],
    stop: AtomicBool,
    error: Mutex<Option<String>>,
    epoch: Instant,
}

/// A running emulator. Dropping it stops both directions.
pub struct Emulator {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Emulator {
    /// Validate the configuration, open the sockets and start forwarding. Returns
    /// only once both directions are ready (or with the first setup error).
    pub fn start(config: EmulatorConfig) -> Result<Self, EmulatorError> {
        config.a_to_b.validate()?;
        config.b_to_a.validate()?;
        let dir = |p: LinkParams| DirShared {
            params: Mutex::new(p),
            generation: AtomicU64::new(0),
            stats: Mutex::new(DirStats {
                params: Some(p),
                ..DirStats::default()
            }),
        };
        let shared = Arc::new(Shared {
            dirs: [dir(config.a_to_b), dir(config.b_to_a)],
            stop: AtomicBool::new(false),
            error: Mutex::new(None),
            epoch: Instant::now(),
        });
        let (ready_tx, ready_rx) = mpsc::channel();
        let mut emulator = Emulator {
            shared: shared.clone(),
            threads: Vec::new(),
        };
        for index in 0..2 {
            let (cfg, shared, ready) = (config.clone(), shared.clone(), ready_tx.clone());
            let handle = std::thread::Builder::new()
                .name(format!("wanem-{}", if index == 0 { "ab" } else { "ba" }))
                .spawn(move || direction_thread(cfg, index, shared, ready))
                .map_err(|source| EmulatorError::Setup {
                    what: "emulator thread".into(),
                    source,
                })?;
            emulator.threads.push(handle);
        }
        drop(ready_tx);
        for _ in 0..2 {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e), // Drop stops the other thread.
                Err(_) => {
                    return Err(EmulatorError::Thread(
                        "a direction thread died during setup".into(),
                    ))
                }
            }
        }
        Ok(emulator)
    }

    /// Change parameters while traffic flows; both directions are validated
    /// before either changes.
    pub fn set(&self, dir: Dir, patch: &ParamsPatch) -> Result<(), ParamsError> {
        let mut new = [None, None];
        for (i, slot) in new.iter_mut().enumerate() {
            if dir.covers(i) {
                *slot = Some(lock(&self.shared.dirs[i].params).patched(patch)?);
            }
        }
        for (i, p) in new.into_iter().enumerate() {
            if let Some(p) = p {
                *lock(&self.shared.dirs[i].params) = p;
                self.shared.dirs[i]
                    .generation
                    .fetch_add(1, Ordering::Release);
            }
        }
        Ok(())
    }

    /// Current parameters and counters of both directions.
    /// Current parameters (as configured, even if a direction thread has not
    /// picked a change up yet) and counters of both directions.
    pub fn stats(&self) -> EmulatorStats {
        let dir = |i: usize| DirStats {
            params: Some(*lock(&self.shared.dirs[i].params)),
            ..*lock(&self.shared.dirs[i].stats)
        };
        EmulatorStats {
            a_to_b: dir(0),
            b_to_a: dir(1),
            error: lock(&self.shared.error).clone(),
        }
    }

    /// Stop both directions and return the final counters.
    pub fn stop(mut self) -> EmulatorStats {
        self.halt();
        self.stats()
    }

    fn halt(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.halt();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

type Ready = mpsc::Sender<Result<(), EmulatorError>>;

fn direction_thread(cfg: EmulatorConfig, index: usize, shared: Arc<Shared>, ready: Ready) {
    let (rx_if, tx_if) = if index == 0 {
        (&cfg.iface_a, &cfg.iface_b)
    } else {
        (&cfg.iface_b, &cfg.iface_a)
    };
    let io = match crate::forward::DirectionIo::open(&cfg, rx_if, tx_if, index == 0) {
        Ok(io) => io,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let _ = ready.send(Ok(()));
    let dir = &shared.dirs[index];
    let params = *lock(&dir.params);
    let seed = cfg.seed ^ (0x5EED_0000_0000_0000 | index as u64);
    let core: LinkCore<Box<[u8]>> = LinkCore::new(params, seed);
    let result = io.run(
        core,
        crate::spin_budget::SpinBudget::new(cfg.spin_ns, cfg.spin_share),
        &crate::forward::Control {
            stop: &shared.stop,
            generation: &dir.generation,
            params: &dir.params,
            stats: &dir.stats,
            epoch: shared.epoch,
        },
    );
    if let Err(e) = result {
        *lock(&shared.error) = Some(format!("{rx_if} -> {tx_if}: {e}"));
    }
}

/// Enter the configured namespace (if any) and make sleeps precise; run first in
/// every emulator thread.
pub(crate) fn prepare_thread(cfg: &EmulatorConfig) -> Result<(), EmulatorError> {
    if let Some(ns) = &cfg.netns {
        sys::netns::enter(ns).map_err(|source| EmulatorError::Setup {
            what: format!("netns {ns}"),
            source,
        })?;
    }
    sys::set_timer_slack_ns(1).map_err(|source| EmulatorError::Setup {
        what: "timer slack".into(),
        source,
    })?;
    if let Some(prio) = cfg.realtime_priority {
        // Best effort: without CAP_SYS_NICE (or with RT disabled) the emulator
        // still works, only less precisely on a busy machine.
        if let Err(e) = sys::set_realtime(prio) {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                eprintln!("causeway-netsim: SCHED_FIFO {prio} unavailable ({e}); departures may be late on a busy machine");
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lateness_lands_in_the_bucket_it_is_at_most() {
        let mut d = DirStats::default();
        for late in [0, 2_000, 2_001, 999_999, 1_000_000, 1_000_001, u64::MAX / 4] {
            d.count_late(late);
        }
        assert_eq!(d.late_hist, [2, 1, 0, 0, 0, 0, 0, 0, 2, 2]);
        assert_eq!(d.late_ns_max, u64::MAX / 4);
    }
}
