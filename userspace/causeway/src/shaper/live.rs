//! Live changes to an attached interface's shaping: install a policy's
//! shaping (HTB hierarchy + program table), change one class's rate, and
//! remove it all. Each change is checked completely before anything is
//! touched, and undone if a later step fails.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{
    bucket::{BucketError, BucketParams, MAX_RATE_BITS, MIN_RATE_BITS},
    htb::{Htb, HtbError},
    maps::{ShaperMapError, ShaperMaps},
    PlanError, ShapingTable,
};
use crate::policy::shaping::{htb_leaf, PacingMode, ShapingPolicy};

/// Rate changes made with `set-rate` since the policy was applied, by
/// class id; kept beside the policy record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateOverrides {
    pub classes: BTreeMap<u8, RateOverride>,
}

/// One class's live rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateOverride {
    pub ceil_bits: u64,
    pub burst_bytes: u64,
}

/// Why a live change was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("class '{name}' has no shaping in the applied policy; give it a shaping table and apply the policy")]
    NotShaped { name: String },
    #[error("rate {rate_bits} bit/s is out of range ({MIN_RATE_BITS}..={MAX_RATE_BITS} bit/s)")]
    RateOutOfRange { rate_bits: u64 },
    #[error(
        "rate {rate_bits} bit/s is above the link rate {link_bits} bit/s of the applied policy"
    )]
    AboveLink { rate_bits: u64, link_bits: u64 },
    #[error("{0}")]
    Bucket(#[from] BucketError),
    #[error("{0}")]
    Plan(#[from] PlanError),
    #[error("changing the HTB class: {0}")]
    Htb(Box<HtbError>),
    #[error("writing the shaper maps: {0}")]
    Maps(Box<ShaperMapError>),
    #[error(
        "writing the shaper maps failed ({maps}); restoring the HTB class also failed ({htb})"
    )]
    Inconsistent {
        maps: Box<ShaperMapError>,
        htb: Box<HtbError>,
    },
}

impl From<HtbError> for LiveError {
    fn from(e: HtbError) -> Self {
        Self::Htb(Box::new(e))
    }
}

impl From<ShaperMapError> for LiveError {
    fn from(e: ShaperMapError) -> Self {
        Self::Maps(Box::new(e))
    }
}

/// The policy's shaping with `overrides` applied (overrides for classes
/// the policy no longer shapes are ignored).
pub fn effective(policy: &ShapingPolicy, overrides: &RateOverrides) -> ShapingPolicy {
    let mut out = policy.clone();
    for c in &mut out.classes {
        if let Some(o) = overrides.classes.get(&c.class) {
            c.ceil_bits = o.ceil_bits;
            c.rate_bits = c.rate_bits.min(o.ceil_bits);
            c.burst_bytes = o.burst_bytes;
            if let PacingMode::Edt { .. } = c.pacing {
                // A paced class has one rate.
                c.rate_bits = o.ceil_bits;
            }
        }
    }
    out
}

/// Checks a new rate (the class's ceiling: its token bucket and HTB ceil;
/// its guaranteed rate is lowered to it when higher) and an optional new
/// burst; returns the new override. Pure.
pub fn check_set_rate(
    policy: &ShapingPolicy,
    class: u8,
    name: &str,
    rate_bits: u64,
    burst_bytes: Option<u64>,
) -> Result<RateOverride, LiveError> {
    let current = policy.class(class).ok_or_else(|| LiveError::NotShaped {
        name: name.to_string(),
    })?;
    if !(MIN_RATE_BITS..=MAX_RATE_BITS).contains(&rate_bits) {
        return Err(LiveError::RateOutOfRange { rate_bits });
    }
    if rate_bits > policy.link_bits {
        return Err(LiveError::AboveLink {
            rate_bits,
            link_bits: policy.link_bits,
        });
    }
    let burst_bytes = burst_bytes.unwrap_or(current.burst_bytes);
    BucketParams::new(rate_bits, burst_bytes, policy.frame_bytes())?;
    Ok(RateOverride {
        ceil_bits: rate_bits,
        burst_bytes,
    })
}

/// Installs `shaping` on an attached interface: HTB first (refused on a
/// foreign root qdisc, before any map is written), then the program's
/// table in one flip. With `None`, removes Causeway's HTB and clears the
/// table.
pub fn install(
    htb: &Htb,
    maps: &mut ShaperMaps,
    shaping: Option<&ShapingPolicy>,
) -> Result<(), LiveError> {
    match shaping {
        Some(s) => {
            let table = s.shaping_table()?;
            htb.install(&s.htb_plan())?;
            if let Err(e) = maps.apply(&table) {
                let _ = htb.remove();
                return Err(e.into());
            }
        }
        None => {
            maps.apply(&ShapingTable::default())?;
            htb.remove()?;
        }
    }
    Ok(())
}

/// Moves the interface from `old` to `new`, which differ in `class` only:
/// the HTB leaf is changed in place (queued frames stay), then the table
/// is flipped; a failed flip restores the leaf.
pub fn change_class(
    htb: &Htb,
    maps: &mut ShaperMaps,
    old: &ShapingPolicy,
    new: &ShapingPolicy,
    class: u8,
) -> Result<(), LiveError> {
    let (Some(before), Some(after)) = (old.class(class), new.class(class)) else {
        return Err(LiveError::NotShaped {
            name: format!("class-{class}"),
        });
    };
    let table = new.shaping_table()?;
    if new.uses_edt() {
        // fq has no leaves: the class's pacing rate is all there is.
        return Ok(maps.apply(&table).map(|_| ())?);
    }
    htb.change_leaf(&htb_leaf(after))?;
    if let Err(maps_err) = maps.apply(&table) {
        return Err(match htb.change_leaf(&htb_leaf(before)) {
            Ok(()) => maps_err.into(),
            Err(htb) => LiveError::Inconsistent {
                maps: Box::new(maps_err),
                htb: Box::new(htb),
            },
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;

    fn policy() -> ShapingPolicy {
        let text = r#"
[shaping]
link_rate = "1gbit"
[[class]]
id = 5
name = "bulk"
shaping = { rate = "500mbit", ceil = "800mbit" }
[[class]]
id = 2
name = "plain"
"#;
        Policy::parse(text, "t")
            .expect("valid")
            .shaping
            .expect("shaping")
    }

    #[test]
    fn set_rate_is_checked() {
        let p = policy();
        let o = check_set_rate(&p, 5, "bulk", 100_000_000, None).expect("valid");
        assert_eq!(
            o,
            RateOverride {
                ceil_bits: 100_000_000,
                burst_bytes: 1_000_000
            }
        );
        assert!(matches!(
            check_set_rate(&p, 2, "plain", 1_000_000, None),
            Err(LiveError::NotShaped { .. })
        ));
        assert!(matches!(
            check_set_rate(&p, 5, "bulk", 0, None),
            Err(LiveError::RateOutOfRange { .. })
        ));
        assert!(matches!(
            check_set_rate(&p, 5, "bulk", 2_000_000_000, None),
            Err(LiveError::AboveLink { .. })
        ));
        assert!(matches!(
            check_set_rate(&p, 5, "bulk", 1_000_000, Some(1000)),
            Err(LiveError::Bucket(BucketError::BurstBelowFrame { .. }))
        ));
    }

    #[test]
    fn overrides_lower_the_guarantee_with_the_ceiling() {
        let p = policy();
        let mut o = RateOverrides::default();
        o.classes.insert(
            5,
            RateOverride {
                ceil_bits: 100_000_000,
                burst_bytes: 32_768,
            },
        );
        o.classes.insert(
            9,
            RateOverride {
                ceil_bits: 1,
                burst_bytes: 1,
            },
        );
        let e = effective(&p, &o);
        let bulk = e.class(5).expect("bulk");
        assert_eq!(
            (bulk.rate_bits, bulk.ceil_bits, bulk.burst_bytes),
            (100_000_000, 100_000_000, 32_768)
        );
        assert_eq!(e.classes.len(), p.classes.len());
        assert!(e.htb_plan().validate().is_ok());
    }
}
