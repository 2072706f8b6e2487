//! The validated per-class shaping table and the exact map entries it
//! becomes. Pure: `maps.rs` writes what this produces.

use bpf_maps::{
    classifier::MAX_CLASSES,
    shaper::{
        ShaperClassConfig, OVER_DEMOTE, OVER_DROP, OVER_ECN_MARK, SHAPE_FLAG_BUCKET,
        SHAPE_FLAG_DSCP, SHAPE_FLAG_EDT, SHAPE_FLAG_PRIORITY,
    },
};

use std::{fmt, str::FromStr};

use super::bucket::BucketParams;

const CLASSES: usize = MAX_CLASSES as usize;

/// What happens to a frame over its class's rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverAction {
    Drop,
    /// CE-mark ECN-capable frames; other frames pass to the qdisc unchanged.
    EcnMark,
    /// Send it as this class (its DSCP and priority).
    Demote(u8),
}

/// `drop`, `ecn` or `demote:<class id>`; [`FromStr`] reads the same.
impl fmt::Display for OverAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Drop => f.write_str("drop"),
            Self::EcnMark => f.write_str("ecn"),
            Self::Demote(class) => write!(f, "demote:{class}"),
        }
    }
}

/// A text that is not an [`OverAction`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not an over-limit action: expected \"ecn\", \"drop\" or \"demote:<class id>\"")]
pub struct ParseOverActionError(String);

impl FromStr for OverAction {
    type Err = ParseOverActionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ParseOverActionError(s.to_string());
        match s {
            "drop" => Ok(Self::Drop),
            "ecn" => Ok(Self::EcnMark),
            _ => {
                let class = s.strip_prefix("demote:").ok_or_else(bad)?;
                // `u8::from_str` takes a leading '+', which Display never writes.
                if !class.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                class.parse().map(Self::Demote).map_err(|_| bad())
            }
        }
    }
}

/// How one class is shaped and marked on egress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassShaping {
    /// Token bucket; `None` leaves the class unlimited in the program.
    pub bucket: Option<BucketParams>,
    pub over: OverAction,
    /// DSCP written into every frame of the class.
    pub dscp: Option<u8>,
    /// `skb->priority` (an HTB class id `major << 16 | minor`).
    pub priority: Option<u32>,
}

impl ClassShaping {
    /// No bucket, no marking: frames are only counted.
    pub const fn passthrough() -> Self {
        Self {
            bucket: None,
            over: OverAction::Drop,
            dscp: None,
            priority: None,
        }
    }
}

/// Why a shaping table was refused.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum ShapingError {
    #[error("class id {class} is out of range (0..{MAX_CLASSES})")]
    ClassOutOfRange { class: u8 },
    #[error("class {class}: DSCP {dscp} is out of range (0..=63)")]
    DscpOutOfRange { class: u8, dscp: u8 },
    #[error("class {class}: demotes to class {target}, which has no shaping entry")]
    DemoteToUnknown { class: u8, target: u8 },
    #[error("class {class}: demotes to itself")]
    DemoteToSelf { class: u8 },
    #[error(
        "class {class}: demotes to class {target}, which itself demotes; demotion is one step"
    )]
    DemoteChain { class: u8, target: u8 },
}

impl ShapingError {
    /// The class the error is about.
    pub fn class(&self) -> u8 {
        match self {
            Self::ClassOutOfRange { class }
            | Self::DscpOutOfRange { class, .. }
            | Self::DemoteToUnknown { class, .. }
            | Self::DemoteToSelf { class }
            | Self::DemoteChain { class, .. } => *class,
        }
    }
}

/// Shaping for every class that has an entry; classes without one pass
/// unshaped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShapingTable {
    classes: [Option<ClassShaping>; CLASSES],
}

impl ShapingTable {
    /// Validates a table given as `(class id, shaping)` pairs.
    pub fn new(
        entries: impl IntoIterator<Item = (u8, ClassShaping)>,
    ) -> Result<Self, ShapingError> {
        let mut classes = [None; CLASSES];
        for (class, shaping) in entries {
            if u32::from(class) >= MAX_CLASSES {
                return Err(ShapingError::ClassOutOfRange { class });
            }
            if let Some(dscp) = shaping.dscp.filter(|&d| d > 63) {
                return Err(ShapingError::DscpOutOfRange { class, dscp });
            }
            classes[usize::from(class)] = Some(shaping);
        }
        let table = Self { classes };
        for (class, shaping) in table.iter() {
            if let OverAction::Demote(target) = shaping.over {
                if target == class {
                    return Err(ShapingError::DemoteToSelf { class });
                }
                match table.get(target) {
                    None => return Err(ShapingError::DemoteToUnknown { class, target }),
                    Some(t) if t.bucket.is_some() && matches!(t.over, OverAction::Demote(_)) => {
                        return Err(ShapingError::DemoteChain { class, target })
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(table)
    }

    pub fn get(&self, class: u8) -> Option<&ClassShaping> {
        self.classes
            .get(usize::from(class))
            .and_then(Option::as_ref)
    }

    /// Classes with an entry, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (u8, &ClassShaping)> {
        self.classes
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().map(|c| (i as u8, c)))
    }

    /// A copy with class `class`'s bucket replaced, validated like a new
    /// table (the class must already have an entry).
    pub fn with_bucket(&self, class: u8, bucket: BucketParams) -> Result<Self, ShapingError> {
        let mut entries: Vec<(u8, ClassShaping)> = self.iter().map(|(i, c)| (i, *c)).collect();
        let entry = entries
            .iter_mut()
            .find(|(i, _)| *i == class)
            .ok_or(ShapingError::ClassOutOfRange { class })?;
        entry.1.bucket = Some(bucket);
        Self::new(entries)
    }

    /// The kernel entries of one configuration set, indexed by class.
    pub fn map_entries(&self) -> [ShaperClassConfig; CLASSES] {
        let mut out = [ShaperClassConfig::default(); CLASSES];
        for (class, shaping) in self.iter() {
            out[usize::from(class)] = map_entry(shaping);
        }
        out
    }
}

fn map_entry(s: &ClassShaping) -> ShaperClassConfig {
    let mut e = ShaperClassConfig::default();
    if let Some(b) = s.bucket {
        e.flags |= SHAPE_FLAG_BUCKET;
        if b.is_edt() {
            e.flags |= SHAPE_FLAG_EDT;
        }
        e.rate_bytes_per_sec = b.rate_bits() / 8;
        e.ns_per_byte_q16 = b.ns_per_byte_q16();
        e.burst_ns = b.burst_ns();
        e.burst_bytes = b.burst_bytes();
    }
    (e.over_action, e.demote_class) = match s.over {
        OverAction::Drop => (OVER_DROP, 0),
        OverAction::EcnMark => (OVER_ECN_MARK, 0),
        OverAction::Demote(to) => (OVER_DEMOTE, u32::from(to)),
    };
    if let Some(dscp) = s.dscp {
        e.flags |= SHAPE_FLAG_DSCP;
        e.dscp = u32::from(dscp);
    }
    if let Some(priority) = s.priority {
        e.flags |= SHAPE_FLAG_PRIORITY;
        e.priority = priority;
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(mbit: u64) -> Option<BucketParams> {
        Some(BucketParams::new(mbit * 1_000_000, 64 * 1024, 1514).unwrap())
    }

    #[test]
    fn entries_carry_every_field() {
        let table = ShapingTable::new([
            (
                5,
                ClassShaping {
                    bucket: bucket(100),
                    over: OverAction::Drop,
                    dscp: Some(8),
                    priority: Some(0xca0015),
                },
            ),
            (
                3,
                ClassShaping {
                    bucket: bucket(10),
                    over: OverAction::Demote(5),
                    dscp: None,
                    priority: None,
                },
            ),
        ])
        .unwrap();
        let e = table.map_entries();
        assert_eq!(
            e[5].flags,
            SHAPE_FLAG_BUCKET | SHAPE_FLAG_DSCP | SHAPE_FLAG_PRIORITY
        );
        assert_eq!(e[5].rate_bytes_per_sec, 12_500_000);
        assert_eq!(e[5].ns_per_byte_q16, 80 << 16);
        assert_eq!((e[5].dscp, e[5].priority), (8, 0xca0015));
        assert_eq!((e[3].over_action, e[3].demote_class), (OVER_DEMOTE, 5));
        assert_eq!(e[0], ShaperClassConfig::default());
    }

    #[test]
    fn demotion_is_checked() {
        let demote = |to| ClassShaping {
            bucket: bucket(1),
            over: OverAction::Demote(to),
            dscp: None,
            priority: None,
        };
        assert_eq!(
            ShapingTable::new([(1, demote(1))]),
            Err(ShapingError::DemoteToSelf { class: 1 })
        );
        assert_eq!(
            ShapingTable::new([(1, demote(2))]),
            Err(ShapingError::DemoteToUnknown {
                class: 1,
                target: 2
            })
        );
        assert_eq!(
            ShapingTable::new([
                (1, demote(2)),
                (2, demote(3)),
                (3, ClassShaping::passthrough())
            ]),
            Err(ShapingError::DemoteChain {
                class: 1,
                target: 2
            })
        );
        let bad = ClassShaping {
            dscp: Some(64),
            ..ClassShaping::passthrough()
        };
        assert_eq!(
            ShapingTable::new([(1, bad)]),
            Err(ShapingError::DscpOutOfRange { class: 1, dscp: 64 })
        );
        assert!(ShapingTable::new([(16, ClassShaping::passthrough())]).is_err());
    }

    #[test]
    fn with_bucket_replaces_one_class() {
        let t = ShapingTable::new([(
            2,
            ClassShaping {
                bucket: bucket(10),
                ..ClassShaping::passthrough()
            },
        )])
        .unwrap();
        let t2 = t.with_bucket(2, bucket(50).unwrap()).unwrap();
        assert_eq!(t2.get(2).unwrap().bucket, bucket(50));
        assert!(t.with_bucket(3, bucket(50).unwrap()).is_err());
    }

    #[test]
    fn over_action_text_round_trips() {
        for (action, text) in [
            (OverAction::Drop, "drop"),
            (OverAction::EcnMark, "ecn"),
            (OverAction::Demote(0), "demote:0"),
            (OverAction::Demote(15), "demote:15"),
        ] {
            assert_eq!(action.to_string(), text);
            assert_eq!(text.parse::<OverAction>(), Ok(action));
        }
        for class in 0..=u8::MAX {
            let action = OverAction::Demote(class);
            assert_eq!(action.to_string().parse::<OverAction>(), Ok(action));
        }
        for bad in [
            "",
            "Drop",
            "demote",
            "demote:",
            "demote:+1",
            "demote:256",
            "demote:-1",
            "shout",
        ] {
            let err = bad.parse::<OverAction>().unwrap_err();
            assert!(err.to_string().contains(&format!("'{bad}'")), "{err}");
        }
    }
}
