//! The HTB hierarchy Causeway installs on an interface and owns: root
//! qdisc `ca:`, one root class `ca:1` at the link rate, and one leaf class
//! `ca:<0x10 + class id>` per policy class with its guaranteed rate, its
//! ceiling and its priority (0 = strict priority for control and clock).
//! The TC program sets `skb->priority` to the leaf's class id, which HTB
//! uses directly; unclassified frames go to the leaf of class 0.
//!
//! This module is the plan: the hierarchy as data, its checks, the `tc
//! -batch` text that builds it and the reading of `tc -j qdisc show`. Running
//! `tc` is `causeway::shaper::htb::Htb`.
//!
//! Paced (EDT) classes get `fq` as the root qdisc instead, with the same
//! handle `ca:` ([`RootQdisc::Fq`]).
//!
//! Ownership: before installing, the root qdisc must be a default one
//! (`noqueue`, `pfifo_fast`, `mq`, `fq_codel`, `noop`) or ours (HTB or fq
//! with handle `ca:`); removal deletes the root qdisc only when it is ours.

use serde::Deserialize;

/// Major number of Causeway's HTB qdisc.
pub const HTB_MAJOR: u16 = 0xca;
/// Minor of the root class.
pub const ROOT_MINOR: u16 = 0x1;
/// Minor of class 0's leaf; class `c` has `LEAF_MINOR_BASE + c`.
pub const LEAF_MINOR_BASE: u16 = 0x10;
/// Root qdisc kinds that Causeway may replace: the kernel's defaults.
pub const DEFAULT_QDISCS: [&str; 5] = ["noqueue", "pfifo_fast", "mq", "fq_codel", "noop"];

/// `skb->priority` / HTB class id of the leaf of `class`.
pub const fn leaf_classid(class: u8) -> u32 {
    ((HTB_MAJOR as u32) << 16) | (LEAF_MINOR_BASE + class as u16) as u32
}

/// One leaf class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HtbLeaf {
    pub class: u8,
    /// Guaranteed rate, bit/s.
    pub rate_bits: u64,
    /// Ceiling, bit/s (borrowing up to it).
    pub ceil_bits: u64,
    /// HTB priority 0..=7; 0 is served first.
    pub prio: u8,
    /// Bytes the class may send at once above its rate.
    pub burst_bytes: u64,
}

/// The root qdisc Causeway installs (handle `ca:` either way).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RootQdisc {
    /// The HTB hierarchy below.
    #[default]
    Htb,
    /// `fq` alone, for paced (EDT) classes: it holds each frame until
    /// the departure time the TC program wrote in `skb->tstamp`; the
    /// leaves are not installed.
    Fq,
}

/// `fq`'s per-flow packet limit: room for the GSO frames of a TCP flow
/// held back by its class's pacing (fq's default is 100).
pub const FQ_FLOW_LIMIT: u32 = 1000;

/// The whole hierarchy for one interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HtbPlan {
    /// Root class rate and ceiling, bit/s.
    pub link_bits: u64,
    /// Leaves; class 0 (the default class) must be one of them.
    pub leaves: Vec<HtbLeaf>,
    pub root: RootQdisc,
}

/// Why a hierarchy was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HtbPlanError {
    #[error(
        "class {class}: guaranteed rate {rate_bits} bit/s is above its ceiling {ceil_bits} bit/s"
    )]
    RateAboveCeiling {
        class: u8,
        rate_bits: u64,
        ceil_bits: u64,
    },
    #[error("class {class}: ceiling {ceil_bits} bit/s is above the link rate {link_bits} bit/s")]
    CeilingAboveLink {
        class: u8,
        ceil_bits: u64,
        link_bits: u64,
    },
    #[error("the guaranteed rates add up to {sum_bits} bit/s, more than the link rate {link_bits} bit/s")]
    Oversubscribed { sum_bits: u64, link_bits: u64 },
    #[error("class {class}: HTB priority {prio} is out of range (0..=7)")]
    PrioOutOfRange { class: u8, prio: u8 },
    #[error("the plan has no leaf for class 0, which takes unclassified traffic")]
    NoDefaultLeaf,
}

impl HtbPlanError {
    /// The class the error is about; `None` for the hierarchy as a whole.
    pub fn class(&self) -> Option<u8> {
        match self {
            Self::RateAboveCeiling { class, .. }
            | Self::CeilingAboveLink { class, .. }
            | Self::PrioOutOfRange { class, .. } => Some(*class),
            Self::Oversubscribed { .. } | Self::NoDefaultLeaf => None,
        }
    }
}

impl HtbPlan {
    /// Checks rates, ceilings and priorities against each other.
    pub fn validate(&self) -> Result<(), HtbPlanError> {
        if !self.leaves.iter().any(|l| l.class == 0) {
            return Err(HtbPlanError::NoDefaultLeaf);
        }
        let mut sum_bits = 0u64;
        for l in &self.leaves {
            if l.rate_bits > l.ceil_bits {
                return Err(HtbPlanError::RateAboveCeiling {
                    class: l.class,
                    rate_bits: l.rate_bits,
                    ceil_bits: l.ceil_bits,
                });
            }
            if l.ceil_bits > self.link_bits {
                return Err(HtbPlanError::CeilingAboveLink {
                    class: l.class,
                    ceil_bits: l.ceil_bits,
                    link_bits: self.link_bits,
                });
            }
            if l.prio > 7 {
                return Err(HtbPlanError::PrioOutOfRange {
                    class: l.class,
                    prio: l.prio,
                });
            }
            sum_bits = sum_bits.saturating_add(l.rate_bits);
        }
        if sum_bits > self.link_bits {
            return Err(HtbPlanError::Oversubscribed {
                sum_bits,
                link_bits: self.link_bits,
            });
        }
        Ok(())
    }

    /// `tc -batch` lines that build the hierarchy on `iface` from scratch.
    pub fn batch(&self, iface: &str) -> String {
        if self.root == RootQdisc::Fq {
            return format!(
                "qdisc add dev {iface} root handle {HTB_MAJOR:x}: fq flow_limit {FQ_FLOW_LIMIT}\n"
            );
        }
        let mut out = format!(
            "qdisc add dev {iface} root handle {HTB_MAJOR:x}: htb default {:x}\n",
            LEAF_MINOR_BASE
        );
        let root_burst = burst_for(self.link_bits, 0);
        out += &format!(
            "class add dev {iface} parent {HTB_MAJOR:x}: classid {HTB_MAJOR:x}:{ROOT_MINOR:x} htb rate {l}bit ceil {l}bit burst {root_burst} cburst {root_burst}\n",
            l = self.link_bits
        );
        for leaf in &self.leaves {
            out += &format!("class add dev {iface} {}\n", leaf_args(leaf).join(" "));
        }
        out
    }

    pub fn leaf(&self, class: u8) -> Option<&HtbLeaf> {
        self.leaves.iter().find(|l| l.class == class)
    }
}

/// HTB burst: shared with the TC program's bucket, which must tolerate it.
fn burst_for(rate_bits: u64, own: u64) -> u64 {
    bpf_maps::shaper::qdisc_burst_bytes(rate_bits, own)
}

/// DRR quantum: 1 ms at the rate, within HTB's sane range.
fn quantum_for(rate_bits: u64) -> u64 {
    (rate_bits / 8 / 1000).clamp(1514, 200_000)
}

/// `parent ... classid ... htb ...` arguments of one leaf.
pub fn leaf_args(l: &HtbLeaf) -> Vec<String> {
    let burst = burst_for(l.rate_bits, l.burst_bytes);
    let cburst = burst_for(l.ceil_bits, l.burst_bytes);
    [
        "parent".to_string(),
        format!("{HTB_MAJOR:x}:{ROOT_MINOR:x}"),
        "classid".to_string(),
        format!("{HTB_MAJOR:x}:{:x}", LEAF_MINOR_BASE + u16::from(l.class)),
        "htb".to_string(),
        "rate".to_string(),
        format!("{}bit", l.rate_bits),
        "ceil".to_string(),
        format!("{}bit", l.ceil_bits),
        "prio".to_string(),
        l.prio.to_string(),
        "burst".to_string(),
        burst.to_string(),
        "cburst".to_string(),
        cburst.to_string(),
        "quantum".to_string(),
        quantum_for(l.rate_bits).to_string(),
    ]
    .into()
}

/// One entry of `tc -j qdisc show`.
#[derive(Debug, Deserialize)]
struct QdiscInfo {
    kind: String,
    handle: String,
    #[serde(default)]
    root: bool,
}

/// Who owns the root qdisc of an interface.
#[derive(Debug, PartialEq, Eq)]
pub enum RootOwner {
    /// A kernel default: Causeway may install.
    Default,
    /// Causeway's HTB.
    Causeway,
    Foreign {
        kind: String,
        handle: String,
    },
}

/// Classifies the root qdisc from `tc -j qdisc show dev IF` output.
pub fn root_owner(json: &str) -> Result<RootOwner, String> {
    let qdiscs: Vec<QdiscInfo> = serde_json::from_str(json).map_err(|e| e.to_string())?;
    let Some(root) = qdiscs.into_iter().find(|q| q.root) else {
        return Ok(RootOwner::Default);
    };
    Ok(
        if (root.kind == "htb" || root.kind == "fq") && root.handle == format!("{HTB_MAJOR:x}:") {
            RootOwner::Causeway
        } else if DEFAULT_QDISCS.contains(&root.kind.as_str()) {
            RootOwner::Default
        } else {
            RootOwner::Foreign {
                kind: root.kind,
                handle: root.handle,
            }
        },
    )
}

#[cfg(test)]
#[path = "htb_tests.rs"]
mod tests;
