//! Validated classifier rules: the form every policy takes before it reaches
//! the kernel. Constructors check every invariant the compiler relies on.

use std::{fmt, net::IpAddr};

use bpf_maps::classifier::{MAX_CLASSES, MAX_RULES};

use super::admission::{Admission, UnclassifiedAction};

/// An IPv4 or IPv6 prefix whose host bits are zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpPrefix {
    addr: IpAddr,
    len: u8,
}

impl IpPrefix {
    /// A prefix; fails when `len` is longer than the address or host bits are set.
    pub fn new(addr: IpAddr, len: u8) -> Result<Self, RuleSetError> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if len > max {
            return Err(RuleSetError::PrefixTooLong { addr, len, max });
        }
        let prefix = Self { addr, len };
        if prefix.masked() != addr {
            return Err(RuleSetError::HostBitsSet { addr, len });
        }
        Ok(prefix)
    }

    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    pub fn len(&self) -> u8 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }

    /// Whether `ip` lies inside this prefix (false across address families).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => {
                Self {
                    addr: ip,
                    len: self.len,
                }
                .masked()
                    == self.addr
            }
            _ => false,
        }
    }

    fn masked(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                IpAddr::V4((u32::from(a) & mask).into())
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                IpAddr::V6((u128::from(a) & mask).into())
            }
        }
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// An inclusive port range, `lo <= hi`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PortRange {
    lo: u16,
    hi: u16,
}

impl PortRange {
    pub fn new(lo: u16, hi: u16) -> Result<Self, RuleSetError> {
        if lo > hi {
            return Err(RuleSetError::ReversedPortRange { lo, hi });
        }
        Ok(Self { lo, hi })
    }

    pub fn lo(&self) -> u16 {
        self.lo
    }

    pub fn hi(&self) -> u16 {
        self.hi
    }

    pub fn contains(&self, port: u16) -> bool {
        (self.lo..=self.hi).contains(&port)
    }
}

/// A set of DSCP values (0..=63), one bit each: a rule's `dscp = [34, 46]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DscpSet(u64);

impl DscpSet {
    /// The set of `values`; fails on a value above 63 or an empty list.
    pub fn new(values: &[u8]) -> Result<Self, RuleSetError> {
        let mut bits = 0u64;
        for &d in values {
            if d > 63 {
                return Err(RuleSetError::DscpOutOfRange {
                    priority: 0,
                    dscp: d,
                });
            }
            bits |= 1 << d;
        }
        if bits == 0 {
            return Err(RuleSetError::EmptyDscpList);
        }
        Ok(Self(bits))
    }

    /// The set holding only `dscp` (masked to 0..=63).
    pub fn one(dscp: u8) -> Self {
        Self(1 << (dscp & 63))
    }

    pub fn contains(&self, dscp: u8) -> bool {
        dscp <= 63 && self.0 & (1 << dscp) != 0
    }

    /// The values, ascending.
    pub fn values(&self) -> impl Iterator<Item = u8> + '_ {
        (0..64u8).filter(|d| self.contains(*d))
    }
}

impl fmt::Display for DscpSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let values: Vec<String> = self.values().map(|d| d.to_string()).collect();
        if values.len() == 1 {
            write!(f, "{}", values[0])
        } else {
            write!(f, "[{}]", values.join(","))
        }
    }
}

/// What happens to a frame that a rule matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    Pass,
    Drop,
}

/// One classification rule. Absent fields match anything; a rule with a port
/// range matches only frames that carry L4 ports (first fragments of TCP/UDP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rule {
    /// Lower numbers win. Unique within a rule set.
    pub priority: u32,
    pub src: Option<IpPrefix>,
    pub dst: Option<IpPrefix>,
    /// IP protocol number (IPv6: the upper-layer header after extensions).
    pub proto: Option<u8>,
    pub src_ports: Option<PortRange>,
    pub dst_ports: Option<PortRange>,
    /// DSCP values.
    pub dscp: Option<DscpSet>,
    /// Traffic class, `< MAX_CLASSES`.
    pub class: u8,
    pub verdict: Verdict,
}

impl Rule {
    /// A rule with no match fields (it matches every frame), to be narrowed
    /// with struct update syntax: `Rule { proto: Some(17), ..Rule::any(10, 2, Verdict::Pass) }`.
    pub fn any(priority: u32, class: u8, verdict: Verdict) -> Rule {
        Rule {
            priority,
            src: None,
            dst: None,
            proto: None,
            src_ports: None,
            dst_ports: None,
            dscp: None,
            class,
            verdict,
        }
    }
}

/// Rules sorted by priority, checked against every limit of the kernel maps,
/// with the policy parts that act before them (unclassified action,
/// admission).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleSet {
    rules: Vec<Rule>,
    unclassified: UnclassifiedAction,
    admission: Option<Admission>,
}

impl RuleSet {
    /// Validates and sorts `rules` by priority.
    pub fn new(mut rules: Vec<Rule>) -> Result<Self, RuleSetError> {
        if rules.len() > MAX_RULES {
            return Err(RuleSetError::TooManyRules {
                count: rules.len(),
                max: MAX_RULES,
            });
        }
        for rule in &rules {
            if u32::from(rule.class) >= MAX_CLASSES {
                return Err(RuleSetError::ClassOutOfRange {
                    priority: rule.priority,
                    class: rule.class,
                });
            }
            if let (Some(s), Some(d)) = (rule.src, rule.dst) {
                if s.is_ipv4() != d.is_ipv4() {
                    return Err(RuleSetError::MixedFamilies {
                        priority: rule.priority,
                    });
                }
            }
            if (rule.src_ports.is_some() || rule.dst_ports.is_some())
                && !matches!(rule.proto, None | Some(6) | Some(17))
            {
                return Err(RuleSetError::PortsWithoutTransport {
                    priority: rule.priority,
                });
            }
        }
        rules.sort_by_key(|r| r.priority);
        if let Some(w) = rules.windows(2).find(|w| w[0].priority == w[1].priority) {
            return Err(RuleSetError::DuplicatePriority {
                priority: w[0].priority,
            });
        }
        Ok(Self {
            rules,
            unclassified: UnclassifiedAction::Pass,
            admission: None,
        })
    }

    /// The same rules with `action` for frames the parser cannot fully read.
    pub fn with_unclassified(mut self, action: UnclassifiedAction) -> Self {
        self.unclassified = action;
        self
    }

    /// The same rules behind `admission` (`None`: no admission).
    pub fn with_admission(mut self, admission: Option<Admission>) -> Self {
        self.admission = admission;
        self
    }

    pub fn unclassified(&self) -> UnclassifiedAction {
        self.unclassified
    }

    pub fn admission(&self) -> Option<&Admission> {
        self.admission.as_ref()
    }

    /// Rules in priority order; rule `i` is bit `i` of the kernel bitmaps.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// Why a rule set was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RuleSetError {
    #[error("prefix {addr}/{len} is longer than {max} bits")]
    PrefixTooLong { addr: IpAddr, len: u8, max: u8 },
    #[error("prefix {addr}/{len} has host bits set")]
    HostBitsSet { addr: IpAddr, len: u8 },
    #[error("port range {lo}-{hi} is reversed")]
    ReversedPortRange { lo: u16, hi: u16 },
    #[error("{count} rules, the kernel maps hold at most {max}")]
    TooManyRules { count: usize, max: usize },
    #[error("rule with priority {priority}: class {class} is out of range (0..16)")]
    ClassOutOfRange { priority: u32, class: u8 },
    #[error("rule with priority {priority}: DSCP {dscp} is out of range (0..=63)")]
    DscpOutOfRange { priority: u32, dscp: u8 },
    #[error("an empty DSCP list matches nothing")]
    EmptyDscpList,
    #[error("rule with priority {priority}: source and destination prefixes are of different IP families")]
    MixedFamilies { priority: u32 },
    #[error("rule with priority {priority}: ports need protocol tcp or udp (or no protocol)")]
    PortsWithoutTransport { priority: u32 },
    #[error("two rules have priority {priority}")]
    DuplicatePriority { priority: u32 },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_rejects_host_bits_and_length() {
        assert!(IpPrefix::new("10.0.0.0".parse().unwrap(), 8).is_ok());
        assert!(matches!(
            IpPrefix::new("10.0.0.1".parse().unwrap(), 8),
            Err(RuleSetError::HostBitsSet { .. })
        ));
        assert!(matches!(
            IpPrefix::new("10.0.0.0".parse().unwrap(), 33),
            Err(RuleSetError::PrefixTooLong { .. })
        ));
        let p = IpPrefix::new("fd00::".parse().unwrap(), 16).unwrap();
        assert!(p.contains("fd00::1".parse().unwrap()));
        assert!(!p.contains("fd01::1".parse().unwrap()));
        assert!(!p.contains("10.0.0.1".parse().unwrap()));
        let any = IpPrefix::new("0.0.0.0".parse().unwrap(), 0).unwrap();
        assert!(any.contains("1.2.3.4".parse().unwrap()));
    }

    #[test]
    fn rule_set_sorts_and_rejects_duplicates() {
        let rule = |priority| Rule::any(priority, 1, Verdict::Pass);
        let set = RuleSet::new(vec![rule(20), rule(10)]).unwrap();
        assert_eq!(set.rules()[0].priority, 10);
        assert_eq!(
            RuleSet::new(vec![rule(5), rule(5)]),
            Err(RuleSetError::DuplicatePriority { priority: 5 })
        );
        assert!(PortRange::new(10, 9).is_err());
    }
}
