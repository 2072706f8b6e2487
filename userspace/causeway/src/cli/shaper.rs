//! Egress shaping on the command line: `policy set-rate`, the shaping part
//! of `policy show`, and the shaping line of `policy apply` and
//! `attach --policy` (which `datapath::Locked` carries out).

use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::Args;
use serde::Serialize;

use causeway::{
    datapath::{state, Applied, IfacePaths, RecordedPolicy},
    policy::{shaping::ShapingPolicy, Policy},
    shaper::{
        htb::Htb,
        live::{self, RateOverrides},
        OverAction, PacingMode, ShaperMaps,
    },
};

use super::{table, Context};

#[derive(Debug, Args)]
pub struct SetRateArgs {
    /// Class, by name or id (required); it must have shaping in the
    /// applied policy.
    pub class: String,
    /// New rate, e.g. "50mbit", "1gbit" or bit/s (required). It becomes
    /// the class's ceiling (token bucket and HTB ceil); the guaranteed rate
    /// is lowered to it when higher.
    #[arg(value_parser = super::args::rate_arg)]
    pub rate: u64,
    /// New burst, e.g. "64kb" or bytes. Optional; default: unchanged. At
    /// least one frame (MTU + 14 bytes).
    #[arg(long, value_name = "SIZE", value_parser = super::args::size_arg)]
    pub burst: Option<u64>,
    /// Interface. Optional; default: every attached interface.
    #[arg(long, value_name = "IF")]
    pub iface: Option<String>,
}

/// The shaping line of `policy apply` and `attach --policy`.
pub fn print_applied(applied: &Applied) {
    if let Some(s) = applied.shaping {
        println!(
            "shaping {}: link {}, {} shaped classes, HTB ca: installed",
            applied.iface,
            rate(s.link_bits),
            s.classes
        );
    }
}

/// The applied policy of an interface and its live shaping.
struct Live {
    iface: String,
    paths: IfacePaths,
    policy: Policy,
    overrides: RateOverrides,
}

fn load_live(ctx: &Context, iface: &str) -> Result<Live> {
    let paths = ctx.layout.iface(&ctx.scope, iface)?;
    if !paths.pin_dir.exists() {
        bail!(
            "{iface} is not attached in the {}; nothing was changed",
            ctx.scope
        );
    }
    let recorded = RecordedPolicy::read(&paths)?
        .with_context(|| format!("{iface} has no applied policy; apply one with shaping first"))?;
    Ok(Live {
        iface: iface.to_string(),
        paths,
        policy: recorded.policy,
        overrides: recorded.overrides,
    })
}

fn shaping_of(live: &Live) -> Option<ShapingPolicy> {
    live.policy
        .shaping
        .as_ref()
        .map(|s| live::effective(s, &live.overrides))
}

/// `policy set-rate`: checks the change on every target, then applies it
/// to each (HTB class change + one map flip): no program is reloaded, no
/// queued frame or flow is dropped.
pub fn set_rate(ctx: &Context, args: &SetRateArgs) -> Result<()> {
    let (rate_bits, burst) = (args.rate, args.burst);
    let _lock = state::StateLock::acquire(&ctx.layout.lock_file())?;
    let targets = ctx.targets(args.iface.as_deref())?;
    let mut plans = Vec::new();
    for iface in &targets {
        let live = load_live(ctx, iface)?;
        let class = live
            .policy
            .classes
            .by_name(&args.class)
            .or_else(|| {
                args.class
                    .parse()
                    .ok()
                    .and_then(|id| live.policy.classes.by_id(id))
            })
            .with_context(|| {
                format!(
                    "unknown class '{}' on {iface} (classes: {}); nothing was changed",
                    args.class,
                    live.policy.classes.names()
                )
            })?
            .id;
        let old = shaping_of(&live).with_context(|| {
            format!("the policy applied to {iface} has no shaping; nothing was changed")
        })?;
        let change = live::check_set_rate(&old, class, &args.class, rate_bits, burst)
            .with_context(|| format!("{iface}: nothing was changed"))?;
        let mut overrides = live.overrides.clone();
        overrides.classes.insert(class, change);
        plans.push((live, class, old, overrides));
    }
    for (live, class, old, overrides) in plans {
        let shaping = live.policy.shaping.as_ref().context("checked above")?;
        let new = live::effective(shaping, &overrides);
        let mut maps = ShaperMaps::from_pins(&live.paths.maps_dir)?;
        live::change_class(&Htb::new(&live.iface, None), &mut maps, &old, &new, class)
            .with_context(|| {
                format!(
                    "cannot change the rate of '{}' on {}",
                    args.class, live.iface
                )
            })?;
        state::write_json(&live.paths.shaping_overrides_record(), &overrides)?;
        let c = new.class(class).context("checked above")?;
        println!(
            "{}: class '{}' now at most {} (guaranteed {}, burst {} bytes)",
            live.iface,
            live.policy.classes.name_of(class),
            rate(c.ceil_bits),
            rate(c.rate_bits),
            c.burst_bytes
        );
    }
    Ok(())
}

/// The live shaping of one interface, as `policy show` reports it.
#[derive(Debug, Serialize)]
pub struct ShapingView {
    pub link_bits: u64,
    /// The window the `measured_bits` rates were taken over, in seconds.
    pub measured_secs: f64,
    pub classes: Vec<ShapedClassView>,
}

/// One shaped class: its configuration (with live `set-rate` changes) and
/// its egress counters.
#[derive(Debug, Serialize)]
pub struct ShapedClassView {
    pub class: String,
    pub rate_bits: u64,
    pub ceil_bits: u64,
    pub burst_bytes: u64,
    pub prio: u8,
    /// `drop`, `ecn` or `demote:<class>`.
    pub over_limit: String,
    /// `police`, or `edt:<horizon ms>`.
    pub pacing: String,
    pub dscp: Option<u8>,
    pub measured_bits: u64,
    pub sent_packets: u64,
    pub shaped: u64,
    pub dropped: u64,
    pub marked: u64,
    pub demoted: u64,
}

/// The shaping part of `policy show`: configured vs measured rate per
/// class, measured from the egress counters over one second. `None` when
/// the applied policy has no shaping.
pub fn measure(ctx: &Context, iface: &str) -> Result<Option<ShapingView>> {
    let Ok(live) = load_live(ctx, iface) else {
        return Ok(None);
    };
    let Some(shaping) = shaping_of(&live) else {
        return Ok(None);
    };
    let maps = ShaperMaps::from_pins(&live.paths.maps_dir)?;
    let first = maps.counters()?;
    let start = std::time::Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let second = maps.counters()?;
    let secs = start.elapsed().as_secs_f64();
    let mut classes = Vec::new();
    for c in &shaping.classes {
        let (a, b) = (first[usize::from(c.class)], second[usize::from(c.class)]);
        let measured = (b.sent_bytes - a.sent_bytes) as f64 * 8.0 / secs;
        classes.push(ShapedClassView {
            class: live.policy.classes.name_of(c.class),
            rate_bits: c.rate_bits,
            ceil_bits: c.ceil_bits,
            burst_bytes: c.burst_bytes,
            prio: c.prio,
            over_limit: match c.over {
                OverAction::Drop => "drop".to_string(),
                OverAction::EcnMark => "ecn".to_string(),
                OverAction::Demote(to) => format!("demote:{}", live.policy.classes.name_of(to)),
            },
            pacing: match c.pacing {
                PacingMode::Police => "police".to_string(),
                PacingMode::Edt { horizon_ns } => format!("edt:{}", horizon_ns / 1_000_000),
            },
            dscp: c.dscp,
            measured_bits: measured.round() as u64,
            sent_packets: b.sent_packets,
            shaped: b.shaped,
            dropped: b.dropped,
            marked: b.marked,
            demoted: b.demoted,
        });
    }
    Ok(Some(ShapingView {
        link_bits: shaping.link_bits,
        measured_secs: secs,
        classes,
    }))
}

/// The text form of [`measure`]'s result.
pub fn print_shaping(s: &ShapingView) {
    println!(
        "  shaping: link {}, measured over {:.1} s",
        rate(s.link_bits),
        s.measured_secs
    );
    let rows: Vec<Vec<String>> = s
        .classes
        .iter()
        .map(|c| {
            vec![
                c.class.clone(),
                rate(c.rate_bits),
                rate(c.ceil_bits),
                c.burst_bytes.to_string(),
                c.prio.to_string(),
                c.over_limit.clone(),
                c.pacing.clone(),
                table::opt(c.dscp),
                rate(c.measured_bits),
                c.sent_packets.to_string(),
                c.shaped.to_string(),
                c.dropped.to_string(),
                c.marked.to_string(),
                c.demoted.to_string(),
            ]
        })
        .collect();
    let header = [
        "CLASS", "RATE", "CEIL", "BURST", "PRIO", "OVER", "PACING", "DSCP", "MEASURED", "SENT",
        "SHAPED", "DROPPED", "MARKED", "DEMOTED",
    ];
    for line in table::render(&header, &rows).lines() {
        println!("  {line}");
    }
}

/// `123.4 Mbit/s`.
fn rate(bits: u64) -> String {
    let b = bits as f64;
    match bits {
        0..=999 => format!("{bits} bit/s"),
        1_000..=999_999 => format!("{:.1} kbit/s", b / 1e3),
        1_000_000..=999_999_999 => format!("{:.1} Mbit/s", b / 1e6),
        _ => format!("{:.2} Gbit/s", b / 1e9),
    }
}
