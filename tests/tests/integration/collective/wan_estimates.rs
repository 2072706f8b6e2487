//! The WAN estimates from the kernel (`Communicator::link_estimates`, issue
//! 13) on the emulated two-domain testbed: after checked 16 and 64 MiB
//! allreduces, rank 0's minimum RTT and rate are within ±10 % of what the
//! emulator was configured with, on the lossless `wan40` and the lossy
//! `lossy80` profile. The rate is the domain's: its two ranks sum their WAN
//! windows (`causeway_collective::estimates::domain`); one rank's share
//! scaled by two ran 10–21 % high.
//!
//! On the lossless profile the same world (start-up probe, warm-up, paced
//! allreduces) must also leave the emulator's one-BDP drop-tail queue
//! (nearly) unoverflowed: at most 0.1 % of the frames it forwarded. Before
//! the in-flight governor (`causeway_collective::estimates::inflight`) the
//! start-up alone dropped 1.6–3.0 k frames, about 3 %; with it the bench
//! counts 0 in most worlds.
//!
//! Also here: the bulk connections run a loss-based congestion control on
//! the lossless path and BBR on the lossy one (`estimates::cc_choice`), and
//! a broadcast from one rank across domains gets the whole path on wan40,
//! not its rank's half (`estimates::share`).

use causeway_test_support::require_root;
use std::time::{Duration, Instant};

use causeway_netsim::Profile;
use causeway_tests::netsim_support;

use super::testbed::{collective_binary, next, start};

fn estimates_within_ten_percent(profile: Profile, port: u16) {
    let want = profile.paths()[0];
    let (rate_mbit, rtt_ms) = (want.rate_bps as f64 / 1e6, 2.0 * want.delay_ns as f64 / 1e6);
    let bin = collective_binary("causeway-allreduce-bench", true);
    let tb = netsim_support::testbed(2, 2, profile);
    let drops_before = queue_drops(&tb);
    let w = start(
        &tb,
        &bin,
        port,
        &["--sizes", "16M,64M", "--iters", "2", "--warmup", "1"],
    );
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut last = None;
    let mut rows = 0;
    while rows < 2 {
        let (r, v) = next(&w, deadline);
        if r == 0 && v["event"].is_null() && v["bytes"].is_u64() {
            eprintln!(
                "{} bytes: {} s, link {}",
                v["bytes"], v["median_s"], v["link_estimate"]
            );
            last = Some(v["link_estimate"].clone());
            rows += 1;
        }
    }
    w.finish("");
    let (drops, forwarded) = queue_drops(&tb);
    let (drops, forwarded) = (drops - drops_before.0, forwarded - drops_before.1);
    eprintln!("emulator queue: {drops} drops of {forwarded} frames forwarded (both directions)");
    if want.loss == 0.0 {
        assert!(
            drops as f64 <= 1e-3 * forwarded as f64,
            "{drops} queue drops of {forwarded} frames on a lossless path"
        );
    }
    let e = last.expect("rank 0 reported");
    // The congestion control follows the path's loss
    // (`causeway_collective::estimates::cc_choice`): loss-based where
    // nothing is lost, BBR where the emulator drops at random.
    let loss_based = e["loss_based_cc"]
        .as_bool()
        .expect("the congestion control");
    let losses = e["losses"].as_u64().expect("the real losses");
    if want.loss == 0.0 {
        // BBR stays right where the queue overflowed (≤ 0.1 % asserted
        // above) and the connections saw it as real loss.
        assert!(
            loss_based || losses > 0,
            "BBR on a path that lost nothing: {e}"
        );
    } else {
        assert!(!loss_based && losses > 0, "random loss seen as none: {e}");
    }
    let rate = e["rate_mbit"].as_f64().expect("a rate estimate");
    let min_rtt = e["min_rtt_ms"].as_f64().expect("an RTT estimate");
    eprintln!("estimate {rate:.1} Mbit/s, min RTT {min_rtt:.1} ms; configured {rate_mbit} Mbit/s, {rtt_ms} ms");
    assert!(
        (min_rtt / rtt_ms - 1.0).abs() <= 0.10,
        "min RTT {min_rtt:.1} ms vs {rtt_ms} configured: {e}"
    );
    assert!(
        (rate / rate_mbit - 1.0).abs() <= 0.10,
        "rate {rate:.1} Mbit/s vs {rate_mbit} configured: {e}"
    );
}

/// (queue drops, frames forwarded) of path 0, both directions.
fn queue_drops(tb: &causeway_netsim::Testbed) -> (u64, u64) {
    let st = tb.path_stats(0).expect("emulator stats");
    let (a, b) = (st.a_to_b.counters, st.b_to_a.counters);
    (a.dropped_queue + b.dropped_queue, a.forwarded + b.forwarded)
}

#[test]
fn wan_estimates_within_ten_percent_on_wan40() {
    require_root!("wan_estimates_within_ten_percent_on_wan40");
    estimates_within_ten_percent(Profile::Wan40, 29620);
}

#[test]
fn wan_estimates_within_ten_percent_on_lossy80() {
    require_root!("wan_estimates_within_ten_percent_on_lossy80");
    estimates_within_ten_percent(Profile::Lossy80, 29630);
}

/// A broadcast from rank 0 sends across the WAN from one rank of its domain
/// only: the other rank says it has nothing to send, and rank 0 paces at
/// the whole path. Split by the domain's two ranks it took 1.98–2.03× the
/// bound S·8/B; now about 1.05–1.08× (asserted: ≤ 1.5×, for a busy CI host).
#[test]
fn a_cross_domain_broadcast_gets_the_whole_path_on_wan40() {
    require_root!("a_cross_domain_broadcast_gets_the_whole_path_on_wan40");
    let bin = collective_binary("causeway-allreduce-bench", true);
    let tb = netsim_support::testbed(2, 2, Profile::Wan40);
    let rate_bps = Profile::Wan40.paths()[0].rate_bps as f64;
    let w = start(
        &tb,
        &bin,
        29660,
        &[
            "--op",
            "broadcast",
            "--sizes",
            "16M",
            "--iters",
            "3",
            "--warmup",
            "1",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    let median = loop {
        let (r, v) = next(&w, deadline);
        if r == 0 && v["event"].is_null() && v["bytes"].is_u64() {
            break v["median_s"].as_f64().expect("a median");
        }
    };
    w.finish("");
    let bound = 16.0 * 1024.0 * 1024.0 * 8.0 / rate_bps;
    eprintln!(
        "broadcast 16 MiB: {median:.3} s, {:.2}× the bound",
        median / bound
    );
    assert!(
        median <= 1.5 * bound,
        "{median:.3} s is {:.2}× the bound {bound:.3} s: the lone sender is held to a share",
        median / bound
    );
}
