//! The demo's contention part: the same gradient sync twice more while a
//! checkpoint upload (8 TCP streams) shares the WAN, first with Causeway's
//! shaping attached (gradient class guaranteed and served first, bulk gets
//! the remainder), then with Causeway detached (the WAN's drop-tail queue
//! alone), reported side by side with the uncontended run: step times, and
//! the error of the clock agents that probe across the same WAN meanwhile.

use std::time::Duration;

use anyhow::{bail, Result};
use serde_json::Value;

use super::{
    clock_pair::ClockPair,
    contention::{class_bytes, Sampler, Samples, Upload},
    report::percentile,
    run_ranks, DemoArgs, Outcome,
};
use crate::{plot, testbed::Testbed};

/// How long the upload runs before the ranks start (its streams leave slow start).
const UPLOAD_LEAD: Duration = Duration::from_secs(2);
/// The target: contended step with shaping ≤ this × uncontended.
pub const TARGET: f64 = 1.15;
/// The target: the clock agents' p99 error with shaping, kernel stamps, µs.
pub const CLOCK_TARGET_US: f64 = 50.0;

struct Phase {
    name: &'static str,
    outcome: Outcome,
    upload_mbit: Vec<f64>,
    /// Frames the WAN emulator's drop-tail queue dropped during the run.
    wan_queue_drops: Option<u64>,
}

/// Runs both contended phases (the testbed is attached on entry, detached
/// on return) and prints the comparison with `uncontended`.
pub fn run(
    bed: &Testbed,
    args: &DemoArgs,
    uncontended: Outcome,
    before: &[(String, Value)],
    clock: &ClockPair,
) -> Result<()> {
    println!("\n== contention: a checkpoint upload (iperf3, 8 TCP streams, DSCP CS1) from domain 0 to domain 1 ==");
    let port = &bed.wan_ports[bed.wan_ports.len() - 1];
    let sampler = Sampler::start(&port.netns, &port.iface)?;
    let (attached, samples) = {
        let drops = bed.queue_drops();
        let upload = Upload::start(bed)?;
        std::thread::sleep(UPLOAD_LEAD);
        let outcome = run_ranks(bed, args, "contended, shaped", clock);
        let upload_mbit = upload.stop();
        (
            Phase {
                name: "contended, Causeway shaping",
                outcome: outcome?,
                upload_mbit,
                wan_queue_drops: bed.queue_drops().zip(drops).map(|(a, b)| a - b.min(a)),
            },
            sampler.stop(),
        )
    };
    let after = bed.stats();
    println!(
        "\n== contention: Causeway detached from the gateways (the WAN's drop-tail queue only) =="
    );
    bed.detach()?;
    let detached = {
        let drops = bed.queue_drops();
        let upload = Upload::start(bed)?;
        std::thread::sleep(UPLOAD_LEAD);
        let outcome = run_ranks(bed, args, "contended, unshaped", clock);
        let upload_mbit = upload.stop();
        Phase {
            name: "contended, no Causeway",
            outcome: outcome?,
            upload_mbit,
            wan_queue_drops: bed.queue_drops().zip(drops).map(|(a, b)| a - b.min(a)),
        }
    };
    let base = Phase {
        name: "uncontended",
        outcome: uncontended,
        upload_mbit: vec![],
        wan_queue_drops: None,
    };
    print_comparison(&[&base, &attached, &detached]);
    print_class_deltas(before, &after);
    let svg = plot::plots_dir().join("demo_contention_rates.svg");
    match plot::render(&rate_chart(&samples, bed.rate_mbit), &svg) {
        Ok(()) => println!(
            "per-class rate over time (shaped, contended): {}",
            svg.display()
        ),
        Err(e) => println!("per-class rate plot not drawn: {e:#}"),
    }
    if [&attached, &detached].iter().any(|p| !p.outcome.consistent) {
        bail!("ranks ended with different parameters under contention");
    }
    Ok(())
}

/// Median and p90 of the steps after the first (connection warm-up).
fn steady(o: &Outcome) -> (f64, f64) {
    let mut s: Vec<f64> = o.step_secs.iter().skip(1).copied().collect();
    if s.is_empty() {
        s = o.step_secs.clone();
    }
    s.sort_by(f64::total_cmp);
    (percentile(&s, 0.5), percentile(&s, 0.9))
}

fn print_comparison(phases: &[&Phase]) {
    let (base, _) = steady(&phases[0].outcome);
    println!("\n================ contention report ================");
    println!("| run | median step s | p90 step s | vs uncontended | upload Mbit/s (mean of 1 s) | WAN queue drops | clock p99 µs (kernel stamps) |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for p in phases {
        let (median, p90) = steady(&p.outcome);
        let upload = if p.upload_mbit.is_empty() {
            "-".to_string()
        } else {
            format!(
                "{:.0}",
                p.upload_mbit.iter().sum::<f64>() / p.upload_mbit.len() as f64
            )
        };
        let drops = p
            .wan_queue_drops
            .map_or_else(|| "-".to_string(), |d| d.to_string());
        let clock = p
            .outcome
            .clock
            .kernel_p99_us()
            .map_or_else(|| "-".to_string(), |us| format!("{us:.1}"));
        println!(
            "| {} | {median:.3} | {p90:.3} | {:.2}x | {upload} | {drops} | {clock} |",
            p.name,
            median / base
        );
    }
    let (shaped, _) = steady(&phases[1].outcome);
    println!(
        "target: contended step with shaping <= {TARGET:.2}x uncontended: {} ({:.2}x)",
        if shaped <= TARGET * base {
            "met"
        } else {
            "MISSED"
        },
        shaped / base
    );
    match phases[1].outcome.clock.kernel_p99_us() {
        Some(us) => println!(
            "target: clock p99 with shaping under contention <= {CLOCK_TARGET_US:.0} µs: {} ({us:.1} µs; without shaping: {})",
            if us <= CLOCK_TARGET_US { "met" } else { "MISSED" },
            phases[2]
                .outcome
                .clock
                .kernel_p99_us()
                .map_or_else(|| "no estimates".to_string(), |d| format!("{d:.1} µs"))
        ),
        None => println!("target: clock p99 with shaping: no kernel-stamped estimates during the run"),
    }
    println!("\nclock sync per run (agent A's estimate of B, |estimate - truth|):");
    for p in phases {
        println!("  {}", p.name);
        for line in p.outcome.clock.lines() {
            println!("    {line}");
        }
    }
}

/// Per-class XDP ingress counters of the shaped contended run (after − before).
fn print_class_deltas(before: &[(String, Value)], after: &[(String, Value)]) {
    println!(
        "\nper-class counters during the shaped contended run (XDP ingress, per gateway WAN port):"
    );
    for (port, doc) in after {
        println!("  {port}");
        let old = before
            .iter()
            .find(|(p, _)| p == port)
            .map(|(_, d)| class_bytes(d))
            .unwrap_or_default();
        for (class, bytes) in class_bytes(doc) {
            let was = old.iter().find(|(c, _)| *c == class).map_or(0, |(_, b)| *b);
            println!("    {class:<10} {:>14} bytes", bytes.saturating_sub(was));
        }
    }
}

/// Mbit/s per class over time, from cumulative per-class byte samples;
/// classes that carried nothing are left out.
pub fn rate_chart(samples: &Samples, wan_mbit: f64) -> plot::Chart {
    let mut classes: Vec<&str> = Vec::new();
    for (_, c, _) in samples {
        if !classes.contains(&c.as_str()) {
            classes.push(c);
        }
    }
    let series = classes
        .into_iter()
        .filter_map(|class| {
            let counter: Vec<(f64, u64)> = samples
                .iter()
                .filter(|(_, c, _)| c == class)
                .map(|(t, _, b)| (*t, *b))
                .collect();
            let points = plot::rates_mbit(&counter);
            points.iter().any(|p| p.1 > 0.0).then(|| plot::Series {
                name: class.to_string(),
                points,
            })
        })
        .collect();
    plot::Chart {
        title: "demo: per-class WAN rate, gradient sync + checkpoint upload, shaped".into(),
        x_label: "seconds".into(),
        y_label: "Mbit/s (XDP ingress, receiving gateway)".into(),
        x_scale: plot::Scale::Linear,
        y_scale: plot::Scale::Linear,
        series,
        limits: vec![plot::Limit {
            name: "WAN rate".into(),
            y: wan_mbit,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_chart_has_a_series_per_class_that_carried_traffic() {
        let mut samples = Samples::new();
        for i in 0..5u64 {
            let t = i as f64 * 0.25;
            samples.push((t, "gradient".into(), i * 5_000_000));
            samples.push((t, "bulk".into(), i * 250_000));
            samples.push((t, "clock".into(), 0));
        }
        let chart = rate_chart(&samples, 200.0);
        let names: Vec<&str> = chart.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["gradient", "bulk"]);
        assert_eq!(chart.series[0].points[0], (0.125, 160.0));
        assert_eq!(chart.series[1].points[3], (0.875, 8.0));
    }
}
