//! What every rank publishes at rendezvous ([`Entry`]) and the checks that all
//! ranks agree: on the domain map ([`domains`]) and on the options that change
//! the wire ([`wire_options`]). Every rank reads every entry and runs the same
//! pure checks, so a disagreement fails the rendezvous on every rank with the
//! same error.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::config::{DomainClaim, Identity, Options};
use crate::error::{CollectiveError, Rank, Result, StoreError};

/// One rank's registration: where it listens, its labels and claims.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    pub addr: SocketAddr,
    pub host: String,
    pub claim: DomainClaim,
    /// [`Options::wire_settings`], as (key, value).
    pub wire: Vec<(String, String)>,
    /// Whether this rank can take RDMA pairs: `ok`, or why not
    /// (`crate::mesh_rdma::status`); `None` when the entry has no such line.
    pub rdma: Option<String>,
}

const NAMED: &str = "domain=";
const FILE: &str = "topology-file=";
const MAP: &str = "topology-map=";
const WIRE: &str = "wire:";
const RDMA: &str = "rdma=";

impl Entry {
    pub fn new(addr: SocketAddr, id: &Identity, opts: &Options, rdma: Option<String>) -> Self {
        Entry {
            addr,
            host: id.host_id.clone(),
            claim: id.domain_claim.clone(),
            wire: opts
                .wire_settings()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            rdma: rdma.map(|s| s.replace('\n', " ")),
        }
    }

    /// Lines: the address, the host id, then `key=value` lines (the domain
    /// claim, the topology map, one `wire:KEY=VALUE` per wire setting).
    pub fn encode(&self) -> String {
        let mut out = format!("{}\n{}\n", self.addr, self.host);
        if let Some(d) = &self.claim.named {
            out += &format!("{NAMED}{d}\n");
        }
        if let Some((path, map)) = &self.claim.file {
            out += &format!("{FILE}{path}\n{MAP}{}\n", map.join(" "));
        }
        for (k, v) in &self.wire {
            out += &format!("{WIRE}{k}={v}\n");
        }
        if let Some(r) = &self.rdma {
            out += &format!("{RDMA}{r}\n");
        }
        out
    }

    pub fn parse(q: Rank, v: &[u8]) -> Result<Self> {
        let bad = || StoreError::Protocol(format!("bad entry for rank {q}"));
        let s = std::str::from_utf8(v).map_err(|_| bad())?;
        let mut it = s.lines();
        let addr = it.next().and_then(|a| a.parse().ok()).ok_or_else(bad)?;
        let host = it.next().ok_or_else(bad)?.to_string();
        let (mut claim, mut path, mut wire) = (DomainClaim::default(), None, Vec::new());
        let mut rdma = None;
        for line in it {
            if let Some(d) = line.strip_prefix(NAMED) {
                claim.named = Some(d.to_string());
            } else if let Some(p) = line.strip_prefix(FILE) {
                path = Some(p.to_string());
            } else if let Some(m) = line.strip_prefix(MAP) {
                let map = m.split(' ').map(str::to_string).collect();
                claim.file = Some((path.take().ok_or_else(bad)?, map));
            } else if let Some((k, v)) = line.strip_prefix(WIRE).and_then(|w| w.split_once('=')) {
                wire.push((k.to_string(), v.to_string()));
            } else if let Some(r) = line.strip_prefix(RDMA) {
                rdma = Some(r.to_string());
            } else {
                return Err(bad().into());
            }
        }
        Ok(Entry {
            addr,
            host,
            claim,
            wire,
            rdma,
        })
    }
}

impl Options {
    /// The options that change what goes on the wire (connections per peer,
    /// framing, plans, the algorithm choice), as (environment variable, value).
    /// Every rank publishes them at rendezvous; a difference is
    /// [`CollectiveError::ConfigMismatch`](crate::CollectiveError::ConfigMismatch).
    pub fn wire_settings(&self) -> Vec<(&'static str, String)> {
        let algo = self.algorithm.map_or("auto".into(), |a| format!("{a:?}"));
        vec![
            ("CAUSEWAY_STREAMS_WAN", self.streams_wan.to_string()),
            ("CAUSEWAY_STREAMS_LAN", self.streams_lan.to_string()),
            ("CAUSEWAY_SHM", u8::from(self.shm).to_string()),
            ("CAUSEWAY_CHUNK_BYTES", self.chunk_bytes.to_string()),
            ("CAUSEWAY_WINDOW", self.window.to_string()),
            (
                "CAUSEWAY_LATENCY_STREAM",
                u8::from(self.wan_latency_stream).to_string(),
            ),
            ("CAUSEWAY_LATENCY_BYTES", self.latency_bytes.to_string()),
            (
                "CAUSEWAY_WAN_PATHS",
                if self.wan_paths.is_empty() {
                    "off"
                } else {
                    "on"
                }
                .into(),
            ),
            ("CAUSEWAY_ALGO", algo),
            ("CAUSEWAY_PROBE", u8::from(self.probe).to_string()),
            ("CAUSEWAY_PROBE_BYTES", self.probe_bytes.to_string()),
            (
                "CAUSEWAY_COST",
                self.cost_overrides.clone().unwrap_or_else(|| "-".into()),
            ),
            // The model itself (a builder may set it without CAUSEWAY_COST).
            ("cost model", format!("{:?}", self.cost)),
        ]
    }
}

/// The domain of every rank, when all claims agree: either no rank names a
/// domain (one domain, `default`) or every rank does, through its own
/// `CAUSEWAY_DOMAIN` or a topology file, and every claim about a rank (its
/// own, and each file's) gives it the same domain.
pub(crate) fn domains(claims: &[&DomainClaim]) -> Result<Vec<String>> {
    let (set, unset): (Vec<Rank>, Vec<Rank>) =
        (0..claims.len()).partition(|&q| claims[q].named.is_some() || claims[q].file.is_some());
    if set.is_empty() {
        return Ok(vec!["default".into(); claims.len()]);
    }
    if !unset.is_empty() {
        return Err(CollectiveError::DomainUnset { unset, set });
    }
    let mut out = Vec::with_capacity(claims.len());
    for q in 0..claims.len() {
        // Domain → who says so, in a stable order.
        let mut said: BTreeMap<&str, (bool, Vec<Rank>)> = BTreeMap::new();
        if let Some(d) = &claims[q].named {
            said.entry(d).or_default().0 = true;
        }
        for (p, c) in claims.iter().enumerate() {
            if let Some((_, map)) = &c.file {
                let d = map.get(q).map_or("(not listed)", String::as_str);
                said.entry(d).or_default().1.push(p);
            }
        }
        if said.len() > 1 {
            let claims = said
                .into_iter()
                .flat_map(|(d, (own, files))| {
                    let own = own.then(|| (d.to_string(), "its CAUSEWAY_DOMAIN".to_string()));
                    let file = (!files.is_empty()).then(|| {
                        (
                            d.to_string(),
                            format!("the CAUSEWAY_TOPOLOGY file of ranks {files:?}"),
                        )
                    });
                    own.into_iter().chain(file)
                })
                .collect();
            return Err(CollectiveError::DomainConflict { rank: q, claims });
        }
        let only = said.keys().next().copied().unwrap_or("default");
        out.push(only.to_string());
    }
    Ok(out)
}

/// Every wire setting must have one value on every rank; the first that does
/// not is reported with each value and the ranks that set it.
pub(crate) fn wire_options(wire: &[&[(String, String)]]) -> Result<()> {
    let mut keys: Vec<&str> = Vec::new();
    for w in wire {
        for (k, _) in w.iter() {
            if !keys.contains(&k.as_str()) {
                keys.push(k);
            }
        }
    }
    for key in keys {
        let mut values: Vec<(String, Vec<Rank>)> = Vec::new();
        for (q, w) in wire.iter().enumerate() {
            let v = w
                .iter()
                .find(|(k, _)| k == key)
                .map_or("(not published)".to_string(), |(_, v)| v.clone());
            match values.iter_mut().find(|(x, _)| *x == v) {
                Some((_, ranks)) => ranks.push(q),
                None => values.push((v, vec![q])),
            }
        }
        if values.len() > 1 {
            return Err(CollectiveError::ConfigMismatch {
                key: key.to_string(),
                values,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Algorithm;
    use std::time::Duration;

    fn named(d: &str) -> DomainClaim {
        DomainClaim {
            named: Some(d.into()),
            file: None,
        }
    }
    fn file(map: &[&str]) -> DomainClaim {
        DomainClaim {
            named: None,
            file: Some(("/t".into(), map.iter().map(|s| s.to_string()).collect())),
        }
    }

    #[test]
    fn nobody_naming_a_domain_is_one_domain() {
        let c = DomainClaim::default();
        assert_eq!(domains(&[&c, &c]).expect("agree"), vec!["default"; 2]);
    }

    #[test]
    fn a_rank_without_a_domain_is_refused_naming_it() {
        let (e, w, none) = (named("east"), named("west"), DomainClaim::default());
        let err = domains(&[&e, &e, &none, &w]).expect_err("mixed");
        assert!(
            matches!(&err, CollectiveError::DomainUnset { unset, set } if unset == &[2] && set == &[0, 1, 3]),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "ranks [2] set no CAUSEWAY_DOMAIN or CAUSEWAY_TOPOLOGY while ranks [0, 1, 3] did"
        );
    }

    #[test]
    fn a_file_that_contradicts_a_rank_is_refused_naming_both() {
        let f = file(&["east", "east", "west", "west"]);
        // Rank 1 says west; the file all others read says east.
        let err = domains(&[&f, &named("west"), &f, &f]).expect_err("conflict");
        let CollectiveError::DomainConflict { rank: 1, claims } = &err else {
            panic!("{err}")
        };
        assert_eq!(
            claims,
            &[
                (
                    "east".to_string(),
                    "the CAUSEWAY_TOPOLOGY file of ranks [0, 2, 3]".to_string()
                ),
                ("west".to_string(), "its CAUSEWAY_DOMAIN".to_string())
            ]
        );
        // Two different files disagree on rank 2.
        let g = file(&["east", "east", "east", "west"]);
        let err = domains(&[&f, &f, &g, &g]).expect_err("files differ");
        assert!(
            matches!(&err, CollectiveError::DomainConflict { rank: 2, .. }),
            "{err}"
        );
        // Files and names that agree are fine.
        let ok = domains(&[&f, &named("east"), &named("west"), &f]).expect("agree");
        assert_eq!(ok, vec!["east", "east", "west", "west"]);
    }

    #[test]
    fn a_wire_option_that_differs_is_named_with_its_values() {
        let a = Options::default();
        let b = Options {
            chunk_bytes: 65536,
            ..Options::default()
        };
        let w: Vec<Vec<(String, String)>> = [&a, &a, &b, &a]
            .iter()
            .map(|o| {
                o.wire_settings()
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect()
            })
            .collect();
        let refs: Vec<&[(String, String)]> = w.iter().map(Vec::as_slice).collect();
        let err = wire_options(&refs).expect_err("mismatch");
        assert_eq!(
            err.to_string(),
            "ranks disagree on CAUSEWAY_CHUNK_BYTES: 1048576 on ranks [0, 1, 3], 65536 on ranks [2]"
        );
        assert!(wire_options(&refs[..2]).is_ok());
    }

    #[test]
    fn wire_settings_see_every_wire_option() {
        let base = Options::default().wire_settings();
        let changed = [
            Options {
                chunk_bytes: 4096,
                ..Options::default()
            },
            Options {
                streams_wan: 3,
                ..Options::default()
            },
            Options {
                window: 2,
                ..Options::default()
            },
            Options {
                algorithm: Some(Algorithm::Ring),
                ..Options::default()
            },
            Options {
                wan_latency_stream: false,
                ..Options::default()
            },
        ];
        for o in changed {
            assert_ne!(o.wire_settings(), base, "{o:?}");
        }
        // Local tuning is not on the wire.
        let local = Options {
            timeout: Duration::from_secs(1),
            wan_rate_bps: Some(100_000_000),
            ..Options::default()
        };
        assert_eq!(local.wire_settings(), base);
    }

    #[test]
    fn entries_round_trip() {
        let e = Entry {
            addr: "10.0.0.1:4000".parse().expect("addr"),
            host: "h1/net:[1]".into(),
            claim: DomainClaim {
                named: Some("north pole".into()),
                file: Some(("/etc/topo".into(), vec!["a".into(), "b".into()])),
            },
            wire: vec![("CAUSEWAY_WINDOW".into(), "4".into())],
            rdma: Some("rdma: port 1 of rxe0 is not active (state 1)".into()),
        };
        assert_eq!(Entry::parse(0, e.encode().as_bytes()).expect("parse"), e);
        let old = Entry { rdma: None, ..e };
        assert_eq!(
            Entry::parse(0, old.encode().as_bytes()).expect("parse"),
            old
        );
        assert!(Entry::parse(0, b"10.0.0.1:4000\nh\nnonsense\n").is_err());
    }
}
