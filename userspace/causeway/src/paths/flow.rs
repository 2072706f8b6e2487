//! Flows as a user writes them: `tcp 10.0.0.10:40000 10.1.0.10:5201`.

use std::net::{IpAddr, SocketAddr};

use bpf_maps::paths::FlowKey;

/// One direction of a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowSpec {
    pub proto: u8,
    pub src: SocketAddr,
    pub dst: SocketAddr,
}

/// Why a flow string was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FlowSpecError {
    #[error("a flow is `PROTO SRC:PORT DST:PORT` (e.g. `tcp 10.0.0.10:40000 10.1.0.10:5201`), got {0:?}")]
    Shape(String),
    #[error("unknown protocol {0:?} (tcp, udp, or a number 0-255)")]
    Proto(String),
    #[error("{0:?} is not an address:port (IPv6 as [addr]:port)")]
    Addr(String),
    #[error("the source {src} and destination {dst} are not of one IP family")]
    Family { src: IpAddr, dst: IpAddr },
}

/// Parses `PROTO SRC:PORT DST:PORT`.
pub fn parse_flow(text: &str) -> Result<FlowSpec, FlowSpecError> {
    let parts: Vec<&str> = text.split_whitespace().collect();
    let [proto, src, dst] = parts[..] else {
        return Err(FlowSpecError::Shape(text.to_string()));
    };
    let proto = match proto.to_ascii_lowercase().as_str() {
        "tcp" => 6,
        "udp" => 17,
        n => n
            .parse::<u8>()
            .map_err(|_| FlowSpecError::Proto(proto.to_string()))?,
    };
    let addr = |s: &str| {
        s.parse::<SocketAddr>()
            .map_err(|_| FlowSpecError::Addr(s.to_string()))
    };
    let (src, dst) = (addr(src)?, addr(dst)?);
    if src.is_ipv4() != dst.is_ipv4() {
        return Err(FlowSpecError::Family {
            src: src.ip(),
            dst: dst.ip(),
        });
    }
    Ok(FlowSpec { proto, src, dst })
}

impl FlowSpec {
    /// The key the kernel program builds for this flow's frames.
    pub fn key(&self) -> FlowKey {
        match (self.src.ip(), self.dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => FlowKey::v4(
                s.octets(),
                d.octets(),
                self.proto,
                self.src.port(),
                self.dst.port(),
            ),
            (IpAddr::V6(s), IpAddr::V6(d)) => FlowKey::v6(
                s.octets(),
                d.octets(),
                self.proto,
                self.src.port(),
                self.dst.port(),
            ),
            // `parse_flow` refuses mixed families; map v4 into v6 anyway.
            (s, d) => FlowKey::v6(
                mapped(s),
                mapped(d),
                self.proto,
                self.src.port(),
                self.dst.port(),
            ),
        }
    }

    /// The flow a key describes.
    pub fn from_key(k: &FlowKey) -> Self {
        let ip = |b: &[u8; 16]| -> IpAddr {
            if k.family == bpf_maps::paths::FAMILY_V4 {
                IpAddr::from([b[0], b[1], b[2], b[3]])
            } else {
                IpAddr::from(*b)
            }
        };
        Self {
            proto: k.proto,
            src: SocketAddr::new(ip(&k.src), k.src_port),
            dst: SocketAddr::new(ip(&k.dst), k.dst_port),
        }
    }
}

fn mapped(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

impl std::fmt::Display for FlowSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let proto = match self.proto {
            6 => "tcp".to_string(),
            17 => "udp".to_string(),
            n => n.to_string(),
        };
        write!(f, "{proto} {} {}", self.src, self.dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flows_parse_print_and_round_trip_through_their_key() {
        let f = parse_flow("tcp 10.0.0.10:40000 10.1.0.10:5201").unwrap();
        assert_eq!(f.to_string(), "tcp 10.0.0.10:40000 10.1.0.10:5201");
        assert_eq!(FlowSpec::from_key(&f.key()), f);
        let v6 = parse_flow("UDP [fd00::1]:9 [fd00::2]:10").unwrap();
        assert_eq!(FlowSpec::from_key(&v6.key()), v6);
        assert_eq!(parse_flow("47 10.0.0.1:0 10.0.0.2:0").unwrap().proto, 47);
    }

    #[test]
    fn bad_flows_name_what_is_wrong() {
        assert!(matches!(
            parse_flow("tcp 10.0.0.1:1"),
            Err(FlowSpecError::Shape(_))
        ));
        assert!(matches!(
            parse_flow("sctp 10.0.0.1:1 10.0.0.2:2"),
            Err(FlowSpecError::Proto(_))
        ));
        assert!(matches!(
            parse_flow("tcp 10.0.0.1 10.0.0.2:2"),
            Err(FlowSpecError::Addr(_))
        ));
        assert!(matches!(
            parse_flow("tcp 10.0.0.1:1 [fd00::2]:2"),
            Err(FlowSpecError::Family { .. })
        ));
    }
}
