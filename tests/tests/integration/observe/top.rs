//! `causeway top` in a real terminal: tmux runs it (detached, fixed size)
//! against an agent on a veth pair with a shaping policy; capture-pane
//! reads the screen. It shows the classes, the shaping and the clock peer,
//! redraws in place (one title, counters growing between captures), and
//! `q` ends it.

use causeway_test_support::require_root;
use std::{
    net::IpAddr,
    process::{Command, Output},
    time::{Duration, Instant},
};

use causeway::{clock::source::raw_tai_now, clock::SyncClock};
use causeway_test_support::netns::VethLink;
use causeway_tests::{
    causeway_cli::{causeway_bin, causeway_ok},
    clock_agent::Agent,
};

/// A tmux server of its own (`-L`), killed on drop with everything in it.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("run tmux (cargo xtask setup installs it)")
    }

    fn capture(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }

    fn alive(&self) -> bool {
        self.run(&["has-session", "-t", "top"]).status.success()
    }

    /// Waits until the screen satisfies `ok`; returns it.
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let screen = self.capture();
            if ok(&screen) {
                return screen;
            }
            assert!(Instant::now() < deadline, "{what}; the screen:\n{screen}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// The PACKETS column of `class`'s row in the classes table.
fn packets(screen: &str, iface: &str, class: &str) -> Option<u64> {
    screen.lines().find_map(|l| {
        let row = l.trim_matches(|c: char| c == '│' || c.is_whitespace());
        let words: Vec<&str> = row.split_whitespace().collect();
        (words.first() == Some(&iface) && words.get(1) == Some(&class))
            .then(|| words.get(2)?.parse().ok())
            .flatten()
    })
}

#[test]
fn causeway_top_redraws_classes_shaping_and_peers_in_place() {
    require_root!("causeway_top_redraws_classes_shaping_and_peers_in_place");
    let link = VethLink::new(94);
    let ip = |s: &str| s.parse::<IpAddr>().expect("test address");
    let clock = |offset_ns| SyncClock {
        offset_ns,
        drift_ppb: 0,
        epoch_ns: raw_tai_now(),
    };
    let a_ns = link.a.name().to_string();
    let agent = Agent::start(&a_ns, &link.a_if, 1, ip(&link.b_addr), clock(1_000_000));
    let _b = Agent::start(
        link.b.name(),
        &link.b_if,
        2,
        ip(&link.a_addr),
        clock(-1_000_000),
    );
    agent.wait_ready();
    let file = std::env::temp_dir().join(format!("cw-top-policy-{}", std::process::id()));
    std::fs::write(&file, super::POLICY).expect("write policy");
    causeway_ok(&[
        "--netns",
        &a_ns,
        "policy",
        "apply",
        "--iface",
        &link.a_if,
        file.to_str().expect("path"),
    ]);
    let _ = std::fs::remove_file(&file);

    let tmux = Tmux {
        socket: format!("cw-top-{}", std::process::id()),
    };
    let command = format!(
        "{} --netns {a_ns} top --interval 300ms",
        causeway_bin().display()
    );
    let started = tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "140",
        "-y",
        "40",
        &command,
    ]);
    assert!(started.status.success(), "{started:?}");

    let first = tmux.wait_for("no clock peer with a kernel estimate", |s| {
        s.contains("clock peers")
            && s.contains("kernel")
            && packets(s, &link.a_if, "clock").is_some()
    });
    for want in [
        "classes (XDP ingress)",
        "shaping (TC egress",
        "10.00",
        "20.00",
        "drop",
        "peer",
        "10.77.94.2:7339",
    ] {
        assert!(first.contains(want), "no {want:?} on screen:\n{first}");
    }
    let n0 = packets(&first, &link.a_if, "clock").expect("clock row");
    // The probes go on: the same rows, larger numbers, still one screen.
    let later = tmux.wait_for("the clock counter did not grow", |s| {
        packets(s, &link.a_if, "clock").is_some_and(|n| n > n0 + 5)
    });
    assert_eq!(
        later.matches("causeway top").count(),
        1,
        "redrawn in place:\n{later}"
    );
    assert_eq!(later.lines().count(), first.lines().count());

    tmux.run(&["send-keys", "-t", "top", "q"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while tmux.alive() {
        assert!(
            Instant::now() < deadline,
            "q did not end causeway top:\n{}",
            tmux.capture()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
