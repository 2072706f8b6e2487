//! `causeway paths`: a live TCP flow across the `dual` testbed is moved
//! between the two WAN paths by map updates on domain 0's gateway (the
//! steering program at `br0` ingress sets `skb->mark`, the gateway's
//! `fwmark` rules pick the path): the emulators' counters show which path
//! carries it, and the connection never notices (every byte arrives, in
//! order, on the one socket).

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    thread,
    time::Duration,
};

use causeway_netsim::{Profile, Testbed};
use causeway_test_support::require_root;
use causeway_tests::{
    causeway_cli::{causeway, causeway_ok},
    netsim_support::two_hosts,
};

/// Steering attached by the test; detached on drop (before the testbed
/// deletes the namespace), even when the test fails.
struct Steering {
    netns: String,
}

impl Drop for Steering {
    fn drop(&mut self) {
        let _ = causeway(&["--netns", &self.netns, "paths", "detach", "--iface", "br0"]);
    }
}

impl Steering {
    /// `causeway paths attach` on domain 0's gateway LAN port (br0) with
    /// every path of the testbed and its mark; detached on drop. Returns the
    /// guard and what the command printed.
    fn attach_every_path(tb: &Testbed) -> (Steering, String) {
        let gw = tb.gateway_netns(0).to_string();
        let marks: Vec<String> = tb
            .paths()
            .iter()
            .map(|p| format!("{}={:#x}", p.index, p.mark))
            .collect();
        let mut args = vec!["--netns", gw.as_str(), "paths", "attach", "--iface", "br0"];
        for m in &marks {
            args.extend(["--path", m.as_str()]);
        }
        let out = causeway_ok(&args);
        (Steering { netns: gw }, out)
    }
}

/// Frames each path forwarded from domain 0 to domain 1 during `d`.
fn window(tb: &Testbed, d: Duration) -> [u64; 2] {
    let fwd = |p| {
        tb.path_stats(p)
            .expect("path stats")
            .a_to_b
            .counters
            .forwarded
    };
    let before = [fwd(0), fwd(1)];
    thread::sleep(d);
    [fwd(0) - before[0], fwd(1) - before[1]]
}

/// Asserts that path `on` carried the flow during a window and the other
/// path (almost) nothing (a monitor's probes are 10 frames a second),
/// after a moment for frames already under way.
fn carried_by(tb: &Testbed, on: usize, what: &str) {
    carried_at_least(tb, on, 500, what)
}

/// [`carried_by`] with at least `frames` frames on path `on` (fewer while
/// TCP climbs back out of a retransmission timeout).
fn carried_at_least(tb: &Testbed, on: usize, frames: u64, what: &str) {
    thread::sleep(Duration::from_millis(300));
    let w = window(tb, Duration::from_secs(1));
    assert!(
        w[on] > frames && w[1 - on] < 40,
        "{what}: frames forwarded per path in 1 s: {w:?} (expected path {on})"
    );
}

/// A TCP flow from domain 0's host to domain 1's primary address (the
/// default path, 0), sending a byte pattern as fast as the WAN takes it;
/// the receiver checks every byte.
struct Flow {
    /// `tcp SRC:PORT DST:PORT`, as `causeway paths` takes it.
    name: String,
    received: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    source: thread::JoinHandle<u64>,
    sink: thread::JoinHandle<()>,
}

impl Flow {
    fn start(tb: &Testbed) -> Self {
        let (a, b) = (tb.host(0, 0).clone(), tb.host(1, 0).clone());
        let listener = tb
            .in_host(&b, || TcpListener::bind((b.ip, 0)))
            .expect("enter host")
            .expect("listen");
        let port = listener.local_addr().expect("addr").port();
        let received = Arc::new(AtomicU64::new(0));
        let sink = {
            let received = received.clone();
            thread::spawn(move || {
                let (mut s, _) = listener.accept().expect("accept");
                let mut buf = vec![0u8; 1 << 16];
                let mut off = 0u64;
                loop {
                    match s.read(&mut buf) {
                        Ok(0) => return,
                        Ok(n) => {
                            for (i, x) in buf[..n].iter().enumerate() {
                                let at = off + i as u64;
                                assert_eq!(*x, (at % 251) as u8, "byte {at} arrived wrong");
                            }
                            off += n as u64;
                            received.fetch_add(n as u64, Ordering::Relaxed);
                        }
                        Err(e) => panic!("the receiving socket failed: {e}"),
                    }
                }
            })
        };
        let mut stream = tb
            .in_host(&a, || TcpStream::connect((b.ip, port)))
            .expect("enter host")
            .expect("connect");
        let name = format!(
            "tcp {} {}",
            stream.local_addr().expect("local"),
            stream.peer_addr().expect("peer")
        );
        let stop = Arc::new(AtomicBool::new(false));
        let source = {
            let stop = stop.clone();
            thread::spawn(move || -> u64 {
                let mut sent = 0u64;
                let mut buf = vec![0u8; 1 << 16];
                while !stop.load(Ordering::Relaxed) {
                    for (i, x) in buf.iter_mut().enumerate() {
                        *x = ((sent + i as u64) % 251) as u8;
                    }
                    stream.write_all(&buf).expect("the sending socket failed");
                    sent += buf.len() as u64;
                }
                stream
                    .shutdown(std::net::Shutdown::Write)
                    .expect("shutdown");
                sent
            })
        };
        Flow {
            name,
            received,
            stop,
            source,
            sink,
        }
    }

    fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// Stops the sender; asserts every byte arrived on the one connection.
    fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        let sent = self.source.join().expect("sender");
        self.sink.join().expect("receiver");
        assert_eq!(
            self.received.load(Ordering::Relaxed),
            sent,
            "every byte arrived on the one connection"
        );
    }
}

#[test]
fn a_live_flow_moves_between_paths_by_map_updates_alone() {
    require_root!("a_live_flow_moves_between_paths_by_map_updates_alone");
    let tb = two_hosts(Profile::Dual);
    let gw = tb.gateway_netns(0).to_string();
    let (_steering, out) = Steering::attach_every_path(&tb);
    assert!(out.contains("path steering attached"), "{out}");

    let flow_run = Flow::start(&tb);
    let flow = flow_run.name.clone();
    let steer = |args: &[&str]| {
        let mut all = vec!["--netns", gw.as_str(), "paths"];
        all.extend_from_slice(args);
        causeway_ok(&all)
    };

    carried_by(&tb, 0, "unlisted flow, default route");
    steer(&["route", "--iface", "br0", "--path", "1", "--flow", &flow]);
    carried_by(&tb, 1, "flow put on path 1");
    steer(&["set", "--iface", "br0", "--path", "1", "--down"]);
    carried_by(&tb, 0, "path 1 down");
    steer(&["set", "--iface", "br0", "--path", "1"]);
    carried_by(&tb, 1, "path 1 up again");

    let shown: serde_json::Value =
        serde_json::from_str(&steer(&["show", "--iface", "br0", "--flows", "--json"]))
            .expect("paths show --json");
    let br0 = &shown[0];
    assert_eq!(br0["iface"], "br0");
    assert_eq!(br0["paths"][1]["flows"], 1, "{shown}");
    assert_eq!(br0["paths"][1]["up"], true, "{shown}");
    // Frames reach `br0` GRO-merged: count bytes (more than 1 s at 100 Mbit/s).
    assert!(
        br0["paths"][1]["bytes"].as_u64() > Some(10 << 20),
        "{shown}"
    );
    assert_eq!(
        br0["paths"][0]["packets"], 0,
        "nothing was put on path 0: {shown}"
    );
    assert!(br0["unsteered_bytes"].as_u64() > Some(10 << 20), "{shown}");
    assert_eq!(br0["flows"][0]["flow"], flow.as_str(), "{shown}");

    steer(&["unroute", "--iface", "br0", "--flow", &flow]);
    carried_by(&tb, 0, "flow taken off its path");

    flow_run.finish();

    // Bad input changes nothing and says what was wrong.
    let bad = causeway(&[
        "--netns",
        &gw,
        "paths",
        "route",
        "--iface",
        "br0",
        "--path",
        "1",
        "--flow",
        &flow,
        "--flow",
        "tcp nowhere",
    ]);
    assert_eq!(bad.status.code(), Some(1));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("PROTO SRC:PORT DST:PORT"), "{err}");
    let shown = steer(&["show", "--iface", "br0", "--flows", "--json"]);
    assert!(!shown.contains(&flow), "a bad route wrote nothing: {shown}");

    steer(&["detach", "--iface", "br0"]);
    let gone = causeway(&["--netns", &gw, "paths", "show", "--iface", "br0"]);
    assert_eq!(gone.status.code(), Some(1), "detached: nothing to show");
}

/// A `causeway paths monitor` process, killed on drop; its JSON lines
/// arrive on `events`.
struct Monitor {
    child: std::process::Child,
    events: std::sync::mpsc::Receiver<serde_json::Value>,
}

impl Monitor {
    fn start(netns: &str, args: &[&str]) -> Self {
        let mut child = std::process::Command::new(causeway_tests::causeway_cli::causeway_bin())
            .args(["--netns", netns, "paths", "monitor"])
            .args(args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the monitor");
        let out = child.stdout.take().expect("stdout");
        let (tx, events) = std::sync::mpsc::channel();
        thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str(&line) {
                    if tx.send(v).is_err() {
                        return;
                    }
                }
            }
        });
        Monitor { child, events }
    }

    /// The first event matching `want` within `limit`; panics with what
    /// came instead.
    fn wait_for(
        &self,
        what: &str,
        limit: Duration,
        want: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = std::time::Instant::now() + limit;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.events.recv_timeout(left) {
                Ok(v) if want(&v) => return v,
                Ok(v) => seen.push(v),
                Err(_) => panic!("no {what} within {limit:?}; events: {seen:?}"),
            }
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn is_state(v: &serde_json::Value, path: u64, to: &str) -> bool {
    v["event"] == "state" && v["path"] == path && v["to"] == to
}

#[test]
fn the_monitor_moves_flows_off_a_cut_path_and_home_when_it_returns() {
    require_root!("the_monitor_moves_flows_off_a_cut_path_and_home_when_it_returns");
    let tb = two_hosts(Profile::Dual);
    let gw = tb.gateway_netns(0).to_string();
    let far_gw = tb.gateway_netns(1).to_string();
    let (_steering, _) = Steering::attach_every_path(&tb);
    // Each path's far end: domain 1's gateway on that path's /30.
    let probes: Vec<String> = tb
        .paths()
        .iter()
        .map(|p| format!("{}=10.200.{}.2:7360", p.index, p.index))
        .collect();
    let _responder = Monitor::start(&far_gw, &["--listen", "0.0.0.0:7360"]);
    let monitor = Monitor::start(
        &gw,
        &[
            "--iface",
            "br0",
            "--probe",
            &probes[0],
            "--probe",
            &probes[1],
            "--interval",
            "100ms",
            "--down-after",
            "1s",
        ],
    );
    for p in [0, 1] {
        monitor.wait_for(&format!("path {p} up"), Duration::from_secs(5), |v| {
            is_state(v, p, "up")
        });
    }
    let flow = Flow::start(&tb);
    causeway_ok(&[
        "--netns", &gw, "paths", "route", "--iface", "br0", "--path", "1", "--flow", &flow.name,
    ]);
    carried_by(&tb, 1, "flow put on path 1");

    // Cut path 1: down within `down-after` (+ a probe interval and the
    // moment a state change takes), its flow moved to path 0.
    let before = flow.received();
    let cut = std::time::Instant::now();
    tb.cut_path(1).expect("cut path 1");
    monitor.wait_for("path 1 down", Duration::from_secs(3), |v| {
        is_state(v, 1, "down")
    });
    let detected = cut.elapsed();
    let moved = monitor.wait_for("the flow moved to path 0", Duration::from_secs(2), |v| {
        v["event"] == "moved" && v["to"] == 0 && v["flow"] == flow.name.as_str()
    });
    assert_eq!(moved["from"], 1);
    assert!(
        detected < Duration::from_millis(1_500),
        "path 1 declared down {detected:?} after the cut"
    );
    // The connection carries on over path 0 (TCP resends what the cut ate).
    let deadline = cut + Duration::from_secs(6);
    while flow.received() < before + (4 << 20) {
        assert!(
            std::time::Instant::now() < deadline,
            "the flow did not resume on path 0 ({} bytes since the cut)",
            flow.received() - before
        );
        thread::sleep(Duration::from_millis(20));
    }
    let resumed = cut.elapsed();
    carried_at_least(&tb, 0, 100, "path 1 cut");

    // Path 1 back: up after 3 replies in a row, the flow home again.
    tb.restore_path(1).expect("restore path 1");
    monitor.wait_for("path 1 up again", Duration::from_secs(3), |v| {
        is_state(v, 1, "up")
    });
    monitor.wait_for("the flow moved home", Duration::from_secs(2), |v| {
        v["event"] == "moved" && v["to"] == 1
    });
    carried_by(&tb, 1, "path 1 restored");
    let report = monitor.wait_for("a report", Duration::from_secs(2), |v| {
        v["event"] == "paths"
    });
    let rtt = |p: usize| report["paths"][p]["srtt_ms"].as_f64().unwrap_or(0.0);
    // The probes' RTTs are the paths' (40 and 60 ms), plus queueing behind
    // the flow on the path it loads.
    assert!((39.0..80.0).contains(&rtt(0)), "{report}");
    assert!((59.0..120.0).contains(&rtt(1)), "{report}");
    let shown: serde_json::Value = serde_json::from_str(&causeway_ok(&[
        "--netns", &gw, "paths", "show", "--iface", "br0", "--json",
    ]))
    .expect("paths show --json");
    assert_eq!(shown[0]["monitor"][1]["state"], "up", "{shown}");
    eprintln!(
        "path 1 cut: declared down after {detected:?}, 4 MiB more delivered {resumed:?} after the cut"
    );
    flow.finish();
}

/// `causeway paths show --json` of `br0` in `netns`.
fn shown(netns: &str) -> serde_json::Value {
    let text = causeway_ok(&[
        "--netns", netns, "paths", "show", "--iface", "br0", "--json",
    ]);
    serde_json::from_str(&text).expect("paths show --json")
}

/// Polls `paths show` until `want` holds, within `limit`.
fn shows(netns: &str, what: &str, limit: Duration, want: impl Fn(&serde_json::Value) -> bool) {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let v = shown(netns);
        if want(&v[0]) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {limit:?}: {v}"
        );
        thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_agents_steering_section_runs_the_controller() {
    require_root!("the_agents_steering_section_runs_the_controller");
    use causeway::clock::SyncClock;
    use causeway_tests::clock_agent::Agent;
    let tb = two_hosts(Profile::Dual);
    let gw = tb.gateway_netns(0).to_string();
    let far_gw = tb.gateway_netns(1).to_string();
    let (_steering, _) = Steering::attach_every_path(&tb);
    // Clock sync between the two gateways over path 0, and steering.
    let far = Agent::start_with(
        &far_gw,
        "wan0",
        2,
        "10.200.0.1".parse().expect("addr"),
        SyncClock::IDENTITY,
        r#"steering = { listen = "0.0.0.0:7360" }"#,
    );
    let near = Agent::start_with(
        &gw,
        "wan0",
        1,
        "10.200.0.2".parse().expect("addr"),
        SyncClock::IDENTITY,
        r#"steering = { iface = "br0", probe = [{ path = 0, addr = "10.200.0.2:7360" }, { path = 1, addr = "10.200.1.2:7360" }] }"#,
    );
    far.wait_ready();
    near.wait_ready();
    let state = |v: &serde_json::Value, p: usize| v["monitor"][p]["state"].clone();
    shows(&gw, "both paths probed up", Duration::from_secs(10), |v| {
        state(v, 0) == "up" && state(v, 1) == "up"
    });
    tb.cut_path(1).expect("cut path 1");
    shows(&gw, "path 1 down in the map", Duration::from_secs(4), |v| {
        v["paths"][1]["up"] == false && state(v, 1) == "down" && state(v, 0) == "up"
    });
    tb.restore_path(1).expect("restore path 1");
    shows(&gw, "path 1 up again", Duration::from_secs(5), |v| {
        v["paths"][1]["up"] == true && state(v, 1) == "up"
    });
}

/// Runs `causeway ARGS` with stdout on a pipe, reads `lines` lines, closes
/// the pipe and returns them with how the command ended and its stderr.
fn watch_lines(args: &[&str], lines: usize) -> (Vec<String>, std::process::ExitStatus, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(causeway_tests::causeway_cli::causeway_bin())
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn causeway");
    let out = child.stdout.take().expect("stdout");
    let got: Vec<String> = std::io::BufReader::new(out)
        .lines()
        .take(lines)
        .map(|l| l.expect("a line"))
        .collect();
    // The reader is dropped here: the pipe closes; the next write ends it.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "causeway {} kept running after its stdout closed",
                args.join(" ")
            );
        }
        thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    (got, status, err)
}

/// Exit 0, or killed by SIGPIPE (a shell's 141), with nothing on stderr.
fn ended_quietly(status: std::process::ExitStatus, err: &str, what: &str) {
    use std::os::unix::process::ExitStatusExt;
    assert!(
        status.code() == Some(0) || status.code() == Some(141) || status.signal() == Some(13),
        "{what} ended with {status} on a closed pipe: {err}"
    );
    assert!(
        err.is_empty(),
        "{what} wrote to stderr on a closed pipe: {err}"
    );
}

#[test]
fn paths_show_watch_redraws_rates_and_shares_and_stops_quietly_on_a_closed_pipe() {
    require_root!("paths_show_watch_redraws_rates_and_shares_and_stops_quietly_on_a_closed_pipe");
    let tb = two_hosts(Profile::Dual);
    let gw = tb.gateway_netns(0).to_string();
    let (_steering, _) = Steering::attach_every_path(&tb);
    let flow_run = Flow::start(&tb);
    let flow = flow_run.name.clone();
    causeway_ok(&[
        "--netns", &gw, "paths", "route", "--iface", "br0", "--path", "1", "--flow", &flow,
    ]);
    carried_by(&tb, 1, "flow put on path 1");

    // NDJSON: one object per sample; from the second on, what each path
    // carried in the interval.
    let args = [
        "--netns",
        &gw,
        "paths",
        "show",
        "--iface",
        "br0",
        "--watch",
        "--json",
        "--interval",
        "300ms",
    ];
    let (lines, status, err) = watch_lines(&args, 4);
    assert_eq!(lines.len(), 4, "{lines:?} {err}");
    let samples: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    let at: Vec<f64> = samples
        .iter()
        .map(|v| v["at_s"].as_f64().unwrap_or(-1.0))
        .collect();
    assert!(
        at.windows(2).all(|w| w[1] >= w[0] + 0.25),
        "every --interval: {at:?}"
    );
    assert!(
        samples[0]["interfaces"][0]["carried"].is_null(),
        "{}",
        samples[0]
    );
    for v in &samples[1..] {
        let br0 = &v["interfaces"][0];
        assert_eq!(br0["iface"], "br0", "{v}");
        assert_eq!(br0["paths"][1]["flows"], 1, "{v}");
        let c = &br0["carried"];
        // The flow (path 1, 100 Mbit/s) is all that is steered.
        assert_eq!(c[1]["path"], 1, "{v}");
        assert!(c[1]["share"].as_f64() == Some(1.0), "{v}");
        assert!(c[0]["share"].as_f64() == Some(0.0), "{v}");
        let rate = c[1]["bytes_per_s"].as_f64().unwrap_or(0.0);
        // Above 1 MB/s (a loaded host slows the sender), at most the link's 12.5 MB/s + 20 %.
        assert!(
            (1e6..=15e6).contains(&rate),
            "path 1 carried {rate} B/s: {v}"
        );
    }
    ended_quietly(status, &err, "paths show --watch --json");

    // The table: redrawn every interval (no escape codes into a pipe), with
    // the rate and share columns.
    let args = [
        "--netns",
        &gw,
        "paths",
        "show",
        "--iface",
        "br0",
        "--watch",
        "--interval",
        "200ms",
    ];
    let (lines, status, err) = watch_lines(&args, 14);
    let text = lines.join("\n");
    assert!(!text.contains('\x1b'), "{text}");
    assert!(text.matches("MBIT_S").count() >= 2, "{text}");
    assert!(text.contains("100%"), "path 1's share: {text}");
    ended_quietly(status, &err, "paths show --watch");

    flow_run.finish();
}
