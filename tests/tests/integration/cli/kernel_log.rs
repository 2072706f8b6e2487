//! `causeway log` shows the eBPF programs' records live: on a veth in a
//! namespace made here, an ARP request (a frame the classifier cannot
//! classify: reason `not-ip`) arriving at the attached interface appears
//! in `causeway log --follow` once logging is on, and nothing appears
//! while it is off (the default after attach, and again after `--off`).
//! Needs root (the shared gate: fails under CI without it).

use std::{
    io::{BufRead as _, BufReader},
    net::UdpSocket,
    process::{Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use causeway_test_support::{netns::VethLink, require_root};
use causeway_tests::causeway_cli::{causeway, causeway_bin, causeway_ok, Attachment};
use serde_json::Value;

/// Makes side b send an ARP request to side a: b forgets a's address and
/// sends one UDP datagram to it.
fn provoke_arp(link: &VethLink) {
    let _ = Command::new("ip")
        .args([
            "-n",
            link.b.name(),
            "neigh",
            "del",
            &link.a_addr,
            "dev",
            &link.b_if,
        ])
        .output();
    let to = format!("{}:9", link.a_addr);
    link.b.in_ns(move || {
        let socket = UdpSocket::bind("0.0.0.0:0").expect("bind a UDP socket");
        // Queued behind the ARP request; whether it is delivered is no matter.
        let _ = socket.send_to(b"causeway log test", &to);
        std::thread::sleep(Duration::from_millis(200));
    });
}

/// Frames the classifier of side a left unclassified so far.
fn unclassified(link: &VethLink) -> u64 {
    let out = causeway_ok(&[
        "--netns",
        link.a.name(),
        "stats",
        "--json",
        "--iface",
        &link.a_if,
    ]);
    let stats: Value = serde_json::from_str(&out).expect("stats --json");
    stats["interfaces"][0]["unclassified"]["packets"]
        .as_u64()
        .expect("unclassified packets")
}

/// Provokes an ARP request and checks that the classifier saw it.
fn provoke_counted_arp(link: &VethLink) {
    let before = unclassified(link);
    provoke_arp(link);
    assert!(
        unclassified(link) > before,
        "the ARP request never reached side a"
    );
}

/// `causeway --netns A log --iface IF`: what is waiting in the buffer.
fn drain(link: &VethLink) -> String {
    causeway_ok(&["--netns", link.a.name(), "log", "--iface", &link.a_if])
}

#[test]
fn causeway_log_shows_a_live_unclassified_reason_only_while_on() {
    require_root!();
    let link = VethLink::new(71);
    let ns = link.a.name().to_string();
    let _attached = Attachment::new(&ns, &link.a_if, &["--mode", "skb"]);

    // Off after attach: the frame is counted, nothing is logged.
    provoke_counted_arp(&link);
    let out = causeway(&["--netns", &ns, "log", "--iface", &link.a_if]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "", "logged while off");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("logging is off"),
        "{out:?}"
    );

    // On: a follower sees the next one as it happens.
    let on = causeway_ok(&["--netns", &ns, "log", "--iface", &link.a_if, "--on"]);
    assert_eq!(on, format!("{}: logging on\n", link.a_if));
    let mut follower = Command::new(causeway_bin())
        .args([
            "--netns", &ns, "log", "--iface", &link.a_if, "--follow", "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start causeway log --follow");
    let stdout = follower.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    provoke_arp(&link);
    let line = rx.recv_timeout(Duration::from_secs(10));
    let _ = follower.kill();
    let _ = follower.wait();
    let _ = reader.join();
    let line = line.expect("no record from causeway log --follow within 10 s");
    let record: Value = serde_json::from_str(&line).expect("a JSON record");
    assert_eq!(record["iface"], link.a_if.as_str(), "{line}");
    assert_eq!(record["level"], "info", "{line}");
    let message = record["message"].as_str().expect("a message");
    assert!(
        message.starts_with("unclassified ingress frame: not-ip, "),
        "{line}"
    );

    // Off again: nothing more.
    let off = causeway_ok(&["--netns", &ns, "log", "--iface", &link.a_if, "--off"]);
    assert_eq!(off, format!("{}: logging off\n", link.a_if));
    let _ = drain(&link); // whatever the follower left
    provoke_counted_arp(&link);
    assert_eq!(drain(&link), "", "logged after --off");
}
