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
//! pass to HTB, which holds them to the ceiling by queueing), `"drop"`, or `"demote"` with `demote_to = "<class>"`. Note that
//! `"drop"` discards whole GSO super-frames of TCP flows (tens of segments
//! at once), which TCP survives badly; `"ecn"` suits TCP, `"drop"` suits
//! unresponsive UDP. `dscp` rewrites the DSCP of every frame of the class.
//! Rates: a number of bit/s or a string with `bit`, `kbit`, `mbit`, `gbit`,
//! `tbit` (powers of 1000). Sizes: bytes, or `kb`/`mb` (powers of 1024).
//! Both are read by [`crate::units`].

use serde::Deserialize;
use toml::Spanned;

use crate::shaper::{
    bucket::{BucketError, BucketParams},
    config::{ClassShaping, OverAction, ShapingTable},
    htb::{leaf_classid, HtbLeaf, HtbPlan},
};

pub use super::quantity::{parse_rate, parse_size};
use super::{class::ClassTable, field};
/// The units parser under its earlier names (`causeway::units` is the one).
pub use crate::units::{parse_bytes as parse_size_str, parse_rate_bps as parse_rate_str};

/// Bytes of link header counted on top of the MTU (Ethernet).
pub const LINK_HEADER: u64 = 14;
/// Smallest default burst.
pub const DEFAULT_BURST: u64 = 256 * 1024;
/// The default burst also covers this much time at the ceiling.
pub const DEFAULT_BURST_NS: u64 = 10_000_000;

/// The default burst of a class whose ceiling is `ceil_bits`: the backlog
/// one TCP sender keeps in the qdisc (TSQ allows about two 64 KiB GSO
/// frames, or ~1 ms at its pacing rate) must not trigger the over-limit
/// action, or the program would drop frames that HTB would have queued.
pub fn default_burst(ceil_bits: u64) -> u64 {
    let at_ceil = (u128::from(ceil_bits) * u128::from(DEFAULT_BURST_NS) / 8_000_000_000) as u64;
    DEFAULT_BURST.max(at_ceil)
}
/// Default HTB priority.
pub const DEFAULT_PRIO: u8 = 4;
/// Classes whose default HTB priority is 0 (strict priority): the design's
/// latency-sensitive classes.
pub const STRICT_PRIORITY_CLASSES: [&str; 2] = ["control", "clock"];

/// The HTB priority of a class whose policy does not set one.
pub fn default_prio(name: &str) -> u8 {
    if STRICT_PRIORITY_CLASSES.contains(&name) {
        0
    } else {
        DEFAULT_PRIO
    }
}

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
}

/// One class's validated shaping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassShapingPolicy {
    pub class: u8,
    pub rate_bits: u64,
    pub ceil_bits: u64,
    pub burst_bytes: u64,
    pub prio: u8,
    pub over: OverAction,
    pub dscp: Option<u8>,
}

/// The validated shaping of a policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapingPolicy {
    pub link_bits: u64,
    pub mtu: u32,
    /// Shaped classes in id order.
    pub classes: Vec<ClassShapingPolicy>,
}

/// What is wrong with shaping settings.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShapingProblem {
    #[error("{field}: {reason}")]
    BadRate { field: &'static str, reason: String },
    #[error("{field}: {reason}")]
    BadSize { field: &'static str, reason: String },
    #[error("{0}")]
    Bucket(BucketError),
    #[error("ceil {ceil_bits} bit/s is below rate {rate_bits} bit/s")]
    CeilBelowRate { rate_bits: u64, ceil_bits: u64 },
    #[error("ceil {ceil_bits} bit/s is above the link rate {link_bits} bit/s")]
    CeilAboveLink { ceil_bits: u64, link_bits: u64 },
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
    #[error("demote_to '{0}': a class cannot demote to itself, and a demotion target cannot demote further")]
    DemoteLoop(String),
    #[error("dscp: {0}")]
    BadDscp(String),
    #[error("a class has shaping but the policy has no [shaping] table with link_rate")]
    NoLink,
    #[error("guaranteed rates add up to {sum_bits} bit/s; the link rate {link_bits} bit/s must exceed that when class 'default' has no shaping of its own")]
    Oversubscribed { sum_bits: u64, link_bits: u64 },
}

/// A failure with the byte offset it refers to; `None` class = `[shaping]`.
pub(super) type ShapingFailure = (usize, Option<usize>, ShapingProblem);

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
    let link_bits = parse_rate(l.link_rate.get_ref()).map_err(|reason| {
        (
            l.link_rate.span().start,
            None,
            ShapingProblem::BadRate {
                field: "link_rate",
                reason,
            },
        )
    })?;
    let mtu = match &l.mtu {
        None => 1500,
        Some(m) => {
            let v = *m.get_ref();
            u32::try_from(v)
                .ok()
                .filter(|v| (68..=65535).contains(v))
                .ok_or((m.span().start, None, ShapingProblem::BadMtu(v)))?
        }
    };
    let frame = u64::from(mtu) + LINK_HEADER;
    let shaped_names: Vec<String> = shaped
        .iter()
        .map(|(_, id, _)| classes.name_of(*id))
        .collect();
    let mut out = Vec::new();
    for &(index, class, spanned) in &shaped {
        let raw = spanned.get_ref();
        let fail = |offset: usize, p: ShapingProblem| (offset, Some(index), p);
        let rate_bits = parse_rate(raw.rate.get_ref()).map_err(|reason| {
            fail(
                raw.rate.span().start,
                ShapingProblem::BadRate {
                    field: "rate",
                    reason,
                },
            )
        })?;
        let (ceil_bits, ceil_at) = match &raw.ceil {
            None => (rate_bits, raw.rate.span().start),
            Some(c) => (
                parse_rate(c.get_ref()).map_err(|reason| {
                    fail(
                        c.span().start,
                        ShapingProblem::BadRate {
                            field: "ceil",
                            reason,
                        },
                    )
                })?,
                c.span().start,
            ),
        };
        if ceil_bits < rate_bits {
            return Err(fail(
                ceil_at,
                ShapingProblem::CeilBelowRate {
                    rate_bits,
                    ceil_bits,
                },
            ));
        }
        if ceil_bits > link_bits {
            return Err(fail(
                ceil_at,
                ShapingProblem::CeilAboveLink {
                    ceil_bits,
                    link_bits,
                },
            ));
        }
        let (burst_bytes, burst_at) = match &raw.burst {
            None => (default_burst(ceil_bits).max(frame), spanned.span().start),
            Some(b) => (
                parse_size(b.get_ref()).map_err(|reason| {
                    fail(
                        b.span().start,
                        ShapingProblem::BadSize {
                            field: "burst",
                            reason,
                        },
                    )
                })?,
                b.span().start,
            ),
        };
        BucketParams::new(ceil_bits, burst_bytes, frame)
            .map_err(|e| fail(burst_at, ShapingProblem::Bucket(e)))?;
        let prio = match &raw.priority {
            None => default_prio(&classes.name_of(class)),
            Some(p) => {
                let v = *p.get_ref();
                u8::try_from(v)
                    .ok()
                    .filter(|v| *v <= 7)
                    .ok_or(fail(p.span().start, ShapingProblem::BadPriority(v)))?
            }
        };
        let over = over_action(raw, class, classes, &shaped, &shaped_names)
            .map_err(|(o, p)| fail(o, p))?;
        let dscp = match &raw.dscp {
            None => None,
            Some(d) => Some(
                field::dscp(d.get_ref())
                    .map_err(|e| fail(d.span().start, ShapingProblem::BadDscp(e.to_string())))?,
            ),
        };
        out.push(ClassShapingPolicy {
            class,
            rate_bits,
            ceil_bits,
            burst_bytes,
            prio,
            over,
            dscp,
        });
    }
    out.sort_by_key(|c| c.class);
    let sum_bits: u64 = out.iter().map(|c| c.rate_bits).fold(0, u64::saturating_add);
    let default_shaped = out.iter().any(|c| c.class == 0);
    if sum_bits > link_bits || (!default_shaped && sum_bits >= link_bits) {
        return Err((
            l.link_rate.span().start,
            None,
            ShapingProblem::Oversubscribed {
                sum_bits,
                link_bits,
            },
        ));
    }
    Ok(Some(ShapingPolicy {
        link_bits,
        mtu,
        classes: out,
    }))
}

fn over_action(
    raw: &RawClassShaping,
    class: u8,
    classes: &ClassTable,
    shaped: &[(usize, u8, &Spanned<RawClassShaping>)],
    shaped_names: &[String],
) -> Result<OverAction, (usize, ShapingProblem)> {
    let action = raw
        .over_limit
        .as_ref()
        .map_or("ecn", |a| a.get_ref().as_str());
    let at = raw
        .over_limit
        .as_ref()
        .map_or(raw.rate.span().start, |a| a.span().start);
    let over = match action {
        "ecn" => OverAction::EcnMark,
        "drop" => OverAction::Drop,
        "demote" => {
            let target = raw
                .demote_to
                .as_ref()
                .ok_or((at, ShapingProblem::DemoteWithoutTarget))?;
            let name = target.get_ref();
            let bad = || {
                (
                    target.span().start,
                    ShapingProblem::BadDemoteTarget {
                        name: name.clone(),
                        shaped: shaped_names.join(", "),
                    },
                )
            };
            let id = classes.by_name(name).ok_or_else(bad)?.id;
            let (_, _, t) = shaped.iter().find(|(_, i, _)| *i == id).ok_or_else(bad)?;
            let target_demotes = t
                .get_ref()
                .over_limit
                .as_ref()
                .is_some_and(|a| a.get_ref() == "demote");
            if id == class || target_demotes {
                return Err((
                    target.span().start,
                    ShapingProblem::DemoteLoop(name.clone()),
                ));
            }
            return Ok(OverAction::Demote(id));
        }
        other => return Err((at, ShapingProblem::BadAction(other.to_string()))),
    };
    if let Some(t) = &raw.demote_to {
        return Err((t.span().start, ShapingProblem::TargetWithoutDemote));
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
            out += &format!(
                "  {}: rate {} bit/s, ceil {} bit/s, burst {} bytes, prio {}, over limit {over}, dscp {dscp}\n",
                classes.name_of(c.class),
                c.rate_bits,
                c.ceil_bits,
                c.burst_bytes,
                c.prio
            );
        }
        out
    }

    /// One frame at the link MTU, with its link header.
    pub fn frame_bytes(&self) -> u64 {
        u64::from(self.mtu) + LINK_HEADER
    }

    pub fn class(&self, id: u8) -> Option<&ClassShapingPolicy> {
        self.classes.iter().find(|c| c.class == id)
    }

    /// The HTB hierarchy: a leaf per shaped class, plus one for class 0
    /// (unclassified frames) with what is left of the link when the policy
    /// does not shape it.
    pub fn htb_plan(&self) -> HtbPlan {
        let mut leaves: Vec<HtbLeaf> = self.classes.iter().map(leaf).collect();
        if self.class(0).is_none() {
            let sum: u64 = self.classes.iter().map(|c| c.rate_bits).sum();
            leaves.insert(
                0,
                HtbLeaf {
                    class: 0,
                    rate_bits: self.link_bits - sum,
                    ceil_bits: self.link_bits,
                    prio: DEFAULT_PRIO,
                    burst_bytes: DEFAULT_BURST,
                },
            );
        }
        HtbPlan {
            link_bits: self.link_bits,
            leaves,
        }
    }

    /// The TC program's table: bucket at the ceiling, action, DSCP, and
    /// `skb->priority` = the class's HTB leaf.
    pub fn shaping_table(&self) -> ShapingTable {
        let entries = self
            .classes
            .iter()
            .map(|c| (c.class, class_shaping(c, self.frame_bytes())));
        // Checked by `check`: ids < 16, DSCP <= 63, demotion targets shaped.
        ShapingTable::new(entries).unwrap_or_default()
    }
}

fn leaf(c: &ClassShapingPolicy) -> HtbLeaf {
    HtbLeaf {
        class: c.class,
        rate_bits: c.rate_bits,
        ceil_bits: c.ceil_bits,
        prio: c.prio,
        burst_bytes: c.burst_bytes,
    }
}

/// The program's entry for one class.
pub fn class_shaping(c: &ClassShapingPolicy, frame: u64) -> ClassShaping {
    ClassShaping {
        bucket: BucketParams::new(c.ceil_bits, c.burst_bytes, frame).ok(),
        over: c.over,
        dscp: c.dscp,
        priority: Some(leaf_classid(c.class)),
    }
}

/// The HTB leaf of one class.
pub fn htb_leaf(c: &ClassShapingPolicy) -> HtbLeaf {
    leaf(c)
}

#[cfg(test)]
#[path = "shaping_tests.rs"]
mod tests;
