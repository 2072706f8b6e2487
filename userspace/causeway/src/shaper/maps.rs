//! Reads and writes the shaper's maps: a whole configuration at once
//! (written to the inactive set, then one flip), the egress counters.

use std::path::Path;

use aya::{
    maps::{Array, Map, MapData, MapError, PerCpuArray},
    Ebpf,
};
use bpf_maps::{
    classifier::MAX_CLASSES,
    counters::COUNTER_SLOTS,
    shaper::{
        EgressCounters, ShaperClassConfig, ShaperControl, MAP_EGRESS_BUCKETS, MAP_EGRESS_CLASSES,
        MAP_EGRESS_CONTROL, MAP_EGRESS_COUNTERS, SHAPER_CLASS_SLOTS,
    },
};

use super::config::ShapingTable;
use crate::map_handles::{self, OpenMapError};

/// A map operation that failed, and on which map.
#[derive(Debug, thiserror::Error)]
pub enum ShaperMapError {
    #[error("the eBPF object has no map {name}")]
    Missing { name: &'static str },
    #[error("map {name}: {source}")]
    Map {
        name: &'static str,
        #[source]
        source: MapError,
    },
}

impl From<OpenMapError> for ShaperMapError {
    fn from(e: OpenMapError) -> Self {
        match e {
            OpenMapError::Missing { name } => Self::Missing { name },
            // The shaper reports a failed pin like any other map error.
            OpenMapError::Pin { name, source, .. } | OpenMapError::Map { name, source } => {
                Self::Map { name, source }
            }
        }
    }
}

fn err(name: &'static str) -> impl FnOnce(MapError) -> ShaperMapError {
    move |source| ShaperMapError::Map { name, source }
}

/// How long a configuration set stays untouched after it was replaced.
const GRACE_NS: u64 = 2_000_000;

/// `CLOCK_MONOTONIC`, the clock of `bpf_ktime_get_ns`, in ns.
pub fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// The shaper configuration a failed change returns to
/// ([`ShaperMaps::snapshot`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShaperSnapshot {
    pub control: ShaperControl,
    /// Every slot of `MAP_EGRESS_CLASSES` (both sets).
    pub classes: Vec<ShaperClassConfig>,
}

/// Handles on the four shaper maps.
pub struct ShaperMaps {
    control: Array<MapData, ShaperControl>,
    classes: Array<MapData, ShaperClassConfig>,
    buckets: Array<MapData, bpf_maps::shaper::BucketState>,
    counters: PerCpuArray<MapData, EgressCounters>,
}

impl ShaperMaps {
    /// Opens second handles on the maps of a loaded object (the object
    /// keeps its own, so that it can still pin them).
    pub fn from_ebpf(ebpf: &Ebpf) -> Result<Self, ShaperMapError> {
        let reopen = |name| map_handles::reopen(ebpf, name);
        Self::from_maps(
            reopen(MAP_EGRESS_CONTROL)?,
            reopen(MAP_EGRESS_CLASSES)?,
            reopen(MAP_EGRESS_BUCKETS)?,
            reopen(MAP_EGRESS_COUNTERS)?,
        )
    }

    /// Opens the maps pinned in `dir` under their own names.
    pub fn from_pins(dir: &Path) -> Result<Self, ShaperMapError> {
        let open = |name| map_handles::open_pinned(dir, name);
        Self::from_maps(
            open(MAP_EGRESS_CONTROL)?,
            open(MAP_EGRESS_CLASSES)?,
            open(MAP_EGRESS_BUCKETS)?,
            open(MAP_EGRESS_COUNTERS)?,
        )
    }

    fn from_maps(
        control: Map,
        classes: Map,
        buckets: Map,
        counters: Map,
    ) -> Result<Self, ShaperMapError> {
        Ok(Self {
            control: Array::try_from(control).map_err(err(MAP_EGRESS_CONTROL))?,
            classes: Array::try_from(classes).map_err(err(MAP_EGRESS_CLASSES))?,
            buckets: Array::try_from(buckets).map_err(err(MAP_EGRESS_BUCKETS))?,
            counters: PerCpuArray::try_from(counters).map_err(err(MAP_EGRESS_COUNTERS))?,
        })
    }

    fn control(&self) -> Result<ShaperControl, ShaperMapError> {
        self.control.get(&0, 0).map_err(err(MAP_EGRESS_CONTROL))
    }

    /// Writes `table` into the inactive set, then makes it live with one
    /// write of the control entry. Frames see the old or the new table,
    /// never a mix; buckets keep their state. Returns the new generation.
    /// On error the live table is unchanged.
    pub fn apply(&mut self, table: &ShapingTable) -> Result<u64, ShaperMapError> {
        let control = self.control()?;
        // A frame that read the old `active_set` just before the last flip
        // may still be reading the set about to be rewritten: wait until it
        // must be done (TC programs run to completion in microseconds).
        let since_flip = monotonic_ns().saturating_sub(control.flipped_at_ns);
        if since_flip < GRACE_NS {
            std::thread::sleep(std::time::Duration::from_nanos(GRACE_NS - since_flip));
        }
        let next = if control.enabled == 0 {
            0
        } else {
            (control.active_set & 1) ^ 1
        };
        for (class, entry) in table.map_entries().iter().enumerate() {
            self.classes
                .set(next * MAX_CLASSES + class as u32, entry, 0)
                .map_err(err(MAP_EGRESS_CLASSES))?;
        }
        let generation = control.generation + 1;
        let live = ShaperControl {
            active_set: next,
            enabled: 1,
            generation,
            flipped_at_ns: monotonic_ns(),
        };
        self.control
            .set(0, live, 0)
            .map_err(err(MAP_EGRESS_CONTROL))?;
        Ok(generation)
    }

    /// Reads the control entry and both configuration sets back.
    pub fn snapshot(&self) -> Result<ShaperSnapshot, ShaperMapError> {
        let classes = (0..SHAPER_CLASS_SLOTS)
            .map(|i| self.classes.get(&i, 0).map_err(err(MAP_EGRESS_CLASSES)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ShaperSnapshot {
            control: self.control()?,
            classes,
        })
    }

    /// Puts the maps back to `snapshot`: the control entry first (a frame
    /// sees the old table again at once), then, after the grace period,
    /// every configuration slot that differs. Bucket state is not touched
    /// (no change touches it).
    pub fn restore(&mut self, snapshot: &ShaperSnapshot) -> Result<(), ShaperMapError> {
        if self.control()? != snapshot.control {
            self.control
                .set(0, snapshot.control, 0)
                .map_err(err(MAP_EGRESS_CONTROL))?;
            std::thread::sleep(std::time::Duration::from_nanos(GRACE_NS));
        }
        for (i, entry) in (0..SHAPER_CLASS_SLOTS).zip(&snapshot.classes) {
            if self.classes.get(&i, 0).map_err(err(MAP_EGRESS_CLASSES))? != *entry {
                self.classes
                    .set(i, entry, 0)
                    .map_err(err(MAP_EGRESS_CLASSES))?;
            }
        }
        Ok(())
    }

    /// The live entries by class, or `None` while no table was applied.
    pub fn live_entries(&self) -> Result<Option<Vec<ShaperClassConfig>>, ShaperMapError> {
        let control = self.control()?;
        if control.enabled == 0 {
            return Ok(None);
        }
        let base = (control.active_set & 1) * MAX_CLASSES;
        (0..MAX_CLASSES)
            .map(|c| {
                self.classes
                    .get(&(base + c), 0)
                    .map_err(err(MAP_EGRESS_CLASSES))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// The bucket state (`tat`, ns) of `class`.
    pub fn bucket_tat(&self, class: u32) -> Result<u64, ShaperMapError> {
        self.buckets
            .get(&class, 0)
            .map(|b| b.tat_ns)
            .map_err(err(MAP_EGRESS_BUCKETS))
    }

    /// Sets the bucket state of `class` (tests and benchmarks).
    pub fn set_bucket_tat(&mut self, class: u32, tat_ns: u64) -> Result<(), ShaperMapError> {
        let state = bpf_maps::shaper::BucketState { tat_ns };
        self.buckets
            .set(class, state, 0)
            .map_err(err(MAP_EGRESS_BUCKETS))
    }

    /// Counters of every slot (classes, then `UNCLASSIFIED_SLOT`), summed
    /// over CPUs.
    pub fn counters(&self) -> Result<Vec<EgressCounters>, ShaperMapError> {
        (0..COUNTER_SLOTS)
            .map(|slot| {
                let per_cpu = self
                    .counters
                    .get(&slot, 0)
                    .map_err(err(MAP_EGRESS_COUNTERS))?;
                Ok(per_cpu
                    .iter()
                    .fold(EgressCounters::default(), |mut sum, c| {
                        sum.sent_packets += c.sent_packets;
                        sum.sent_bytes += c.sent_bytes;
                        sum.shaped += c.shaped;
                        sum.dropped += c.dropped;
                        sum.marked += c.marked;
                        sum.demoted += c.demoted;
                        sum
                    }))
            })
            .collect()
    }
}
