//! Where each rank lives: its domain (data centre, cluster) and host.

use crate::error::Rank;

/// Class of the link between two ranks; each has its own α-β cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkClass {
    /// Same host: shared memory (or loopback TCP when shared memory is off).
    IntraHost,
    /// Same domain, different hosts: the local network.
    IntraDomain,
    /// Different domains: the WAN.
    InterDomain,
}

impl LinkClass {
    pub const ALL: [LinkClass; 3] = [
        LinkClass::IntraHost,
        LinkClass::IntraDomain,
        LinkClass::InterDomain,
    ];
}

/// Domain and host index of every rank. Indices are dense (0..n) and ordered
/// by first appearance in rank order, so every rank derives the same numbering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    domain: Vec<u32>,
    host: Vec<u32>,
}

impl Topology {
    /// From per-rank labels (domain name, host id).
    pub fn from_labels<S: AsRef<str>>(labels: &[(S, S)]) -> Self {
        fn dense<'a>(names: impl Iterator<Item = &'a str>) -> Vec<u32> {
            let mut seen: Vec<&str> = Vec::new();
            names
                .map(|n| match seen.iter().position(|s| *s == n) {
                    Some(i) => i as u32,
                    None => {
                        seen.push(n);
                        (seen.len() - 1) as u32
                    }
                })
                .collect()
        }
        let domain = dense(labels.iter().map(|(d, _)| d.as_ref()));
        // A host id is only meaningful inside its domain.
        let host_keys: Vec<String> = labels
            .iter()
            .map(|(d, h)| format!("{}\u{0}{}", d.as_ref(), h.as_ref()))
            .collect();
        let host = dense(host_keys.iter().map(String::as_str));
        Topology { domain, host }
    }

    /// Everyone in one domain, each rank on its own host.
    pub fn flat(world: usize) -> Self {
        Topology {
            domain: vec![0; world],
            host: (0..world as u32).collect(),
        }
    }

    /// `domains` × `per_domain` ranks, rank r in domain r / per_domain, one host per rank.
    pub fn grid(domains: usize, per_domain: usize) -> Self {
        let n = domains * per_domain;
        Topology {
            domain: (0..n).map(|r| (r / per_domain.max(1)) as u32).collect(),
            host: (0..n as u32).collect(),
        }
    }

    pub fn world(&self) -> usize {
        self.domain.len()
    }

    pub fn domain_of(&self, r: Rank) -> u32 {
        self.domain[r]
    }

    pub fn host_of(&self, r: Rank) -> u32 {
        self.host[r]
    }

    pub fn class(&self, a: Rank, b: Rank) -> LinkClass {
        if self.host[a] == self.host[b] {
            LinkClass::IntraHost
        } else if self.domain[a] == self.domain[b] {
            LinkClass::IntraDomain
        } else {
            LinkClass::InterDomain
        }
    }

    /// Ranks ordered by (domain, host, rank): a ring over this order crosses each
    /// domain boundary once and keeps same-host ranks adjacent.
    pub fn ring_order(&self) -> Vec<Rank> {
        let mut v: Vec<Rank> = (0..self.world()).collect();
        v.sort_by_key(|&r| (self.domain[r], self.host[r], r));
        v
    }

    /// Members of each domain in ring order.
    pub fn domains(&self) -> Vec<Vec<Rank>> {
        let n = self
            .domain
            .iter()
            .map(|d| *d as usize + 1)
            .max()
            .unwrap_or(0);
        let mut out = vec![Vec::new(); n];
        for r in self.ring_order() {
            out[self.domain[r] as usize].push(r);
        }
        out
    }

    /// True when there are at least two domains and all have the same number of
    /// ranks: the shape the hierarchical algorithm needs.
    pub fn is_uniform_multi_domain(&self) -> bool {
        let d = self.domains();
        d.len() >= 2 && d.iter().all(|m| m.len() == d[0].len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_become_dense_indices() {
        let t = Topology::from_labels(&[("b", "h1"), ("a", "h1"), ("b", "h2"), ("b", "h1")]);
        assert_eq!((t.domain_of(0), t.domain_of(1), t.domain_of(3)), (0, 1, 0));
        assert_eq!(t.class(0, 3), LinkClass::IntraHost);
        assert_eq!(t.class(0, 2), LinkClass::IntraDomain);
        // Same host name in another domain is another host.
        assert_eq!(t.class(0, 1), LinkClass::InterDomain);
        assert_eq!(t.ring_order(), vec![0, 3, 2, 1]);
        assert!(!t.is_uniform_multi_domain());
        assert!(Topology::grid(2, 2).is_uniform_multi_domain());
        assert_eq!(Topology::grid(2, 2).domains(), vec![vec![0, 1], vec![2, 3]]);
    }
}
