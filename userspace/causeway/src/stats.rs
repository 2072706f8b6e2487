//! Reading the per-CPU, per-class ingress counters of an attachment and
//! naming the classes with the applied policy.

use aya::maps::{Map, MapData, PerCpuArray};
use bpf_maps::{
    classifier::MAX_CLASSES,
    counters::{
        IngressCounters, COUNTER_SLOTS, MAP_INGRESS_COUNTERS, MAP_REASON_COUNTERS, REASON_NAMES,
        REASON_SLOTS, UNCLASSIFIED_SLOT,
    },
};
use serde::{Deserialize, Serialize};

use crate::{
    datapath::{
        state::{self, PolicyRecord},
        DatapathError, Layout, NetnsScope,
    },
    policy::{ClassTable, Policy},
};

/// Counters summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub packets: u64,
    pub bytes: u64,
    pub drops: u64,
}

impl Totals {
    /// Sums one slot's per-CPU values.
    pub fn sum(per_cpu: &[IngressCounters]) -> Self {
        per_cpu.iter().fold(Self::default(), |acc, c| Self {
            packets: acc.packets.wrapping_add(c.packets),
            bytes: acc.bytes.wrapping_add(c.bytes),
            drops: acc.drops.wrapping_add(c.drops),
        })
    }

    /// `self - earlier`, for rates (counters only grow while attached).
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            packets: self.packets.wrapping_sub(earlier.packets),
            bytes: self.bytes.wrapping_sub(earlier.bytes),
            drops: self.drops.wrapping_sub(earlier.drops),
        }
    }
}

/// One class's counters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassStats {
    pub id: u8,
    pub name: String,
    pub packets: u64,
    pub bytes: u64,
    pub drops: u64,
}

impl ClassStats {
    pub fn totals(&self) -> Totals {
        Totals {
            packets: self.packets,
            bytes: self.bytes,
            drops: self.drops,
        }
    }
}

/// The ingress counters of one attached interface.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterfaceStats {
    pub scope: String,
    pub iface: String,
    /// Generation of the applied policy (from its record), if one was applied.
    pub policy_generation: Option<u64>,
    /// The classes of the applied policy (always `default`), plus any other
    /// class slot that counted something.
    pub classes: Vec<ClassStats>,
    /// Frames that are not IP or too short to parse.
    pub unclassified: Totals,
    /// Frames not fully parsed and admission drops, by reason (`REASON_NAMES`),
    /// only the reasons that counted something.
    #[serde(default)]
    pub reasons: Vec<ReasonStats>,
}

/// The frames counted under one reason (see `bpf_maps::counters::REASON_*`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasonStats {
    pub reason: String,
    pub packets: u64,
    pub bytes: u64,
    /// Of those, dropped.
    pub drops: u64,
}

impl InterfaceStats {
    /// Frames admission dropped (the `adm-*` reasons).
    pub fn admission_drops(&self) -> u64 {
        self.reasons
            .iter()
            .filter(|r| r.reason.starts_with("adm-"))
            .map(|r| r.drops)
            .sum()
    }

    /// The counters of reason `name`, if it counted something.
    pub fn reason(&self, name: &str) -> Option<&ReasonStats> {
        self.reasons.iter().find(|r| r.reason == name)
    }
}

impl InterfaceStats {
    /// Sum over the classes and the unclassified slot.
    pub fn total(&self) -> Totals {
        self.classes
            .iter()
            .map(ClassStats::totals)
            .fold(self.unclassified, |acc, t| Totals {
                packets: acc.packets + t.packets,
                bytes: acc.bytes + t.bytes,
                drops: acc.drops + t.drops,
            })
    }

    pub fn class(&self, name: &str) -> Option<&ClassStats> {
        self.classes.iter().find(|c| c.name == name)
    }
}

/// Reads every slot of the pinned ingress counter map, summed over CPUs.
pub fn read_slots(maps_dir: &std::path::Path) -> Result<Vec<Totals>, DatapathError> {
    let path = maps_dir.join(MAP_INGRESS_COUNTERS);
    let map_error = |source| DatapathError::Map {
        what: format!("reading {}", path.display()),
        source: Box::new(source),
    };
    let data = MapData::from_pin(&path).map_err(map_error)?;
    let array: PerCpuArray<MapData, IngressCounters> =
        PerCpuArray::try_from(Map::PerCpuArray(data)).map_err(map_error)?;
    (0..COUNTER_SLOTS)
        .map(|slot| {
            array
                .get(&slot, 0)
                .map(|values| Totals::sum(&values))
                .map_err(map_error)
        })
        .collect()
}

/// Reads the per-reason counters (none when the pinned object predates them).
pub fn read_reasons(maps_dir: &std::path::Path) -> Result<Vec<ReasonStats>, DatapathError> {
    let path = maps_dir.join(MAP_REASON_COUNTERS);
    if !path.exists() {
        return Ok(Vec::new());
    }
    let map_error = |source| DatapathError::Map {
        what: format!("reading {}", path.display()),
        source: Box::new(source),
    };
    let data = MapData::from_pin(&path).map_err(map_error)?;
    let array: PerCpuArray<MapData, IngressCounters> =
        PerCpuArray::try_from(Map::PerCpuArray(data)).map_err(map_error)?;
    let mut out = Vec::new();
    for (slot, name) in (0..REASON_SLOTS).zip(REASON_NAMES) {
        let t = Totals::sum(&array.get(&slot, 0).map_err(map_error)?);
        if t != Totals::default() {
            out.push(ReasonStats {
                reason: name.to_string(),
                packets: t.packets,
                bytes: t.bytes,
                drops: t.drops,
            });
        }
    }
    Ok(out)
}

/// Names slots with `classes`: every class of the table, plus unnamed slots
/// that counted something.
pub fn label(slots: &[Totals], classes: &ClassTable) -> (Vec<ClassStats>, Totals) {
    let mut out = Vec::new();
    for id in 0..MAX_CLASSES as u8 {
        let t = slots.get(usize::from(id)).copied().unwrap_or_default();
        if classes.by_id(id).is_some() || t != Totals::default() {
            out.push(ClassStats {
                id,
                name: classes.name_of(id),
                packets: t.packets,
                bytes: t.bytes,
                drops: t.drops,
            });
        }
    }
    let unclassified = slots
        .get(UNCLASSIFIED_SLOT as usize)
        .copied()
        .unwrap_or_default();
    (out, unclassified)
}

/// The counters of `iface` in `scope`, named after its applied policy.
pub fn interface_stats(
    layout: &Layout,
    scope: &NetnsScope,
    iface: &str,
) -> Result<InterfaceStats, DatapathError> {
    let paths = layout.iface(scope, iface)?;
    if !paths.pin_dir.exists() {
        return Err(DatapathError::NotAttached {
            iface: iface.to_string(),
            scope: scope.to_string(),
            dir: paths.pin_dir,
        });
    }
    let slots = read_slots(&paths.maps_dir)?;
    let reasons = read_reasons(&paths.maps_dir)?;
    let record: Option<PolicyRecord> = state::read_json(&paths.policy_record())?;
    let classes = record
        .as_ref()
        .and_then(|r| Policy::parse(&r.text, &r.source).ok())
        .map_or_else(ClassTable::default_only, |p| p.classes);
    let (classes, unclassified) = label(&slots, &classes);
    Ok(InterfaceStats {
        scope: scope.dir_name(),
        iface: iface.to_string(),
        policy_generation: record.map(|r| r.generation),
        classes,
        unclassified,
        reasons,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_over_cpus() {
        let per_cpu = [
            IngressCounters {
                packets: 1,
                bytes: 100,
                drops: 0,
            },
            IngressCounters {
                packets: 2,
                bytes: 60,
                drops: 1,
            },
        ];
        assert_eq!(
            Totals::sum(&per_cpu),
            Totals {
                packets: 3,
                bytes: 160,
                drops: 1
            }
        );
        assert_eq!(Totals::sum(&[]), Totals::default());
        let later = Totals {
            packets: 5,
            bytes: 200,
            drops: 1,
        };
        assert_eq!(
            later.since(&Totals::sum(&per_cpu)),
            Totals {
                packets: 2,
                bytes: 40,
                drops: 0
            }
        );
    }

    #[test]
    fn labels_classes_and_keeps_unnamed_busy_slots() {
        let policy = Policy::parse("[[class]]\nid = 2\nname = \"bulk\"\n", "t").unwrap();
        let mut slots = vec![Totals::default(); COUNTER_SLOTS as usize];
        slots[2] = Totals {
            packets: 4,
            bytes: 400,
            drops: 0,
        };
        slots[9] = Totals {
            packets: 1,
            bytes: 60,
            drops: 1,
        };
        slots[UNCLASSIFIED_SLOT as usize] = Totals {
            packets: 7,
            bytes: 420,
            drops: 0,
        };
        let (classes, unclassified) = label(&slots, &policy.classes);
        let names: Vec<&str> = classes.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["default", "bulk", "class-9"]);
        assert_eq!(classes[1].packets, 4);
        assert_eq!(unclassified.packets, 7);
        let stats = InterfaceStats {
            scope: "root".into(),
            iface: "eth0".into(),
            policy_generation: None,
            classes,
            unclassified,
            reasons: Vec::new(),
        };
        assert_eq!(
            stats.total(),
            Totals {
                packets: 12,
                bytes: 880,
                drops: 1
            }
        );
        assert_eq!(stats.class("bulk").unwrap().bytes, 400);
    }
}
