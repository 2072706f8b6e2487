//! A `causeway agent` process run by a test: started with a generated
//! configuration in a network namespace; on drop it is stopped (SIGTERM)
//! and its interface detached, so no pins outlive the test. Also the
//! two-domain accuracy measurement shared by the test and the bench.

use std::{
    collections::BTreeMap,
    net::IpAddr,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use causeway::{
    agent::{
        control::{self, Request},
        report::AgentReport,
    },
    clock::{maps::ClockMaps, source::raw_tai_now, Source, SyncClock},
    datapath::{Layout, NetnsScope},
};
use causeway_netsim::Testbed;

use crate::{causeway_cli::causeway_bin, netem_wan::Ends};

pub struct Agent {
    child: Option<Child>,
    pub netns: String,
    pub iface: String,
    config: PathBuf,
}

impl Agent {
    /// Starts an agent in `netns` owning `iface`, probing `peer` every
    /// 100 ms, with the synthetic clock `clock`.
    pub fn start(netns: &str, iface: &str, host_id: u32, peer: IpAddr, clock: SyncClock) -> Agent {
        Self::start_with(netns, iface, host_id, peer, clock, "")
    }

    /// As [`Agent::start`], with `top` (top-level TOML lines, e.g.
    /// `metrics = "127.0.0.1:9464"`) added to the configuration.
    pub fn start_with(
        netns: &str,
        iface: &str,
        host_id: u32,
        peer: IpAddr,
        clock: SyncClock,
        top: &str,
    ) -> Agent {
        Self::start_full(netns, iface, host_id, peer, clock, top, "")
    }

    /// As [`Agent::start_with`], with `peer_lines` (TOML lines of the peer's
    /// entry, e.g. `key_file = "/tmp/k"`) added to the peer.
    pub fn start_full(
        netns: &str,
        iface: &str,
        host_id: u32,
        peer: IpAddr,
        clock: SyncClock,
        top: &str,
        peer_lines: &str,
    ) -> Agent {
        let config =
            std::env::temp_dir().join(format!("cw-clock-{}-{netns}.toml", std::process::id()));
        let text = format!(
            "host_id = {host_id}\n{top}\n[[interfaces]]\nname = \"{iface}\"\n[clock]\ninterval = \"100ms\"\n\
             [[clock.peers]]\nname = \"peer\"\naddr = \"{peer}:7339\"\n{peer_lines}\n\
             [clock.synthetic]\noffset_ns = {}\ndrift_ppb = {}\nepoch_ns = {}\n",
            clock.offset_ns, clock.drift_ppb, clock.epoch_ns
        );
        std::fs::write(&config, text).expect("write the agent config");
        let mut agent = Agent {
            child: None,
            netns: netns.to_string(),
            iface: iface.to_string(),
            config,
        };
        agent.spawn();
        agent
    }

    fn spawn(&mut self) {
        let child = Command::new(causeway_bin())
            .args(["--netns", &self.netns, "agent", "--config"])
            .arg(&self.config)
            // Warnings only in test output unless the caller asks for more.
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start causeway agent");
        self.child = Some(child);
    }

    /// Stops the process with SIGTERM and waits; pins and programs stay.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("agent is running");
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        c.wait().expect("wait for the agent")
    }

    /// Starts the process again with the same configuration.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop the agent first");
        self.spawn();
    }

    pub fn socket(&self) -> PathBuf {
        causeway::agent::default_socket(&Layout::default(), &NetnsScope::Named(self.netns.clone()))
    }

    pub fn status(&self) -> Option<AgentReport> {
        control::request(&self.socket(), &Request::ClockStatus)
            .ok()?
            .clock
    }

    /// Waits until the control socket answers.
    pub fn wait_ready(&self) -> AgentReport {
        self.wait_ready_within(Duration::from_secs(30))
    }

    /// Waits up to `limit` until the control socket answers.
    pub fn wait_ready_within(&self, limit: Duration) -> AgentReport {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(r) = self.status() {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "agent in {} did not come up",
                self.netns
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.stop();
        }
        let _ = Command::new(causeway_bin())
            .args(["--netns", &self.netns, "detach", "--iface", &self.iface])
            .output();
        let _ = std::fs::remove_file(&self.config);
    }
}

/// Ground truth: peer clock minus local clock when the local clock reads `local`.
pub fn true_offset(local_clock: &SyncClock, peer_clock: &SyncClock, local: u64) -> f64 {
    let e = local_clock.epoch_ns as i128;
    let x = (local as i128 - i128::from(local_clock.offset_ns) - e) as f64
        / (1.0 + local_clock.drift_ppb as f64 * 1e-9);
    let raw = (e + x.round() as i128) as u64;
    (peer_clock.apply(raw) as i128 - local as i128) as f64
}

/// Ground truth: the peer clock's rate minus the local clock's, ppm.
fn truth_drift_ppm(local_clock: &SyncClock, peer_clock: &SyncClock) -> f64 {
    let (l, p) = (
        local_clock.drift_ppb as f64 * 1e-9,
        peer_clock.drift_ppb as f64 * 1e-9,
    );
    ((1.0 + p) / (1.0 + l) - 1.0) * 1e6
}

/// Errors of one timestamp source's estimates against the ground truth.
pub struct SourceErrors {
    pub abs: Vec<f64>,
    /// |error| of the regression fit alone (diagnostics).
    pub fit_abs: Vec<f64>,
    /// Estimates whose error was within their own bound.
    pub within_bound: usize,
}

pub fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// Runs agents on host 0 of domains 0 and 1 (synthetic clocks: A +5 ms
/// −30 ppm, B −20 ms +70 ppm) for `warmup` + `measure`, polls A's estimate
/// of B every 200 ms, checks that the kernel estimate is the one published
/// in the pinned map, prints a table and returns the errors per source.
pub fn measure_pair(
    tb: &Testbed,
    label: &str,
    warmup: Duration,
    measure: Duration,
) -> BTreeMap<Source, SourceErrors> {
    measure_ends(
        &Ends::of_testbed(tb),
        Some(tb),
        false,
        label,
        warmup,
        measure,
    )
}

/// [`measure_pair`] between any two hosts (interface `eth0` each): over
/// netem, say; `tb` adds the emulator's own lateness to the output. With
/// `slow_guest` (TCG), a status poll that gets no answer (its 5 s timeout)
/// is counted and printed instead of failing the test, and each agent gets
/// 120 s instead of 30 to start (loading and verifying its programs took
/// 14 s at host load 10 and over 30 s at load 18).
pub fn measure_ends(
    ends: &Ends,
    tb: Option<&Testbed>,
    slow_guest: bool,
    label: &str,
    warmup: Duration,
    measure: Duration,
) -> BTreeMap<Source, SourceErrors> {
    let epoch = raw_tai_now();
    let clock_a = SyncClock {
        offset_ns: 5_000_000,
        drift_ppb: -30_000,
        epoch_ns: epoch,
    };
    let clock_b = SyncClock {
        offset_ns: -20_000_000,
        drift_ppb: 70_000,
        epoch_ns: epoch,
    };
    let agent_a = Agent::start(ends.a_netns, "eth0", 1, IpAddr::V4(ends.b_ip), clock_a);
    let agent_b = Agent::start(ends.b_netns, "eth0", 2, IpAddr::V4(ends.a_ip), clock_b);
    let start_limit = Duration::from_secs(if slow_guest { 120 } else { 30 });
    agent_a.wait_ready_within(start_limit);
    let lateness_before = tb.and_then(|t| t.path_stats(0).ok());
    agent_b.wait_ready_within(start_limit);
    std::thread::sleep(warmup);
    let mut errors: BTreeMap<Source, SourceErrors> = BTreeMap::new();
    // CAUSEWAY_CLOCK_TRACE=1 prints every kernel-stamped estimate polled.
    let trace = std::env::var_os("CAUSEWAY_CLOCK_TRACE").is_some();
    let end = Instant::now() + measure;
    let mut last = None;
    let mut missed = 0usize;
    while Instant::now() < end {
        let Some(r) = agent_a.status() else {
            assert!(slow_guest, "{label}: agent A did not answer a poll");
            missed += 1;
            continue;
        };
        let peer = r.session.peers.first().expect("one peer");
        for s in &peer.sources {
            let err = s.offset_ns - true_offset(&clock_a, &clock_b, s.at_local_ns);
            let e = errors.entry(s.source).or_insert(SourceErrors {
                abs: Vec::new(),
                fit_abs: Vec::new(),
                within_bound: 0,
            });
            e.abs.push(err.abs());
            let fit_err = s.fit_offset_ns - true_offset(&clock_a, &clock_b, s.at_local_ns);
            e.fit_abs.push(fit_err.abs());
            e.within_bound += usize::from(err.abs() <= s.error_bound_ns);
            if trace && s.source == Source::Kernel {
                eprintln!(
                    "{label}: trace kernel err {:+.1} µs fit {:+.1} µs bound {:.1} µs drift err {:+.3} ppm min rtt {} ns used {}",
                    err / 1e3,
                    fit_err / 1e3,
                    s.error_bound_ns / 1e3,
                    s.drift_ppm - (truth_drift_ppm(&clock_a, &clock_b)),
                    s.min_rtt_ns,
                    s.samples_used
                );
            }
        }
        last = Some(r);
        std::thread::sleep(Duration::from_millis(200));
    }
    if missed > 0 {
        eprintln!("{label}: {missed} status polls got no answer");
    }
    let r = last.expect("measured at least once");
    // The emulator's own forwarding lateness per direction: a difference
    // between the directions is a path asymmetry no endpoint can observe.
    if let (Some(b0), Some(Ok(b1))) = (lateness_before, tb.map(|t| t.path_stats(0))) {
        let mean = |l0: u64, l1: u64, f0: u64, f1: u64| {
            (l1.saturating_sub(l0)) as f64 / (f1.saturating_sub(f0)).max(1) as f64 / 1e3
        };
        eprintln!(
            "{label}: emulator mean lateness A→B {:.1} µs, B→A {:.1} µs (spin windows {} and {} µs)",
            mean(
                b0.a_to_b.late_ns_total,
                b1.a_to_b.late_ns_total,
                b0.a_to_b.counters.forwarded,
                b1.a_to_b.counters.forwarded
            ),
            mean(
                b0.b_to_a.late_ns_total,
                b1.b_to_a.late_ns_total,
                b0.b_to_a.counters.forwarded,
                b1.b_to_a.counters.forwarded
            ),
            b1.a_to_b.spin_window_ns / 1_000,
            b1.b_to_a.spin_window_ns / 1_000,
        );
        let hist = |h0: &[u64], h1: &[u64]| {
            let bounds = causeway_netsim::emulator::LATE_BUCKETS_NS;
            h0.iter()
                .zip(h1)
                .enumerate()
                .filter(|(_, (a, b))| b > a)
                .map(|(i, (a, b))| match bounds.get(i) {
                    Some(ub) => format!("≤{}µs:{}", ub / 1_000, b - a),
                    None => format!(">{}µs:{}", bounds[bounds.len() - 1] / 1_000, b - a),
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        eprintln!(
            "{label}: emulator lateness A→B {}; B→A {}",
            hist(&b0.a_to_b.late_hist, &b1.a_to_b.late_hist),
            hist(&b0.b_to_a.late_hist, &b1.b_to_a.late_hist)
        );
    }
    // The published map value is the selected estimate.
    let scope = NetnsScope::Named(ends.a_netns.to_string());
    let paths = Layout::default().iface(&scope, "eth0").expect("paths");
    let maps = ClockMaps::from_pins(&paths.maps_dir).expect("pinned clock maps");
    let published = maps
        .peer(IpAddr::V4(ends.b_ip))
        .expect("map lookup")
        .expect("estimate published");
    assert_eq!(
        published.source,
        Source::Kernel.wire(),
        "{label}: the kernel source must be selected"
    );
    let iface = &r.interfaces[0];
    eprintln!(
        "{label}: A stamped rx {} tx {} (skipped {}), session: {:?}",
        iface.stamps_rx, iface.stamps_tx, iface.stamps_skipped, r.session.ignored
    );
    eprintln!(
        "{label}: {:<16} {:>8} {:>10} {:>10} {:>10} {:>13} {:>14}",
        "source", "n", "p50 µs", "p99 µs", "max µs", "within bound", "fit-only p99"
    );
    for (s, e) in &errors {
        eprintln!(
            "{label}: {:<16} {:>8} {:>10.1} {:>10.1} {:>10.1} {:>12.1}% {:>14.1}",
            s.to_string(),
            e.abs.len(),
            quantile(&e.abs, 0.5) / 1e3,
            quantile(&e.abs, 0.99) / 1e3,
            quantile(&e.abs, 1.0) / 1e3,
            100.0 * e.within_bound as f64 / e.abs.len() as f64,
            quantile(&e.fit_abs, 0.99) / 1e3
        );
    }
    errors
}
