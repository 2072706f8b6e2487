//! The validated shaping plan of one interface: the link, and per shaped
//! class its guaranteed rate, ceiling, burst, HTB priority, over-limit
//! action and DSCP. It is the one place shaping is validated
//! ([`ShapingPolicy::validate`]); each rule is checked once, by the model it
//! belongs to:
//!
//! - rates, ceilings, priorities and their sum: [`HtbPlan::validate`], on the
//!   plan's HTB hierarchy ([`ShapingPolicy::htb_plan`]);
//! - what the default class keeps when it is not shaped, and the MTU: here;
//! - each class's token bucket: [`BucketParams::new`];
//! - class ids, DSCP values and demotion targets: [`ShapingTable::new`], on
//!   the program's table ([`ShapingPolicy::shaping_table`]).
//!
//! `policy::shaping` reads the TOML into a [`ShapingPolicy`] and maps a
//! [`PlanError`] back to the line of the setting it names
//! ([`PlanError::class`], [`PlanError::setting`]).

use super::{
    bucket::{BucketError, BucketParams},
    config::{ClassShaping, OverAction, ShapingError, ShapingTable},
    htb::{leaf_classid, HtbLeaf, HtbPlan, HtbPlanError, RootQdisc},
};

/// Bytes of link header counted on top of the MTU (Ethernet).
pub const LINK_HEADER: u64 = 14;
/// The MTUs a plan accepts.
pub const MTU_RANGE: std::ops::RangeInclusive<u32> = 68..=65535;
/// The MTU of a plan that does not give one.
pub const DEFAULT_MTU: u32 = 1500;
/// Smallest default burst.
pub const DEFAULT_BURST: u64 = 256 * 1024;
/// The default burst also covers this much time at the ceiling.
pub const DEFAULT_BURST_NS: u64 = 10_000_000;
/// Default HTB priority.
pub const DEFAULT_PRIO: u8 = 4;
/// Classes whose default HTB priority is 0 (strict priority): the design's
/// latency-sensitive classes.
pub const STRICT_PRIORITY_CLASSES: [&str; 2] = ["control", "clock"];

/// The default burst of a class whose ceiling is `ceil_bits`: the backlog
/// one TCP sender keeps in the qdisc (TSQ allows about two 64 KiB GSO
/// frames, or ~1 ms at its pacing rate) must not trigger the over-limit
/// action, or the program would drop frames that HTB would have queued.
pub fn default_burst(ceil_bits: u64) -> u64 {
    let at_ceil = (u128::from(ceil_bits) * u128::from(DEFAULT_BURST_NS) / 8_000_000_000) as u64;
    DEFAULT_BURST.max(at_ceil)
}

/// The HTB priority of a class whose policy does not set one.
pub fn default_prio(name: &str) -> u8 {
    if STRICT_PRIORITY_CLASSES.contains(&name) {
        0
    } else {
        DEFAULT_PRIO
    }
}

/// The EDT horizon of a paced class whose policy does not set one: the
/// backlog TCP small queues lets several senders keep in `fq` at tens of
/// Mbit/s stays well inside it, so frames are delayed, not dropped.
pub const DEFAULT_EDT_HORIZON_NS: u64 = 1_000_000_000;

/// How a class's ceiling is enforced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PacingMode {
    /// The TC program's token bucket polices arrivals at HTB, which
    /// queues (the default).
    #[default]
    Police,
    /// The TC program stamps each frame's departure time (`skb->tstamp`)
    /// and the `fq` root qdisc holds it until then; frames that would
    /// leave `horizon_ns` or more late are dropped.
    Edt { horizon_ns: u64 },
}

/// One class's shaping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassShapingPolicy {
    pub class: u8,
    pub rate_bits: u64,
    pub ceil_bits: u64,
    pub burst_bytes: u64,
    pub prio: u8,
    pub over: OverAction,
    pub dscp: Option<u8>,
    pub pacing: PacingMode,
}

/// The shaping of one interface, validated by [`ShapingPolicy::new`].
///
/// The fields stay public for live changes (`set-rate` lowers a ceiling in
/// place); what derives from them ([`Self::shaping_table`]) re-checks and
/// reports a typed error rather than dropping a class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapingPolicy {
    pub link_bits: u64,
    pub mtu: u32,
    /// Shaped classes in id order.
    pub classes: Vec<ClassShapingPolicy>,
}

/// The setting a [`PlanError`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setting {
    LinkRate,
    Mtu,
    /// The class as a whole (its id).
    Class,
    Rate,
    Ceil,
    Burst,
    Priority,
    Demotion,
    Dscp,
    Pacing,
}

/// Why a shaping plan was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("mtu {0} is out of range (68..=65535)")]
    MtuOutOfRange(u32),
    #[error("class {class} is shaped twice")]
    DuplicateClass { class: u8 },
    #[error("guaranteed rates add up to {sum_bits} bit/s; the link rate {link_bits} bit/s must exceed that when class 'default' has no shaping of its own")]
    NoRoomForDefault { sum_bits: u64, link_bits: u64 },
    #[error("{0}")]
    Htb(HtbPlanError),
    #[error("class {class}: {source}")]
    Bucket { class: u8, source: BucketError },
    #[error("{0}")]
    Table(ShapingError),
    #[error("class {class}: pacing = \"edt\" puts the fq qdisc at the root instead of HTB, so every shaped class must use it (class {other} does not)")]
    EdtMixed { class: u8, other: u8 },
    #[error(
        "class {class}: pacing = \"edt\" paces at one rate; ceil must equal rate (or be left out)"
    )]
    EdtCeiling { class: u8 },
    #[error("class {class}: pacing = \"edt\" drops frames beyond its horizon; over_limit must be \"drop\" (or be left out)")]
    EdtAction { class: u8 },
}

impl PlanError {
    /// The class the error is about; `None` for the link.
    pub fn class(&self) -> Option<u8> {
        match self {
            Self::MtuOutOfRange(_) | Self::NoRoomForDefault { .. } => None,
            Self::DuplicateClass { class }
            | Self::Bucket { class, .. }
            | Self::EdtMixed { class, .. }
            | Self::EdtCeiling { class }
            | Self::EdtAction { class } => Some(*class),
            Self::Htb(e) => e.class(),
            Self::Table(e) => Some(e.class()),
        }
    }

    /// The setting the error is about.
    pub fn setting(&self) -> Setting {
        match self {
            Self::MtuOutOfRange(_) => Setting::Mtu,
            Self::NoRoomForDefault { .. } => Setting::LinkRate,
            Self::DuplicateClass { .. } => Setting::Class,
            Self::Bucket { source, .. } => match source {
                BucketError::HorizonOutOfRange { .. } => Setting::Pacing,
                _ => Setting::Burst,
            },
            Self::EdtMixed { .. } | Self::EdtAction { .. } => Setting::Pacing,
            Self::EdtCeiling { .. } => Setting::Ceil,
            Self::Htb(e) => match e {
                HtbPlanError::RateAboveCeiling { .. } | HtbPlanError::CeilingAboveLink { .. } => {
                    Setting::Ceil
                }
                HtbPlanError::PrioOutOfRange { .. } => Setting::Priority,
                HtbPlanError::Oversubscribed { .. } | HtbPlanError::NoDefaultLeaf => {
                    Setting::LinkRate
                }
            },
            Self::Table(e) => match e {
                ShapingError::ClassOutOfRange { .. } => Setting::Class,
                ShapingError::DscpOutOfRange { .. } => Setting::Dscp,
                ShapingError::DemoteToUnknown { .. }
                | ShapingError::DemoteToSelf { .. }
                | ShapingError::DemoteChain { .. } => Setting::Demotion,
            },
        }
    }
}

impl ShapingPolicy {
    /// A plan for a link of `link_bits` with frames of `mtu`, shaping
    /// `classes` (in any order), validated.
    pub fn new(
        link_bits: u64,
        mtu: u32,
        mut classes: Vec<ClassShapingPolicy>,
    ) -> Result<Self, PlanError> {
        classes.sort_by_key(|c| c.class);
        let plan = Self {
            link_bits,
            mtu,
            classes,
        };
        plan.validate()?;
        Ok(plan)
    }

    /// Checks every rule of the plan (see the module documentation).
    pub fn validate(&self) -> Result<(), PlanError> {
        if !MTU_RANGE.contains(&self.mtu) {
            return Err(PlanError::MtuOutOfRange(self.mtu));
        }
        if let Some(pair) = self.classes.windows(2).find(|w| w[0].class == w[1].class) {
            return Err(PlanError::DuplicateClass {
                class: pair[0].class,
            });
        }
        self.check_pacing()?;
        self.htb_plan().validate().map_err(PlanError::Htb)?;
        let sum_bits = self.guaranteed_bits();
        if self.class(0).is_none() && sum_bits >= self.link_bits {
            return Err(PlanError::NoRoomForDefault {
                sum_bits,
                link_bits: self.link_bits,
            });
        }
        self.shaping_table().map(|_| ())
    }

    /// Paced classes: all shaped classes or none (the root qdisc is `fq`
    /// or HTB), each at one rate, dropping beyond the horizon.
    fn check_pacing(&self) -> Result<(), PlanError> {
        let edt = |c: &&ClassShapingPolicy| matches!(c.pacing, PacingMode::Edt { .. });
        let Some(paced) = self.classes.iter().find(edt) else {
            return Ok(());
        };
        if let Some(other) = self.classes.iter().find(|c| !edt(c)) {
            return Err(PlanError::EdtMixed {
                class: paced.class.max(other.class),
                other: if paced.class > other.class {
                    other.class
                } else {
                    paced.class
                },
            });
        }
        for c in &self.classes {
            if c.ceil_bits != c.rate_bits {
                return Err(PlanError::EdtCeiling { class: c.class });
            }
            if c.over != OverAction::Drop {
                return Err(PlanError::EdtAction { class: c.class });
            }
        }
        Ok(())
    }

    /// Whether the classes are paced (EDT, under `fq`) rather than policed.
    pub fn uses_edt(&self) -> bool {
        self.classes
            .iter()
            .any(|c| matches!(c.pacing, PacingMode::Edt { .. }))
    }

    /// One frame at the link MTU, with its link header.
    pub fn frame_bytes(&self) -> u64 {
        u64::from(self.mtu) + LINK_HEADER
    }

    pub fn class(&self, id: u8) -> Option<&ClassShapingPolicy> {
        self.classes.iter().find(|c| c.class == id)
    }

    /// The sum of the shaped classes' guaranteed rates.
    fn guaranteed_bits(&self) -> u64 {
        self.classes
            .iter()
            .map(|c| c.rate_bits)
            .fold(0, u64::saturating_add)
    }

    /// The HTB hierarchy: a leaf per shaped class, plus one for class 0
    /// (unclassified frames) with what is left of the link when the plan
    /// does not shape it. With paced classes the root qdisc is `fq`
    /// instead and the leaves are only checked, not installed.
    pub fn htb_plan(&self) -> HtbPlan {
        let mut leaves: Vec<HtbLeaf> = self.classes.iter().map(htb_leaf).collect();
        if self.class(0).is_none() {
            leaves.insert(
                0,
                HtbLeaf {
                    class: 0,
                    rate_bits: self.link_bits.saturating_sub(self.guaranteed_bits()),
                    ceil_bits: self.link_bits,
                    prio: DEFAULT_PRIO,
                    burst_bytes: DEFAULT_BURST,
                },
            );
        }
        HtbPlan {
            link_bits: self.link_bits,
            leaves,
            root: if self.uses_edt() {
                RootQdisc::Fq
            } else {
                RootQdisc::Htb
            },
        }
    }

    /// The TC program's table: bucket at the ceiling, action, DSCP, and
    /// `skb->priority` = the class's HTB leaf.
    pub fn shaping_table(&self) -> Result<ShapingTable, PlanError> {
        let frame = self.frame_bytes();
        let entries = self
            .classes
            .iter()
            .map(|c| Ok((c.class, class_shaping(c, frame)?)))
            .collect::<Result<Vec<_>, PlanError>>()?;
        ShapingTable::new(entries).map_err(PlanError::Table)
    }
}

/// The program's entry for one class.
pub fn class_shaping(c: &ClassShapingPolicy, frame: u64) -> Result<ClassShaping, PlanError> {
    let bucket = match c.pacing {
        PacingMode::Police => BucketParams::new(c.ceil_bits, c.burst_bytes, frame),
        PacingMode::Edt { horizon_ns } => BucketParams::edt(c.ceil_bits, horizon_ns),
    }
    .map_err(|source| PlanError::Bucket {
        class: c.class,
        source,
    })?;
    // Under fq there are no HTB leaves to steer frames to.
    let priority = match c.pacing {
        PacingMode::Police => Some(leaf_classid(c.class)),
        PacingMode::Edt { .. } => None,
    };
    Ok(ClassShaping {
        bucket: Some(bucket),
        over: c.over,
        dscp: c.dscp,
        priority,
    })
}

/// The HTB leaf of one class.
pub fn htb_leaf(c: &ClassShapingPolicy) -> HtbLeaf {
    HtbLeaf {
        class: c.class,
        rate_bits: c.rate_bits,
        ceil_bits: c.ceil_bits,
        prio: c.prio,
        burst_bytes: c.burst_bytes,
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
