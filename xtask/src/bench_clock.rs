//! `cargo xtask bench clock`: the clock bench of the tests crate
//! (tests/benches/clock.rs), then one CDF plot of |error| per timestamp
//! source for each testbed profile (docs/plots/clock_error_cdf_*.svg).

use anyhow::{Context, Result};
use serde_json::Value;

use crate::{cmd, plot};

pub fn run(extra: &[String]) -> Result<()> {
    let samples = cmd::root().join("target/bench-samples/clock.json");
    std::fs::create_dir_all(samples.parent().context("samples dir")?)?;
    let _ = std::fs::remove_file(&samples);
    crate::progress::run_child(
        cmd::cargo()
            .args([
                "bench",
                "--package",
                "causeway-tests",
                "--bench",
                "clock",
                "--",
            ])
            .args(extra)
            .env("CAUSEWAY_BENCH_SAMPLES", &samples),
        "bench clock",
    )?;
    let Ok(text) = std::fs::read_to_string(&samples) else {
        eprintln!("bench: no testbed samples (virtual part only, or not root): no plot");
        return Ok(());
    };
    let sets: Value = serde_json::from_str(&text).context("reading the clock samples")?;
    for (profile, chart) in charts(&sets) {
        let svg = plot::plots_dir().join(format!("clock_error_cdf_{}.svg", file_stem(&profile)));
        plot::render(&chart, &svg)?;
        eprintln!("bench: plot {}", svg.display());
    }
    Ok(())
}

/// One chart per profile, one CDF per source (|error| in µs, log axis).
pub fn charts(sets: &Value) -> Vec<(String, plot::Chart)> {
    let mut out: Vec<(String, plot::Chart)> = Vec::new();
    for set in sets.as_array().into_iter().flatten() {
        let (Some(profile), Some(source)) = (set["profile"].as_str(), set["source"].as_str())
        else {
            continue;
        };
        let abs_us: Vec<f64> = set["abs_ns"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_f64)
            .map(|ns| ns / 1e3)
            .collect();
        if abs_us.is_empty() {
            continue;
        }
        let series = plot::Series {
            name: format!("{source} (n={})", abs_us.len()),
            points: plot::cdf(&abs_us, 400),
        };
        match out.iter_mut().find(|(p, _)| p == profile) {
            Some((_, chart)) => chart.series.push(series),
            None => out.push((
                profile.to_string(),
                plot::Chart {
                    title: format!("clock |error| CDF per timestamp source, testbed {profile}"),
                    x_label: "|estimate - truth|, µs".into(),
                    y_label: "fraction of estimates".into(),
                    x_scale: plot::Scale::Log10,
                    y_scale: plot::Scale::Linear,
                    series: vec![series],
                    limits: vec![],
                },
            )),
        }
    }
    out
}

/// `wan40 ±1 ms` -> `wan40_1_ms`.
fn file_stem(profile: &str) -> String {
    let s: String = profile
        .chars()
        .filter_map(|c| match c {
            c if c.is_ascii_alphanumeric() => Some(c),
            ' ' => Some('_'),
            _ => None,
        })
        .collect();
    s.trim_matches('_').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_become_one_chart_per_profile_with_a_cdf_per_source() {
        let sets = serde_json::json!([
            {"profile": "wan40", "source": "kernel", "abs_ns": [1000.0, 3000.0, 2000.0]},
            {"profile": "wan40", "source": "userspace", "abs_ns": [9000.0]},
            {"profile": "lossy80", "source": "kernel", "abs_ns": []},
        ]);
        let charts = charts(&sets);
        assert_eq!(charts.len(), 1, "a source without samples makes no chart");
        let (profile, chart) = &charts[0];
        assert_eq!(profile, "wan40");
        assert_eq!(chart.series.len(), 2);
        assert_eq!(chart.series[0].name, "kernel (n=3)");
        assert_eq!(
            chart.series[0].points,
            vec![(1.0, 1.0 / 3.0), (2.0, 2.0 / 3.0), (3.0, 1.0)]
        );
        assert_eq!(file_stem("wan40 ±1 ms"), "wan40_1_ms");
    }
}
