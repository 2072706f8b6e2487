//! The α-β cost model per link class and the algorithm choice it drives: the
//! one place that decides which algorithm runs ([`select`]).

use causeway_core::units;

use crate::config::Options;
use crate::error::{ConfigError, Rank};
use crate::schedule::sim::{simulate, LinkCost, Network};
use crate::schedule::{build_all, Algorithm, OpKind};
use crate::topology::{LinkClass, Topology};

/// α (latency, s) and β (s/byte) for each link class.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    pub intra_host: LinkCost,
    pub intra_domain: LinkCost,
    pub inter_domain: LinkCost,
}

impl Default for CostModel {
    /// Conservative guesses used until (or instead of) a probe: shared memory,
    /// a 10 Gbit/s LAN, a 1 Gbit/s WAN with 20 ms one-way delay.
    fn default() -> Self {
        CostModel {
            intra_host: LinkCost {
                alpha: 5e-6,
                beta: 1.0 / 5e9,
            },
            intra_domain: LinkCost {
                alpha: 50e-6,
                beta: 8.0 / 10e9,
            },
            inter_domain: LinkCost {
                alpha: 20e-3,
                beta: 8.0 / 1e9,
            },
        }
    }
}

impl CostModel {
    pub fn get(&self, class: LinkClass) -> LinkCost {
        match class {
            LinkClass::IntraHost => self.intra_host,
            LinkClass::IntraDomain => self.intra_domain,
            LinkClass::InterDomain => self.inter_domain,
        }
    }

    pub fn set(&mut self, class: LinkClass, c: LinkCost) {
        match class {
            LinkClass::IntraHost => self.intra_host = c,
            LinkClass::IntraDomain => self.intra_domain = c,
            LinkClass::InterDomain => self.inter_domain = c,
        }
    }

    /// Applies overrides such as `wan=20ms:1gbit,domain=50us:10gbit,host=5us:40gbit`:
    /// class, one-way latency and bandwidth, both with units (`causeway_core::units`;
    /// the form of `CAUSEWAY_COST`).
    pub fn apply_overrides(&mut self, spec: &str) -> Result<(), ConfigError> {
        let bad = |reason: &str| ConfigError::InvalidVar {
            name: "CAUSEWAY_COST".into(),
            value: spec.into(),
            reason: reason.into(),
        };
        let unit_err = |e: units::UnitError| bad(&e.to_string());
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (class, rest) = item
                .split_once('=')
                .ok_or_else(|| bad("expected CLASS=LATENCY:BANDWIDTH, e.g. wan=20ms:200mbit"))?;
            let class = match class {
                "host" => LinkClass::IntraHost,
                "domain" => LinkClass::IntraDomain,
                "wan" => LinkClass::InterDomain,
                _ => return Err(bad("class must be host, domain or wan")),
            };
            let (a, b) = rest
                .split_once(':')
                .ok_or_else(|| bad("expected LATENCY:BANDWIDTH, e.g. wan=20ms:200mbit"))?;
            let alpha = units::parse_duration(a).map_err(unit_err)?;
            // The old form was a bare number of Gbit/s: refuse bare numbers
            // here rather than read `1` as 1 bit/s.
            if b.trim().bytes().all(|c| c.is_ascii_digit() || c == b'.') {
                return Err(bad("the bandwidth needs a unit, e.g. 200mbit or 10gbit"));
            }
            let bps = units::parse_rate_bps(b).map_err(unit_err)?;
            self.set(
                class,
                LinkCost {
                    alpha: alpha.as_secs_f64(),
                    beta: 8.0 / bps as f64,
                },
            );
        }
        Ok(())
    }

    /// Encodes as 6 f64 (for sharing the probe result).
    pub fn to_f64s(&self) -> [f64; 6] {
        let c = [self.intra_host, self.intra_domain, self.inter_domain];
        [
            c[0].alpha, c[0].beta, c[1].alpha, c[1].beta, c[2].alpha, c[2].beta,
        ]
    }

    pub fn from_f64s(v: [f64; 6]) -> Self {
        let lc = |a, b| LinkCost { alpha: a, beta: b };
        CostModel {
            intra_host: lc(v[0], v[1]),
            intra_domain: lc(v[2], v[3]),
            inter_domain: lc(v[4], v[5]),
        }
    }
}

/// A topology costed with a model. Every host of a domain shares that domain's
/// WAN pipe to each other domain, so parallel WAN flows divide its bandwidth;
/// inside a domain a rank's sends share its egress (NIC, or memory copies).
pub struct CostedNet<'a> {
    pub topo: &'a Topology,
    pub model: &'a CostModel,
}

impl Network for CostedNet<'_> {
    fn cost(&self, from: Rank, to: Rank) -> LinkCost {
        self.model.get(self.topo.class(from, to))
    }
    fn resource(&self, from: Rank, to: Rank) -> (usize, usize) {
        match self.topo.class(from, to) {
            LinkClass::InterDomain => (
                usize::MAX - self.topo.domain_of(from) as usize,
                self.topo.domain_of(to) as usize,
            ),
            _ => (from, usize::MAX),
        }
    }
}

/// What a prediction is made for: the topology, its link costs, and the engine's
/// pipelining (chunk size in elements, lanes in flight).
#[derive(Debug, Clone, Copy)]
pub struct Setting<'a> {
    pub topo: &'a Topology,
    pub model: &'a CostModel,
    pub chunk: usize,
    pub window: usize,
}

impl<'a> Setting<'a> {
    /// The engine's pipelining for elements of `elem_bytes`: chunks of
    /// `opts.chunk_bytes` (at least one element), `opts.window` lanes in flight.
    pub fn new(
        topo: &'a Topology,
        model: &'a CostModel,
        opts: &Options,
        elem_bytes: usize,
    ) -> Self {
        Setting {
            topo,
            model,
            chunk: (opts.chunk_bytes / elem_bytes.max(1)).max(1),
            window: opts.window,
        }
    }
}

/// Predicted time of `algo` for `kind` on `count` elements, or `None` if it does not apply.
pub fn predict(
    kind: OpKind,
    count: usize,
    elem_bytes: usize,
    algo: Algorithm,
    s: &Setting<'_>,
) -> Option<f64> {
    let plans = build_all(kind, count, s.topo, algo, s.chunk);
    let net = CostedNet {
        topo: s.topo,
        model: s.model,
    };
    simulate(&plans?, elem_bytes, &net, s.window, None)
        .ok()
        .map(|o| o.time)
}

/// The fastest applicable algorithm by simulation (ties go to the earlier candidate).
pub fn choose(kind: OpKind, count: usize, elem_bytes: usize, s: &Setting<'_>) -> Algorithm {
    let cands = Algorithm::candidates(kind, s.topo);
    let mut best = (cands[0], f64::INFINITY);
    for a in cands {
        if let Some(t) = predict(kind, count, elem_bytes, a, s) {
            if t < best.1 {
                best = (a, t);
            }
        }
    }
    best.0
}

/// The algorithm `kind` runs with: `forced` when it can compute `kind` on this
/// topology (`CAUSEWAY_ALGO`), else the fastest by [`choose`].
pub fn select(
    kind: OpKind,
    count: usize,
    elem_bytes: usize,
    forced: Option<Algorithm>,
    s: &Setting<'_>,
) -> Algorithm {
    match forced {
        Some(a) if Algorithm::candidates(kind, s.topo).contains(&a) => a,
        _ => choose(kind, count, elem_bytes, s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_parse_and_reject_nonsense() {
        let mut m = CostModel::default();
        m.apply_overrides("wan=40ms:100mbit, host=1us:100gbit")
            .expect("valid");
        assert_eq!(m.inter_domain.alpha, 0.04);
        assert!((m.inter_domain.beta - 8e-8).abs() < 1e-15);
        assert_eq!(m.intra_host.alpha, 1e-6);
        for bad in [
            "wan",
            "lan=1ms:1gbit",
            "wan=x:1gbit",
            "wan=1ms:0gbit",
            "wan=-1ms:1gbit",
            // the old form (µs and Gbit/s without units) is refused, not misread
            "wan=40000:0.1",
            "wan=40ms:1",
            "wan=1ms:100mbps",
        ] {
            assert!(m.apply_overrides(bad).is_err(), "{bad}");
        }
        let e = m.apply_overrides("wan=40000:0.1").unwrap_err().to_string();
        assert!(
            e.starts_with("CAUSEWAY_COST=\"wan=40000:0.1\" is invalid: '40000' is not a duration"),
            "{e}"
        );
        assert_eq!(CostModel::from_f64s(m.to_f64s()), m);
    }

    #[test]
    fn choice_follows_size_and_topology() {
        let m = CostModel::default();
        let flat = Topology::flat(8);
        // Small messages: latency dominates, the tree's log2(n) steps win.
        assert_eq!(
            choose(
                OpKind::Allreduce,
                16,
                4,
                &Setting {
                    topo: &flat,
                    model: &m,
                    chunk: 1 << 16,
                    window: 4
                }
            ),
            Algorithm::Tree
        );
        // Large messages: bandwidth dominates, the ring wins.
        assert_eq!(
            choose(
                OpKind::Allreduce,
                16 << 20,
                4,
                &Setting {
                    topo: &flat,
                    model: &m,
                    chunk: 1 << 16,
                    window: 4
                }
            ),
            Algorithm::Ring
        );
        // Two domains: hierarchical for large messages.
        let two = Topology::grid(2, 4);
        assert_eq!(
            choose(
                OpKind::Allreduce,
                16 << 20,
                4,
                &Setting {
                    topo: &two,
                    model: &m,
                    chunk: 1 << 16,
                    window: 4
                }
            ),
            Algorithm::Hierarchical
        );
        // Barriers: one WAN crossing (domain first, then counterparts) across
        // domains; plain dissemination where there is no WAN.
        let barrier = |topo: &Topology| {
            choose(
                OpKind::Barrier,
                2,
                1,
                &Setting {
                    topo,
                    model: &m,
                    chunk: 1,
                    window: 1,
                },
            )
        };
        assert_eq!(barrier(&two), Algorithm::Hierarchical);
        assert_eq!(barrier(&flat), Algorithm::Dissemination);
    }
}
