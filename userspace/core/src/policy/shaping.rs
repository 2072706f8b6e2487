//! The shaping part of a policy: a `[shaping]` table for the link and an
//! optional `shaping` table inside each `[[class]]`:
//!
//! ```toml
//! [shaping]
//! link_rate = "1gbit"     # HTB root: what the interface may send in total
//! mtu = 1500              # optional; bursts must hold one frame (mtu + 14)
//!
//! [[class]]
//! id = 5
//! name = "bulk"
//! shaping = { rate = "200mbit", ceil = "800mbit", burst = "128kb", priority = 4, over_limit = "ecn", dscp = "cs1" }
//! ```
//!
//! `rate` is guaranteed (HTB rate); `ceil` (default: `rate`) is the most the
//! class may send, enforced by the TC program's token bucket (with `burst`)
//! and by HTB's ceiling. `priority` 0..=7 is the HTB priority: 0 is strict
//! priority, the default for classes named `control` and `clock`; 4 is the
//! default for the others.
//! The burst is the backlog a class may build above its ceiling before the
//! over-limit action applies (the program sits in front of HTB, so it sees
//! arrivals, not departures): size it to the queue you accept; the default
//! (`default_burst`) leaves room for what one TCP sender queues.
//! `over_limit`: `"ecn"` (default: CE-mark ECN-capable frames; the rest
//! pass to HTB, which holds them to the ceiling by queueing), `"drop"`, or
//! `"demote"` with `demote_to = "<class>"`. The bucket also tolerates HTB's
//! own burst and lets a frame through while any credit remains (bounded
//! debt), so a GSO super-frame is never refused whole when part of it fits
//! and every action keeps a long TCP flow at its rate (the policer matrix
//! test, `tests/tests/integration/shaper/policer_matrix.rs`). `dscp`
//! rewrites the DSCP of every frame of the class.
//! `pacing`: `"police"` (default: the token bucket above, HTB at the
//! root) or `"edt"`: the TC program writes each frame's departure time
//! into `skb->tstamp` (the class's rate, frames charged by their wire
//! bytes) and the `fq` qdisc, installed at the root instead of HTB, holds
//! the frame until then; a frame that would leave `edt_horizon_ms` (default
//! 1000, 1..=10000) or more after its earliest departure is dropped. With
//! `edt`, every shaped class of the policy must use it, `ceil` must equal
//! `rate`, `over_limit` must be `"drop"` (its default then) and `burst`
//! does not apply; `priority` and `link_rate` are checked but unused (fq
//! has no classes). The kernel needs the `fq` qdisc (`CONFIG_NET_SCH_FQ`):
//! attaching refuses the policy where it is missing.
//! Rates: a number of bit/s or a string with `bit`, `kbit`, `mbit`, `gbit`,
//! `tbit` (powers of 1000). Sizes: bytes, or `kb`/`mb` (powers of 1024).
//! Both are read by [`crate::units`].
//!
//! This module reads the TOML and resolves names; the rules a plan must
//! follow are checked once, by [`ShapingPolicy::new`] (`shaper::plan`),
//! whose [`PlanError`] is mapped back to the line of the setting it names.

use serde::Deserialize;
use toml::Spanned;

pub use crate::shaper::plan::{
    class_shaping, default_burst, default_prio, htb_leaf, ClassShapingPolicy, PacingMode,
    ShapingPolicy, DEFAULT_BURST, DEFAULT_BURST_NS, DEFAULT_EDT_HORIZON_NS, DEFAULT_MTU,
    DEFAULT_PRIO, LINK_HEADER, STRICT_PRIORITY_CLASSES,
};
use crate::shaper::{
    config::OverAction,
    plan::{PlanError, Setting},
};

pub use super::quantity::{parse_rate, parse_size};
use super::{class::ClassTable, field};
/// The units parser under its earlier names (`crate::units` is the one).
pub use crate::units::{parse_bytes as parse_size_str, parse_rate_bps as parse_rate_str};

/// The `[shaping]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLinkShaping {
    pub link_rate: Spanned<toml::Value>,
    pub mtu: Option<Spanned<i64>>,
}

/// The `shaping` table of one `[[class]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClassShaping {
    pub rate: Spanned<toml::Value>,
    pub ceil: Option<Spanned<toml::Value>>,
    pub burst: Option<Spanned<toml::Value>>,
    pub priority: Option<Spanned<i64>>,
    pub over_limit: Option<Spanned<String>>,
    pub demote_to: Option<Spanned<String>>,
    pub dscp: Option<Spanned<toml::Value>>,
    pub pacing: Option<Spanned<String>>,
    pub edt_horizon_ms: Option<Spanned<i64>>,
}

/// What is wrong with shaping settings.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShapingProblem {
    #[error("{field}: {reason}")]
    BadRate { field: &'static str, reason: String },
    #[error("{field}: {reason}")]
    BadSize { field: &'static str, reason: String },
    #[error("priority {0} is out of range (0..=7, 0 is served first)")]
    BadPriority(i64),
    #[error("mtu {0} is out of range (68..=65535)")]
    BadMtu(i64),
    #[error("over_limit '{0}' is not known: use \"ecn\", \"drop\" or \"demote\"")]
    BadAction(String),
    #[error("over_limit = \"demote\" needs demote_to = \"<class>\"")]
    DemoteWithoutTarget,
    #[error("demote_to is only meaningful with over_limit = \"demote\"")]
    TargetWithoutDemote,
    #[error("demote_to '{name}' is not a class with shaping (shaped classes: {shaped})")]
    BadDemoteTarget { name: String, shaped: String },
    #[error("dscp: {0}")]
    BadDscp(String),
    #[error("pacing '{0}' is not known: use \"police\" or \"edt\"")]
    BadPacing(String),
    #[error("edt_horizon_ms {0} is out of range (1..=10000)")]
    BadHorizon(i64),
    #[error("edt_horizon_ms is only meaningful with pacing = \"edt\"")]
    HorizonWithoutEdt,
    #[error("burst does not apply with pacing = \"edt\" (edt_horizon_ms bounds the backlog)")]
    BurstWithEdt,
    #[error("a class has shaping but the policy has no [shaping] table with link_rate")]
    NoLink,
    /// The settings read, but the plan they make breaks a shaping rule.
    #[error("{0}")]
    Plan(PlanError),
}

/// A failure with the byte offset it refers to; `None` class = `[shaping]`.
pub(super) type ShapingFailure = (usize, Option<usize>, ShapingProblem);

/// Where one shaped class's settings are, to point at the one a
/// [`PlanError`] names (an absent setting points at what implied it).
struct ClassSpans {
    index: usize,
    class: u8,
    table: usize,
    rate: usize,
    ceil: usize,
    burst: usize,
    priority: usize,
    over_limit: usize,
    demotion: usize,
    dscp: usize,
    pacing: usize,
}

/// The key a problem is reported at: a plan setting, or `over_limit`.
#[derive(Clone, Copy)]
enum Key {
    Setting(Setting),
    OverLimit,
}

impl ClassSpans {
    fn of(index: usize, class: u8, spanned: &Spanned<RawClassShaping>) -> Self {
        let raw = spanned.get_ref();
        let table = spanned.span().start;
        let at = |s: Option<usize>, default: usize| s.unwrap_or(default);
        let rate = raw.rate.span().start;
        let over_limit = at(raw.over_limit.as_ref().map(|o| o.span().start), rate);
        Self {
            index,
            class,
            table,
            rate,
            ceil: at(raw.ceil.as_ref().map(|c| c.span().start), rate),
            burst: at(raw.burst.as_ref().map(|b| b.span().start), table),
            priority: at(raw.priority.as_ref().map(|p| p.span().start), table),
            over_limit,
            demotion: at(raw.demote_to.as_ref().map(|d| d.span().start), over_limit),
            dscp: at(raw.dscp.as_ref().map(|d| d.span().start), table),
            pacing: at(raw.pacing.as_ref().map(|p| p.span().start), table),
        }
    }

    fn offset(&self, setting: Setting) -> usize {
        match setting {
            Setting::Rate => self.rate,
            Setting::Ceil => self.ceil,
            Setting::Burst => self.burst,
            Setting::Priority => self.priority,
            Setting::Demotion => self.demotion,
            Setting::Dscp => self.dscp,
            Setting::Pacing => self.pacing,
            Setting::Class | Setting::LinkRate | Setting::Mtu => self.table,
        }
    }

    fn key(&self, key: Key) -> usize {
        match key {
            Key::Setting(setting) => self.offset(setting),
            Key::OverLimit => self.over_limit,
        }
    }
}

/// Validates the shaping settings of `raw_classes` (index-aligned with the
/// `[[class]]` tables) against the class table.
pub(super) fn check(
    link: Option<&Spanned<RawLinkShaping>>,
    raw_classes: &[(u8, Option<&Spanned<RawClassShaping>>)],
    classes: &ClassTable,
) -> Result<Option<ShapingPolicy>, ShapingFailure> {
    let shaped: Vec<_> = raw_classes
        .iter()
        .enumerate()
        .filter_map(|(i, (id, s))| s.map(|s| (i, *id, s)))
        .collect();
    let Some(link) = link else {
        return match shaped.first() {
            Some((i, _, s)) => Err((s.span().start, Some(*i), ShapingProblem::NoLink)),
            None => Ok(None),
        };
    };
    let l = link.get_ref();
    let link_at = l.link_rate.span().start;
    let link_bits = parse_rate(l.link_rate.get_ref()).map_err(|reason| {
        (
            link_at,
            None,
            ShapingProblem::BadRate {
                field: "link_rate",
                reason,
            },
        )
    })?;
    let mtu = match &l.mtu {
        None => DEFAULT_MTU,
        Some(m) => {
            let v = *m.get_ref();
            u32::try_from(v).map_err(|_| (m.span().start, None, ShapingProblem::BadMtu(v)))?
        }
    };
    let frame = u64::from(mtu) + LINK_HEADER;
    let shaped_names: Vec<String> = shaped
        .iter()
        .map(|(_, id, _)| classes.name_of(*id))
        .collect();
    let mut out = Vec::new();
    let mut spans = Vec::new();
    for &(index, class, spanned) in &shaped {
        let at = ClassSpans::of(index, class, spanned);
        let fail = |offset: usize, p: ShapingProblem| (offset, Some(index), p);
        out.push(
            read_class(spanned.get_ref(), class, frame, classes, &shaped_names)
                .map_err(|(key, p)| fail(at.key(key), p))?,
        );
        spans.push(at);
    }
    ShapingPolicy::new(link_bits, mtu, out)
        .map(Some)
        .map_err(|e| {
            let offset = match e.setting() {
                Setting::Mtu => l.mtu.as_ref().map_or(link_at, |m| m.span().start),
                _ => link_at,
            };
            match e.class().and_then(|c| spans.iter().find(|s| s.class == c)) {
                Some(at) => (
                    at.offset(e.setting()),
                    Some(at.index),
                    ShapingProblem::Plan(e),
                ),
                None => (offset, None, ShapingProblem::Plan(e)),
            }
        })
}

/// One class's settings as written, with defaults filled in; a failure
/// names the setting it is about.
fn read_class(
    raw: &RawClassShaping,
    class: u8,
    frame: u64,
    classes: &ClassTable,
    shaped_names: &[String],
) -> Result<ClassShapingPolicy, (Key, ShapingProblem)> {
    let rate = |field: &'static str, setting, v: &toml::Value| {
        parse_rate(v).map_err(|reason| {
            (
                Key::Setting(setting),
                ShapingProblem::BadRate { field, reason },
            )
        })
    };
    let rate_bits = rate("rate", Setting::Rate, raw.rate.get_ref())?;
    let ceil_bits = match &raw.ceil {
        None => rate_bits,
        Some(c) => rate("ceil", Setting::Ceil, c.get_ref())?,
    };
    let pacing = pacing(raw)?;
    let edt = matches!(pacing, PacingMode::Edt { .. });
    if let (true, Some(_)) = (edt, &raw.burst) {
        return Err((Key::Setting(Setting::Burst), ShapingProblem::BurstWithEdt));
    }
    let burst_bytes = match &raw.burst {
        None => default_burst(ceil_bits).max(frame),
        Some(b) => parse_size(b.get_ref()).map_err(|reason| {
            (
                Key::Setting(Setting::Burst),
                ShapingProblem::BadSize {
                    field: "burst",
                    reason,
                },
            )
        })?,
    };
    let prio = match &raw.priority {
        None => default_prio(&classes.name_of(class)),
        Some(p) => {
            let v = *p.get_ref();
            u8::try_from(v).map_err(|_| {
                (
                    Key::Setting(Setting::Priority),
                    ShapingProblem::BadPriority(v),
                )
            })?
        }
    };
    let over = over_action(raw, classes, shaped_names, edt).map_err(|p| {
        let key = match p {
            ShapingProblem::BadAction(_) | ShapingProblem::DemoteWithoutTarget => Key::OverLimit,
            _ => Key::Setting(Setting::Demotion),
        };
        (key, p)
    })?;
    let dscp = match &raw.dscp {
        None => None,
        Some(d) => Some(field::dscp(d.get_ref()).map_err(|e| {
            (
                Key::Setting(Setting::Dscp),
                ShapingProblem::BadDscp(e.to_string()),
            )
        })?),
    };
    Ok(ClassShapingPolicy {
        class,
        rate_bits,
        ceil_bits,
        burst_bytes,
        prio,
        over,
        dscp,
        pacing,
    })
}

/// `pacing` and `edt_horizon_ms`.
fn pacing(raw: &RawClassShaping) -> Result<PacingMode, (Key, ShapingProblem)> {
    let fail = |p| (Key::Setting(Setting::Pacing), p);
    let mode = raw
        .pacing
        .as_ref()
        .map_or("police", |p| p.get_ref().as_str());
    match (mode, &raw.edt_horizon_ms) {
        ("police", None) => Ok(PacingMode::Police),
        ("police", Some(_)) => Err(fail(ShapingProblem::HorizonWithoutEdt)),
        ("edt", None) => Ok(PacingMode::Edt {
            horizon_ns: DEFAULT_EDT_HORIZON_NS,
        }),
        ("edt", Some(ms)) => {
            let v = *ms.get_ref();
            match u64::try_from(v) {
                Ok(ms @ 1..=10_000) => Ok(PacingMode::Edt {
                    horizon_ns: ms * 1_000_000,
                }),
                _ => Err(fail(ShapingProblem::BadHorizon(v))),
            }
        }
        (other, _) => Err(fail(ShapingProblem::BadPacing(other.to_string()))),
    }
}

/// `over_limit` and `demote_to`, with the target's name resolved; whether
/// the target may be demoted to is the plan's rule.
fn over_action(
    raw: &RawClassShaping,
    classes: &ClassTable,
    shaped_names: &[String],
    edt: bool,
) -> Result<OverAction, ShapingProblem> {
    let default = if edt { "drop" } else { "ecn" };
    let action = raw
        .over_limit
        .as_ref()
        .map_or(default, |a| a.get_ref().as_str());
    let over = match action {
        "ecn" => OverAction::EcnMark,
        "drop" => OverAction::Drop,
        "demote" => {
            let name = raw
                .demote_to
                .as_ref()
                .ok_or(ShapingProblem::DemoteWithoutTarget)?
                .get_ref();
            let class = classes
                .by_name(name)
                .ok_or_else(|| ShapingProblem::BadDemoteTarget {
                    name: name.clone(),
                    shaped: shaped_names.join(", "),
                })?;
            return Ok(OverAction::Demote(class.id));
        }
        other => return Err(ShapingProblem::BadAction(other.to_string())),
    };
    if raw.demote_to.is_some() {
        return Err(ShapingProblem::TargetWithoutDemote);
    }
    Ok(over)
}

impl ShapingPolicy {
    /// The settings as `policy check` lists them, one class per line.
    pub fn describe(&self, classes: &ClassTable) -> String {
        let mut out = format!(
            "shaping (link {} bit/s, mtu {}):\n",
            self.link_bits, self.mtu
        );
        for c in &self.classes {
            let over = match c.over {
                OverAction::Drop => "drop".to_string(),
                OverAction::EcnMark => "ecn".to_string(),
                OverAction::Demote(to) => format!("demote to {}", classes.name_of(to)),
            };
            let dscp = c.dscp.map_or_else(|| "kept".to_string(), |d| d.to_string());
            out += &match c.pacing {
                PacingMode::Police => format!(
                    "  {}: rate {} bit/s, ceil {} bit/s, burst {} bytes, prio {}, over limit {over}, dscp {dscp}\n",
                    classes.name_of(c.class),
                    c.rate_bits,
                    c.ceil_bits,
                    c.burst_bytes,
                    c.prio
                ),
                PacingMode::Edt { horizon_ns } => format!(
                    "  {}: paced (edt, fq) at {} bit/s, horizon {} ms, over limit {over}, dscp {dscp}\n",
                    classes.name_of(c.class),
                    c.ceil_bits,
                    horizon_ns / 1_000_000
                ),
            };
        }
        out
    }
}

#[cfg(test)]
#[path = "shaping_tests.rs"]
mod tests;
