//! The forwarding loop of one direction: receive frames on one interface, pass
//! them through the link core, send them out of the other at their departure time.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crate::core::LinkCore;
use crate::csum::{finish_frame, FrameState, VNET_HDR_LEN};
use crate::emulator::{prepare_thread, DirStats, EmulatorConfig, EmulatorError};
use crate::params::LinkParams;
use crate::spin_budget::SpinBudget;
use crate::sys;
use crate::sys::packet::PacketSocket;

const BATCH: usize = 64;
/// Longest sleep when nothing is scheduled (bounds how late a stop or a
/// parameter change is noticed by an idle direction).
const IDLE_WAIT_NS: u64 = 20_000_000;
/// Below this minimum one-way delay, every arrival wakes the thread (a frame could
/// be due almost at once); above it, arrivals are read in batches.
const COALESCE_MIN_DELAY_NS: u64 = 200_000;
/// Room above the MTU for the Ethernet header and VLAN tags.
const FRAME_HEADROOM: usize = 14 + 8;

/// What the loop shares with the emulator handle.
pub(crate) struct Control<'a> {
    pub stop: &'a AtomicBool,
    pub generation: &'a AtomicU64,
    pub params: &'a Mutex<LinkParams>,
    pub stats: &'a Mutex<DirStats>,
    pub epoch: Instant,
}

fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

pub(crate) struct DirectionIo {
    rx: PacketSocket,
    tx: PacketSocket,
    buf_len: usize,
}

fn setup_err(what: String) -> impl FnOnce(io::Error) -> EmulatorError {
    move |source| EmulatorError::Setup { what, source }
}

impl DirectionIo {
    /// Open the sockets in the emulator's namespace. The first direction also turns
    /// the offloads of both interfaces off (when configured).
    pub fn open(
        cfg: &EmulatorConfig,
        rx_if: &str,
        tx_if: &str,
        first: bool,
    ) -> Result<Self, EmulatorError> {
        prepare_thread(cfg)?;
        if first && cfg.disable_offloads {
            for name in [rx_if, tx_if] {
                sys::netif::disable_offloads(name)
                    .map_err(setup_err(format!("offloads of {name}")))?;
            }
        }
        let rx_idx = sys::netif::ifindex(rx_if).map_err(setup_err(format!("interface {rx_if}")))?;
        let tx_idx = sys::netif::ifindex(tx_if).map_err(setup_err(format!("interface {tx_if}")))?;
        let mtu = sys::netif::mtu(rx_if).map_err(setup_err(format!("MTU of {rx_if}")))?;
        let rx = PacketSocket::receiver(rx_idx, 16 << 20)
            .map_err(setup_err(format!("receive socket on {rx_if}")))?;
        let tx = PacketSocket::sender(tx_idx, 8 << 20)
            .map_err(setup_err(format!("send socket on {tx_if}")))?;
        Ok(Self {
            rx,
            tx,
            buf_len: VNET_HDR_LEN + mtu as usize + FRAME_HEADROOM,
        })
    }

    fn new_buf(&self, pool: &mut Vec<Box<[u8]>>) -> Box<[u8]> {
        pool.pop()
            .unwrap_or_else(|| vec![0u8; self.buf_len].into_boxed_slice())
    }

    /// Forward until `ctl.stop` is set; returns on the first socket error.
    pub fn run(
        self,
        mut core: LinkCore<Box<[u8]>>,
        mut budget: SpinBudget,
        ctl: &Control<'_>,
    ) -> io::Result<()> {
        let now_ns = || ctl.epoch.elapsed().as_nanos() as u64;
        let mut pool: Vec<Box<[u8]>> = Vec::new();
        let mut rx_bufs: Vec<Box<[u8]>> = (0..BATCH).map(|_| self.new_buf(&mut pool)).collect();
        let mut lens = [0usize; BATCH];
        let mut pending: Vec<(Box<[u8]>, u32)> = Vec::with_capacity(BATCH);
        let mut seen_generation = ctl.generation.load(Ordering::Acquire);
        let mut extra = DirStats::default();
        let mut next_drop_poll = 0u64;
        let mut stamps = [0u64; BATCH];
        let mut last_arrival = 0u64;
        while !ctl.stop.load(Ordering::Acquire) {
            let generation = ctl.generation.load(Ordering::Acquire);
            if generation != seen_generation {
                seen_generation = generation;
                core.set_params(*ctl.params.lock().unwrap_or_else(|p| p.into_inner()));
            }
            // Receive everything waiting.
            loop {
                // Kernel receive times are CLOCK_REALTIME: map them onto our
                // clock with two readings taken back to back (reading one of
                // them after the receive call would shift every arrival, and
                // so every departure, earlier by that call's duration).
                let real_minus_mono = realtime_ns() as i128 - now_ns() as i128;
                let got = self.rx.recv_batch(&mut rx_bufs, &mut lens, &mut stamps)?;
                let now = now_ns();
                for i in 0..got {
                    let arrival = match stamps[i] {
                        0 => now,
                        t => (t as i128 - real_minus_mono).clamp(last_arrival as i128, now as i128)
                            as u64,
                    };
                    last_arrival = arrival;
                    if lens[i] > self.buf_len || lens[i] < VNET_HDR_LEN {
                        extra.oversize += 1;
                        continue;
                    }
                    let (hdr, frame) = rx_bufs[i][..lens[i]].split_at_mut(VNET_HDR_LEN);
                    let hdr: &[u8; VNET_HDR_LEN] =
                        (&*hdr).try_into().expect("split at VNET_HDR_LEN");
                    match finish_frame(hdr, frame) {
                        FrameState::Complete => {}
                        FrameState::ChecksumFixed => extra.checksums_fixed += 1,
                        FrameState::Gso => {
                            extra.gso_dropped += 1;
                            continue;
                        }
                        FrameState::Malformed => {
                            extra.oversize += 1;
                            continue;
                        }
                    }
                    let fresh = self.new_buf(&mut pool);
                    let frame = std::mem::replace(&mut rx_bufs[i], fresh);
                    core.on_arrival(arrival, frame, (lens[i] - VNET_HDR_LEN) as u32);
                }
                if got < BATCH {
                    break;
                }
            }
            // Send everything due.
            let now = now_ns();
            while pending.len() < BATCH {
                let Some(departure) = core.next_departure() else {
                    break;
                };
                let Some((frame, len)) = core.pop_due(now) else {
                    break;
                };
                extra.count_late(now - departure);
                pending.push((frame, len));
            }
            if !pending.is_empty() {
                let slices: Vec<&[u8]> = pending
                    .iter()
                    .map(|(f, l)| &f[VNET_HDR_LEN..VNET_HDR_LEN + *l as usize])
                    .collect();
                let sent = match self.tx.send_batch(&slices) {
                    Ok(n) => n,
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EMSGSIZE)) => {
                        extra.tx_errors += 1;
                        1 // drop the frame the device refused
                    }
                    Err(e) => return Err(e),
                };
                for (frame, _) in pending.drain(..sent) {
                    pool.push(frame);
                }
                if sent == 0 {
                    // The device queue is full: back off briefly instead of
                    // spinning (this thread may be SCHED_FIFO).
                    std::thread::sleep(std::time::Duration::from_micros(20));
                }
            }
            if now >= next_drop_poll {
                extra.rx_socket_drops += self.rx.take_drops()?;
                next_drop_poll = now + 100_000_000;
            }
            Self::publish(&core, &extra, ctl);
            if !pending.is_empty() || core.next_departure().is_some_and(|t| t <= now) {
                continue; // more to send right away (or the device queue was full)
            }
            let wait = core
                .next_departure()
                .map_or(IDLE_WAIT_NS, |t| (t - now).min(IDLE_WAIT_NS));
            // Frames carry their kernel arrival time, so while frames are in flight
            // and none can be due sooner than `min_delay` after arriving, there is
            // no need to wake for each arrival: sleep until the next departure (at
            // most half the minimum delay) and read the arrivals in one batch.
            let p = core.params();
            let min_delay = if p.reorder > 0.0 {
                0
            } else {
                p.delay_ns.saturating_sub(p.jitter_ns)
            };
            if budget.spin_now(now, wait) {
                std::hint::spin_loop();
            } else if core.in_flight() > 0 && min_delay >= COALESCE_MIN_DELAY_NS {
                let asked = budget.sleep_for(wait).min(min_delay / 2);
                let slept_at = now_ns();
                std::thread::sleep(std::time::Duration::from_nanos(asked));
                budget.woke(now_ns().saturating_sub(slept_at + asked));
            } else {
                let asked = budget.sleep_for(wait);
                let slept_at = now_ns();
                let readable = sys::wait_readable(std::os::fd::AsFd::as_fd(&self.rx), asked)?;
                if !readable {
                    budget.woke(now_ns().saturating_sub(slept_at + asked));
                }
            }
            extra.spin_window_ns = budget.window_ns();
        }
        Ok(())
    }

    fn publish(core: &LinkCore<Box<[u8]>>, extra: &DirStats, ctl: &Control<'_>) {
        let mut s = ctl.stats.lock().unwrap_or_else(|p| p.into_inner());
        *s = DirStats {
            params: Some(*core.params()),
            counters: core.counters(),
            in_flight: core.in_flight() as u64,
            ..*extra
        };
    }
}
