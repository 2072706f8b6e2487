//! The policy parts that act before the rules: what happens to frames the
//! parser cannot fully read ([`UnclassifiedAction`]) and XDP admission
//! ([`Admission`]): the source prefixes allowed to reach the protected
//! (training and probe) ports.

use bpf_maps::classifier::ADMISSION_MAX_PREFIXES;

use super::rule::{IpPrefix, PortRange};

/// What XDP does with a frame it cannot fully read (`unclassified = ...`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum UnclassifiedAction {
    /// Pass it; a frame read in part is classified on the bytes present.
    #[default]
    Pass,
    /// Drop it (non-IP frames such as ARP always pass).
    Drop,
}

/// Admitted source prefixes and the ports they protect (TCP and UDP).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    prefixes: Vec<IpPrefix>,
    ports: Vec<PortRange>,
}

/// Why an admission section was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AdmissionError {
    #[error("admission protects no port: list the training and probe ports in `ports`")]
    NoPorts,
    #[error("{count} {family} prefixes, the admission maps hold at most {max}")]
    TooManyPrefixes {
        family: &'static str,
        count: usize,
        max: usize,
    },
}

impl Admission {
    /// Checks the limits of the kernel maps; duplicates are merged.
    pub fn new(mut prefixes: Vec<IpPrefix>, ports: Vec<PortRange>) -> Result<Self, AdmissionError> {
        if ports.is_empty() {
            return Err(AdmissionError::NoPorts);
        }
        prefixes.sort();
        prefixes.dedup();
        let max = ADMISSION_MAX_PREFIXES as usize;
        let v4 = prefixes.iter().filter(|p| p.is_ipv4()).count();
        for (family, count) in [("IPv4", v4), ("IPv6", prefixes.len() - v4)] {
            if count > max {
                return Err(AdmissionError::TooManyPrefixes { family, count, max });
            }
        }
        Ok(Self { prefixes, ports })
    }

    /// Admitted prefixes, sorted, without duplicates.
    pub fn prefixes(&self) -> &[IpPrefix] {
        &self.prefixes
    }

    pub fn ports(&self) -> &[PortRange] {
        &self.ports
    }

    /// Whether `port` is a protected destination port.
    pub fn protects(&self, port: u16) -> bool {
        self.ports.iter().any(|r| r.contains(port))
    }

    /// Whether `src` lies in an admitted prefix.
    pub fn admits(&self, src: std::net::IpAddr) -> bool {
        self.prefixes.iter().any(|p| p.contains(src))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(s: &str) -> IpPrefix {
        let (a, l) = s.split_once('/').unwrap();
        IpPrefix::new(a.parse().unwrap(), l.parse().unwrap()).unwrap()
    }

    #[test]
    fn limits_and_lookups() {
        let ports = vec![PortRange::new(5000, 5100).unwrap()];
        assert_eq!(
            Admission::new(vec![prefix("10.2.0.0/16")], vec![]),
            Err(AdmissionError::NoPorts)
        );
        let a = Admission::new(
            vec![
                prefix("10.2.0.0/16"),
                prefix("fd00:2::/32"),
                prefix("10.2.0.0/16"),
            ],
            ports.clone(),
        )
        .unwrap();
        assert_eq!(a.prefixes().len(), 2);
        assert!(a.admits("10.2.9.9".parse().unwrap()));
        assert!(!a.admits("10.3.0.1".parse().unwrap()));
        assert!(a.admits("fd00:2::7".parse().unwrap()));
        assert!(a.protects(5050) && !a.protects(5101));
        let many: Vec<IpPrefix> = (0..=ADMISSION_MAX_PREFIXES)
            .map(|i| IpPrefix::new(std::net::Ipv4Addr::from(i << 8).into(), 24).unwrap())
            .collect();
        assert!(matches!(
            Admission::new(many, ports),
            Err(AdmissionError::TooManyPrefixes { family: "IPv4", .. })
        ));
    }
}
