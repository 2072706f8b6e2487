//! The emulated link through real traffic: rate serialization, random loss and
//! in-order jitter, measured end to end and with the emulator's counters.

use causeway_test_support::require_root;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use causeway_netsim::load::{blast, Sink};
use causeway_netsim::{LinkParams, Profile, Testbed};

fn one_path(params: LinkParams) -> Testbed {
    Testbed::builder()
        .domains(2)
        .hosts_per_domain(1)
        .wan(Profile::Custom(vec![params]))
        .build()
        .expect("build")
}

/// A UDP sink in domain 1 and a connected sender in domain 0.
fn udp_pair(tb: &Testbed, port: u16) -> (UdpSocket, Sink) {
    let (a, b) = (tb.host(0, 0), tb.host(1, 0));
    let rx = tb
        .in_host(b, || UdpSocket::bind(("0.0.0.0", port)))
        .expect("ns")
        .expect("bind");
    let tx = tb
        .in_host(a, || UdpSocket::bind("0.0.0.0:0"))
        .expect("ns")
        .expect("bind");
    tx.connect((b.ip, port)).expect("connect");
    (tx, Sink::start(rx).expect("sink"))
}

#[test]
fn overload_is_serialized_at_the_configured_rate() {
    require_root!("overload_is_serialized_at_the_configured_rate");
    // 20 Mbit/s with a 2 MB queue (0.8 s: a sender stalled by a busy machine
    // must not let the link go idle), offered 40 Mbit/s for 3 s.
    let params = LinkParams {
        queue_bytes: 2 << 20,
        ..LinkParams::wan(1.0, 20.0, 0.0)
    };
    let tb = one_path(params);
    let (tx, _sink) = udp_pair(&tb, 7201);
    let frames = |tb: &Testbed| {
        tb.path_stats(0)
            .expect("stats")
            .a_to_b
            .counters
            .forwarded_bytes
    };
    std::thread::scope(|s| {
        let sender =
            s.spawn(|| blast(&tx, 40_000_000, 1000, Duration::from_secs(3)).expect("blast"));
        std::thread::sleep(Duration::from_millis(1000)); // the queue fills (≈ 0.8 s)
        let (b0, t0) = (frames(&tb), Instant::now());
        std::thread::sleep(Duration::from_millis(1500));
        let (b1, t1) = (frames(&tb), Instant::now());
        let rate = (b1 - b0) as f64 * 8.0 / (t1 - t0).as_secs_f64();
        assert!(
            (rate / 20e6 - 1.0).abs() < 0.02,
            "frame rate {rate} bit/s, configured 20 Mbit/s"
        );
        sender.join().expect("sender");
    });
    let c = tb.path_stats(0).expect("stats").a_to_b.counters;
    assert!(
        c.dropped_queue > 0,
        "40 on 20 Mbit/s must overflow the drop-tail queue: {c:?}"
    );
    assert_eq!(c.dropped_loss, 0);
}

#[test]
fn random_loss_matches_its_probability() {
    require_root!("random_loss_matches_its_probability");
    let p = 0.05;
    let tb = one_path(LinkParams {
        loss: p,
        ..LinkParams::wan(1.0, 0.0, 0.0)
    });
    let (tx, sink) = udp_pair(&tb, 7202);
    let sent = blast(&tx, 40_000_000, 500, Duration::from_secs(2)).expect("blast");
    std::thread::sleep(Duration::from_millis(100)); // the last frames land
    let c = tb.path_stats(0).expect("stats").a_to_b.counters;
    let n = c.received as f64;
    let measured = c.dropped_loss as f64 / n;
    let half = 3.29 * (p * (1.0 - p) / n).sqrt(); // 99.9 % binomial interval
    assert!(n >= 10_000.0, "only {n} frames");
    assert!(
        (measured - p).abs() <= half,
        "loss {measured}, expected {p} ± {half}"
    );
    // End to end: what did not arrive is what the emulator dropped (±ARP frames).
    let lost = sent.packets - sink.packets();
    assert!(
        lost.abs_diff(c.dropped_loss) <= 2,
        "sink missed {lost}, emulator dropped {}",
        c.dropped_loss
    );
}

#[test]
fn jitter_varies_delay_but_keeps_order() {
    require_root!("jitter_varies_delay_but_keeps_order");
    let params = LinkParams {
        jitter_ns: 4_000_000,
        ..LinkParams::wan(10.0, 0.0, 0.0)
    };
    let tb = one_path(params);
    let (a, b) = (tb.host(0, 0), tb.host(1, 0));
    let rx = tb
        .in_host(b, || UdpSocket::bind("0.0.0.0:7203"))
        .expect("ns")
        .expect("bind");
    let tx = tb
        .in_host(a, || UdpSocket::bind("0.0.0.0:0"))
        .expect("ns")
        .expect("bind");
    rx.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    // Resolve ARP on both gateways first: packets queued behind an unresolved
    // neighbour can be overtaken when it resolves (kernel behaviour, not the link's).
    tx.send_to(&[0u8; 12], (b.ip, 7203)).expect("warm-up");
    rx.recv(&mut [0u8; 64])
        .expect("warm-up datagram crossed the path");
    let start = Instant::now();
    let mut one_way = Vec::new();
    let mut order = Vec::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0u32..400 {
                let sent_ns = start.elapsed().as_nanos() as u64;
                let mut msg = i.to_be_bytes().to_vec();
                msg.extend(sent_ns.to_be_bytes());
                tx.send_to(&msg, (b.ip, 7203)).expect("send");
                std::thread::sleep(Duration::from_micros(500));
            }
        });
        let mut buf = [0u8; 64];
        while order.len() < 400 {
            let Ok(n) = rx.recv(&mut buf) else { break };
            assert_eq!(n, 12);
            let seq = u32::from_be_bytes(buf[..4].try_into().expect("4 bytes"));
            let sent = u64::from_be_bytes(buf[4..12].try_into().expect("8 bytes"));
            order.push(seq);
            one_way.push((start.elapsed().as_nanos() as u64 - sent) as f64 / 1e6);
        }
    });
    assert!(order.len() >= 399, "received {} of 400", order.len());
    let bad: Vec<_> = order.windows(2).filter(|w| w[0] >= w[1]).collect();
    assert!(
        bad.is_empty(),
        "jitter without reorder must keep order: {bad:?}"
    );
    let min = one_way.iter().cloned().fold(f64::MAX, f64::min);
    let max = one_way.iter().cloned().fold(0.0, f64::max);
    assert!(
        min >= 6.0 - 0.2,
        "one-way delay {min} ms below delay - jitter"
    );
    assert!(
        max - min > 3.0,
        "delays spread only {:.2} ms with ±4 ms jitter",
        max - min
    );
}
