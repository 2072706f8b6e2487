use std::time::Duration;

use proptest::prelude::*;

use super::*;

#[test]
fn rates_in_tc_units() {
    assert_eq!(parse_rate_bps("50mbit"), Ok(50_000_000));
    assert_eq!(parse_rate_bps("1gbit"), Ok(1_000_000_000));
    assert_eq!(parse_rate_bps("800kbit"), Ok(800_000));
    assert_eq!(parse_rate_bps("1.5gbit"), Ok(1_500_000_000));
    assert_eq!(parse_rate_bps("1.5Gbit"), Ok(1_500_000_000));
    assert_eq!(parse_rate_bps("200000bit"), Ok(200_000));
    assert_eq!(parse_rate_bps("2tbit"), Ok(2_000_000_000_000));
    assert_eq!(parse_rate_bps("1kibit"), Ok(1024));
    assert_eq!(parse_rate_bps("64000"), Ok(64_000));
    assert_eq!(parse_rate_bps(" 10kbit "), Ok(10_000));
    assert_eq!(parse_rate_bps("10 kbit"), Ok(10_000));
    assert_eq!(parse_rate_bps("0.5bit"), Ok(1), "rounds to nearest");
}

#[test]
fn malformed_rates_are_refused() {
    for bad in [
        "",
        "mbit",
        "0",
        "0mbit",
        "0.4bit",
        "-5mbit",
        "1e30gbit",
        "1e6",
        ".",
        "1.2.3mbit",
        "5 m bit",
        "5xbit",
        "fast",
    ] {
        assert!(parse_rate_bps(bad).is_err(), "{bad:?} was accepted");
    }
    assert!(
        parse_rate_bps("18446744073709551616").is_err(),
        "u64::MAX + 1"
    );
    assert!(parse_rate_bps("20000000tbit").is_err());
    assert_eq!(parse_rate_bps("18446744073709551615"), Ok(u64::MAX));
}

#[test]
fn byte_rates_are_refused_with_a_hint() {
    for bad in ["12mbps", "12MBps", "100kbps", "1bps", "1gbps"] {
        let err = parse_rate_bps(bad).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(bad), "{msg}");
        assert!(msg.contains("mbit"), "{msg}");
        assert!(msg.contains("megabytes"), "{msg}");
    }
}

#[test]
fn sizes_in_powers_of_1024() {
    assert_eq!(parse_bytes("512kb"), Ok(512 * 1024));
    assert_eq!(parse_bytes("1mb"), Ok(1 << 20));
    assert_eq!(parse_bytes("64kib"), Ok(64 * 1024));
    assert_eq!(parse_bytes("64K"), Ok(64 * 1024));
    assert_eq!(parse_bytes("2m"), Ok(2 << 20));
    assert_eq!(parse_bytes("1gb"), Ok(1 << 30));
    assert_eq!(parse_bytes("1500b"), Ok(1500));
    assert_eq!(parse_bytes("1500"), Ok(1500));
    assert_eq!(parse_bytes("1.5kb"), Ok(1536));
    for bad in ["", "kb", "0", "0kb", "-1kb", "12parsecs", "1kbit"] {
        assert!(parse_bytes(bad).is_err(), "{bad:?} was accepted");
    }
    assert!(parse_bytes("17179869184gb").is_err(), "2^64 bytes");
}

#[test]
fn durations() {
    assert_eq!(parse_duration("40ms"), Ok(Duration::from_millis(40)));
    assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
    assert_eq!(parse_duration("200us"), Ok(Duration::from_micros(200)));
    assert_eq!(parse_duration("200µs"), Ok(Duration::from_micros(200)));
    assert_eq!(parse_duration("10ns"), Ok(Duration::from_nanos(10)));
    assert_eq!(parse_duration("2 min"), Ok(Duration::from_secs(120)));
    assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
    assert_eq!(parse_duration("5sec"), Ok(Duration::from_secs(5)));
    assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    assert_eq!(parse_duration("0.0000000004s"), Ok(Duration::ZERO));
    assert_eq!(parse_duration("0.0000000005s"), Ok(Duration::from_nanos(1)));
    for bad in ["", "ms", "-1s", "1e3ms", "1 fortnight", "1m"] {
        assert!(parse_duration(bad).is_err(), "{bad:?} was accepted");
    }
}

#[test]
fn a_bare_duration_asks_for_a_unit() {
    let msg = parse_duration("40").unwrap_err().to_string();
    assert!(
        msg.contains("'40'") && msg.contains("needs a unit"),
        "{msg}"
    );
}

#[test]
fn errors_name_the_input_and_what_was_expected() {
    let err = parse_rate_bps("fast").unwrap_err();
    assert_eq!(err.input(), "fast");
    assert_eq!(err.quantity(), Quantity::Rate);
    assert_eq!(
        err.to_string(),
        "'fast' is not a rate: expected bit/s as a number or with a unit bit, kbit, mbit, gbit \
         or tbit (e.g. \"100mbit\", \"1.5gbit\", \"64000\")"
    );
    let msg = parse_bytes("0kb").unwrap_err().to_string();
    assert_eq!(msg, "'0kb' is not a size: a size must be greater than zero");
    let msg = parse_duration("forever").unwrap_err().to_string();
    assert!(
        msg.starts_with("'forever' is not a duration: expected"),
        "{msg}"
    );
    assert!(msg.contains("\"40ms\""), "{msg}");
}

#[test]
fn format_rate_examples() {
    assert_eq!(format_rate_bps(200_000_000), "200mbit");
    assert_eq!(format_rate_bps(1_000_000_000), "1gbit");
    assert_eq!(format_rate_bps(1_500_000_000), "1500mbit");
    assert_eq!(format_rate_bps(800_000), "800kbit");
    assert_eq!(format_rate_bps(3_000_000_000_000), "3tbit");
    assert_eq!(format_rate_bps(1234), "1234bit");
    assert_eq!(format_rate_bps(0), "0bit");
}

const RATE_SCALES: [(&str, u64); 5] = [
    ("bit", 1),
    ("kbit", 1_000),
    ("mbit", 1_000_000),
    ("gbit", 1_000_000_000),
    ("tbit", 1_000_000_000_000),
];

proptest! {
    #[test]
    fn format_rate_round_trips(bps in 1u64..) {
        prop_assert_eq!(parse_rate_bps(&format_rate_bps(bps)), Ok(bps));
    }

    #[test]
    fn format_rate_round_trips_round_numbers(n in 1u64..1_000_000, unit in 0usize..5) {
        let bps = n * RATE_SCALES[unit].1;
        prop_assert_eq!(parse_rate_bps(&format_rate_bps(bps)), Ok(bps));
    }

    #[test]
    fn rate_with_unit_scales(n in 1u64..10_000_000, unit in 0usize..5, upper in any::<bool>()) {
        let (name, scale) = RATE_SCALES[unit];
        let name = if upper { name.to_uppercase() } else { name.to_string() };
        prop_assert_eq!(parse_rate_bps(&format!("{n}{name}")), Ok(n * scale));
    }

    #[test]
    fn decimal_rate_is_exact(whole in 0u64..1000, tenths in 1u64..10) {
        let text = format!("{whole}.{tenths}gbit");
        prop_assert_eq!(parse_rate_bps(&text), Ok(whole * 1_000_000_000 + tenths * 100_000_000));
    }

    #[test]
    fn bytes_with_unit_scale(n in 1u64..1_000_000, unit in 0usize..4) {
        let (name, scale) = [("b", 1u64), ("kb", 1 << 10), ("mb", 1 << 20), ("gb", 1 << 30)][unit];
        prop_assert_eq!(parse_bytes(&format!("{n}{name}")), Ok(n * scale));
        prop_assert_eq!(parse_bytes(&format!("{n}{}", name.to_uppercase())), Ok(n * scale));
    }

    #[test]
    fn bare_bytes_are_bytes(n in 1u64..) {
        prop_assert_eq!(parse_bytes(&n.to_string()), Ok(n));
    }

    #[test]
    fn durations_in_each_unit(n in 0u64..1_000_000) {
        prop_assert_eq!(parse_duration(&format!("{n}ns")), Ok(Duration::from_nanos(n)));
        prop_assert_eq!(parse_duration(&format!("{n}us")), Ok(Duration::from_micros(n)));
        prop_assert_eq!(parse_duration(&format!("{n}ms")), Ok(Duration::from_millis(n)));
        prop_assert_eq!(parse_duration(&format!("{n}s")), Ok(Duration::from_secs(n)));
    }

    #[test]
    fn decimal_milliseconds_are_exact(ms in 0u64..100_000, micros in 0u64..1000) {
        let text = format!("{ms}.{micros:03}ms");
        prop_assert_eq!(parse_duration(&text), Ok(Duration::from_micros(ms * 1000 + micros)));
    }

    #[test]
    fn no_input_panics_and_errors_name_it(text in "\\PC{0,24}") {
        let errors = [
            parse_rate_bps(&text).err(),
            parse_bytes(&text).err(),
            parse_duration(&text).err(),
        ];
        for err in errors.into_iter().flatten() {
            prop_assert_eq!(err.input(), text.as_str());
            let quoted = format!("'{text}'");
            prop_assert!(err.to_string().contains(&quoted));
        }
    }
}
