//! Parsers for the values a rule's fields may hold: prefixes, port ranges,
//! protocols, DSCP values and actions. Pure functions, each error says what
//! was expected.

use std::net::IpAddr;

use crate::classifier::{DscpSet, IpPrefix, PortRange, RuleSetError, Verdict};

use super::error::RuleProblem;

/// `"10.1.0.0/16"`, `"fd00::/8"`, or a bare address (a host prefix).
pub fn prefix(field: &'static str, text: &str) -> Result<IpPrefix, RuleProblem> {
    let bad = |reason: String| RuleProblem::BadPrefix {
        field,
        value: text.to_string(),
        reason,
    };
    let (addr_text, len_text) = match text.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (text, None),
    };
    let addr: IpAddr = addr_text
        .trim()
        .parse()
        .map_err(|_| bad(format!("'{addr_text}' is not an IPv4 or IPv6 address")))?;
    let max: u8 = if addr.is_ipv4() { 32 } else { 128 };
    let len = match len_text {
        None => max,
        Some(l) => l.trim().parse::<u8>().map_err(|_| {
            bad(format!(
                "prefix length '{l}' is not a number between 0 and {max}"
            ))
        })?,
    };
    IpPrefix::new(addr, len).map_err(|e| match e {
        RuleSetError::PrefixTooLong { max, .. } => {
            bad(format!("prefix length {len} is longer than {max} bits"))
        }
        RuleSetError::HostBitsSet { .. } => {
            let network = network_of(addr, len);
            bad(format!(
                "host bits are set after the first {len} bits (the network is {network}/{len})"
            ))
        }
        other => bad(other.to_string()),
    })
}

fn network_of(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::V4((u32::from(a) & mask).into())
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::V6((u128::from(a) & mask).into())
        }
    }
}

/// A port (`5000`, `"5000"`) or an inclusive range (`"5000-5100"`).
pub fn ports(field: &'static str, value: &toml::Value) -> Result<PortRange, RuleProblem> {
    let bad = |reason: String| RuleProblem::BadPort { field, reason };
    let one = |text: &str| -> Result<u16, RuleProblem> {
        text.trim()
            .parse::<u16>()
            .map_err(|_| bad(format!("'{text}' is not a port number (0..=65535)")))
    };
    let (lo, hi) = match value {
        toml::Value::Integer(n) => {
            let port = u16::try_from(*n)
                .map_err(|_| bad(format!("{n} is not a port number (0..=65535)")))?;
            (port, port)
        }
        toml::Value::String(s) => match s.split_once('-') {
            Some((lo, hi)) => (one(lo)?, one(hi)?),
            None => {
                let port = one(s)?;
                (port, port)
            }
        },
        other => {
            return Err(bad(format!(
                "expected a port number or a \"lo-hi\" range string, found {}",
                other.type_str()
            )))
        }
    };
    PortRange::new(lo, hi).map_err(|_| RuleProblem::ReversedPortRange { field, lo, hi })
}

/// IP protocol names this file accepts, with their numbers.
const PROTOCOLS: &[(&str, u8)] = &[
    ("icmp", 1),
    ("tcp", 6),
    ("udp", 17),
    ("gre", 47),
    ("esp", 50),
    ("ah", 51),
    ("icmpv6", 58),
    ("sctp", 132),
];

/// A protocol name (`"udp"`) or number (`17`).
pub fn protocol(value: &toml::Value) -> Result<u8, RuleProblem> {
    let bad = |reason: String| RuleProblem::BadProtocol { reason };
    match value {
        toml::Value::Integer(n) => {
            u8::try_from(*n).map_err(|_| bad(format!("{n} is not a protocol number (0..=255)")))
        }
        toml::Value::String(s) => {
            let lower = s.to_ascii_lowercase();
            PROTOCOLS
                .iter()
                .find(|(name, _)| *name == lower)
                .map(|(_, n)| *n)
                .ok_or_else(|| {
                    let names: Vec<&str> = PROTOCOLS.iter().map(|(n, _)| *n).collect();
                    bad(format!(
                        "'{s}' is not a known protocol name ({}) or number",
                        names.join(", ")
                    ))
                })
        }
        other => Err(bad(format!(
            "expected a protocol name or number, found {}",
            other.type_str()
        ))),
    }
}

/// The name of protocol `number`, or the number itself.
pub fn protocol_name(number: u8) -> String {
    PROTOCOLS
        .iter()
        .find(|(_, n)| *n == number)
        .map_or_else(|| number.to_string(), |(name, _)| (*name).to_string())
}

/// A DSCP value or name, or a non-empty list of them (`[34, "ef"]`).
pub fn dscp_set(value: &toml::Value) -> Result<DscpSet, RuleProblem> {
    let values = match value {
        toml::Value::Array(items) if items.is_empty() => {
            return Err(RuleProblem::BadDscp {
                reason: "an empty list matches nothing: leave `dscp` out to match any".into(),
            })
        }
        toml::Value::Array(items) => items.iter().map(dscp).collect::<Result<Vec<u8>, _>>()?,
        one => vec![dscp(one)?],
    };
    DscpSet::new(&values).map_err(|e| RuleProblem::BadDscp {
        reason: e.to_string(),
    })
}

/// A DSCP value (`46`) or name (`"ef"`, `"af41"`, `"cs6"`, `"le"`).
pub fn dscp(value: &toml::Value) -> Result<u8, RuleProblem> {
    let bad = |reason: String| RuleProblem::BadDscp { reason };
    match value {
        toml::Value::Integer(n) => match u8::try_from(*n) {
            Ok(d) if d <= 63 => Ok(d),
            _ => Err(bad(format!("{n} is out of range (0..=63)"))),
        },
        toml::Value::String(s) => dscp_by_name(&s.to_ascii_lowercase()).ok_or_else(|| {
            bad(format!(
                "'{s}' is not a DSCP name (ef, va, le, cs0..cs7, af11..af43) or a number"
            ))
        }),
        other => Err(bad(format!(
            "expected a DSCP number or name, found {}",
            other.type_str()
        ))),
    }
}

fn dscp_by_name(name: &str) -> Option<u8> {
    match name {
        "ef" => return Some(46),
        "va" => return Some(44),
        "le" => return Some(1),
        "be" | "df" => return Some(0),
        _ => {}
    }
    let digit = |c: u8| (c as char).to_digit(10).map(|d| d as u8);
    let bytes = name.as_bytes();
    match bytes {
        [b'c', b's', n] => digit(*n).filter(|n| *n <= 7).map(|n| n * 8),
        [b'a', b'f', class, drop] => {
            let class = digit(*class).filter(|c| (1..=4).contains(c))?;
            let drop = digit(*drop).filter(|d| (1..=3).contains(d))?;
            Some(class * 8 + drop * 2)
        }
        _ => None,
    }
}

/// `"pass"` or `"drop"`.
pub fn action(text: &str) -> Result<Verdict, RuleProblem> {
    match text.to_ascii_lowercase().as_str() {
        "pass" => Ok(Verdict::Pass),
        "drop" => Ok(Verdict::Drop),
        _ => Err(RuleProblem::BadAction {
            value: text.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(n: i64) -> toml::Value {
        toml::Value::Integer(n)
    }

    fn string(s: &str) -> toml::Value {
        toml::Value::String(s.to_string())
    }

    #[test]
    fn prefixes() {
        let p = prefix("src", "10.1.0.0/16").unwrap();
        assert_eq!((p.addr().to_string(), p.len()), ("10.1.0.0".into(), 16));
        assert_eq!(prefix("src", "10.1.2.3").unwrap().len(), 32);
        assert_eq!(prefix("dst", "fd00::/8").unwrap().len(), 8);
        assert_eq!(prefix("dst", "fd00::1").unwrap().len(), 128);
        let host_bits = prefix("src", "10.1.2.3/16").unwrap_err();
        assert!(
            host_bits.to_string().contains("network is 10.1.0.0/16"),
            "{host_bits}"
        );
        assert!(prefix("src", "10.0.0.0/33")
            .unwrap_err()
            .to_string()
            .contains("longer than 32 bits"));
        assert!(prefix("src", "10.0.0/8").is_err());
        assert!(prefix("src", "10.0.0.0/x").is_err());
        assert!(prefix("src", "fd00::/129").is_err());
    }

    #[test]
    fn port_values() {
        assert_eq!(
            ports("dst_port", &int(80)).unwrap(),
            PortRange::new(80, 80).unwrap()
        );
        assert_eq!(
            ports("dst_port", &string("5000-5100")).unwrap(),
            PortRange::new(5000, 5100).unwrap()
        );
        assert_eq!(
            ports("dst_port", &string(" 7 ")).unwrap(),
            PortRange::new(7, 7).unwrap()
        );
        assert_eq!(
            ports("src_port", &string("5100-5000")),
            Err(RuleProblem::ReversedPortRange {
                field: "src_port",
                lo: 5100,
                hi: 5000
            })
        );
        assert!(ports("dst_port", &int(65536)).is_err());
        assert!(ports("dst_port", &int(-1)).is_err());
        assert!(ports("dst_port", &string("1-2-3")).is_err());
        assert!(ports("dst_port", &toml::Value::Boolean(true)).is_err());
    }

    #[test]
    fn protocols_by_name_and_number() {
        assert_eq!(protocol(&string("UDP")).unwrap(), 17);
        assert_eq!(protocol(&string("tcp")).unwrap(), 6);
        assert_eq!(protocol(&int(132)).unwrap(), 132);
        assert!(protocol(&int(256)).is_err());
        assert!(protocol(&string("udpp")).is_err());
        assert_eq!(protocol_name(17), "udp");
        assert_eq!(protocol_name(99), "99");
    }

    #[test]
    fn dscp_by_number_and_name() {
        assert_eq!(dscp(&int(46)).unwrap(), 46);
        assert_eq!(dscp(&string("ef")).unwrap(), 46);
        assert_eq!(dscp(&string("CS6")).unwrap(), 48);
        assert_eq!(dscp(&string("af41")).unwrap(), 34);
        assert_eq!(dscp(&string("af11")).unwrap(), 10);
        assert!(dscp(&int(64)).is_err());
        assert!(dscp(&string("af51")).is_err());
        assert!(dscp(&string("cs8")).is_err());
        assert!(dscp(&string("")).is_err());
        let list = toml::Value::Array(vec![int(34), string("ef")]);
        assert_eq!(dscp_set(&list).unwrap(), DscpSet::new(&[34, 46]).unwrap());
        assert!(dscp_set(&toml::Value::Array(vec![])).is_err());
        assert!(dscp_set(&toml::Value::Array(vec![int(64)])).is_err());
        assert_eq!(protocol(&string("icmpv6")).unwrap(), 58);
    }

    #[test]
    fn actions() {
        assert_eq!(action("pass").unwrap(), Verdict::Pass);
        assert_eq!(action("DROP").unwrap(), Verdict::Drop);
        assert!(action("reject").is_err());
    }
}
