//! Convergence with WAN compression: `causeway-train` (data-parallel logistic
//! regression, full-batch gradient descent) on 4 ranks, one per host of the
//! two-domain testbed (wan40), once per codec at equal steps. bf16 and int8
//! end within 1 % of the uncompressed final loss, top-k 1 % with error
//! feedback within 3 %, and top-k without error feedback visibly worse. Every
//! rank ends with the same loss and bit-identical weights.

use std::time::{Duration, Instant};

use causeway_netsim::Profile;
use causeway_test_support::require_root;
use causeway_tests::netsim_support;

use super::testbed::{collective_binary, next, start};

const WORLD: usize = 4;
const STEPS: &str = "400";

#[test]
fn training_converges_with_each_codec_across_two_domains() {
    require_root!("training_converges_with_each_codec_across_two_domains");
    // Release: the training's arithmetic is the slow part in a debug build
    // (4 ranks on a shared machine), not the network.
    let bin = collective_binary("causeway-train", true);
    let tb = netsim_support::testbed(2, 2, Profile::Wan40);
    let runs = [
        ("none", "0"),
        ("bf16", "0"),
        ("int8", "0"),
        ("topk:1%", "1"),
        ("topk:1%", "0"),
    ];
    let mut losses = Vec::new();
    for (i, (codec, feedback)) in runs.iter().enumerate() {
        let args = [
            "--codec",
            codec,
            "--feedback",
            feedback,
            "--steps",
            STEPS,
            "--lr",
            "2",
            "--report",
            "100",
        ];
        let t = Instant::now();
        let w = start(&tb, &bin, 29620 + i as u16, &args);
        let deadline = Instant::now() + Duration::from_secs(240);
        let mut done: Vec<Option<(f64, String)>> = vec![None; WORLD];
        while done.iter().any(Option::is_none) {
            let (r, v) = next(&w, deadline);
            match v["event"].as_str() {
                Some("ready") => {}
                Some("loss") if r == 0 => eprintln!("{codec} fb={feedback} {v}"),
                Some("loss") => {}
                Some("done") => {
                    let loss = v["loss"].as_f64().expect("loss");
                    done[r] = Some((loss, v["weights_hash"].to_string()));
                }
                _ => panic!("{codec}: rank {r}: {v}"),
            }
        }
        w.finish(&format!("{codec} "));
        let first = done[0].clone().expect("rank 0");
        for (r, d) in done.iter().enumerate() {
            assert_eq!(
                d.as_ref(),
                Some(&first),
                "{codec}: rank {r} ends elsewhere than rank 0"
            );
        }
        eprintln!(
            "{codec} feedback={feedback}: final loss {:.6} after {STEPS} steps ({:?})",
            first.0,
            t.elapsed()
        );
        losses.push(first.0);
    }
    let base = losses[0];
    let rel = |l: f64| (l - base) / base;
    eprintln!("| codec | error feedback | final loss | vs none |");
    for ((c, f), l) in runs.iter().zip(&losses) {
        eprintln!("| {c} | {f} | {l:.6} | {:+.2} % |", 100.0 * rel(*l));
    }
    assert!(rel(losses[1]).abs() <= 0.01, "bf16: {:+.3}", rel(losses[1]));
    assert!(rel(losses[2]).abs() <= 0.01, "int8: {:+.3}", rel(losses[2]));
    assert!(
        rel(losses[3]).abs() <= 0.03,
        "top-k with feedback: {:+.3}",
        rel(losses[3])
    );
    assert!(
        rel(losses[4]) >= 0.10 && losses[4] > losses[3],
        "top-k without feedback should be visibly worse: {:+.3}",
        rel(losses[4])
    );
}
