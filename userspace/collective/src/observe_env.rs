//! The observability variables: `CAUSEWAY_METRICS_ADDR` (`host:port`,
//! [`crate::metrics`]) and `CAUSEWAY_TRACE` (a directory, [`crate::trace`]).

use std::net::{SocketAddr, ToSocketAddrs};

use crate::config::Options;
use crate::error::ConfigError;

pub const METRICS_ADDR_ENV: &str = "CAUSEWAY_METRICS_ADDR";
pub const TRACE_ENV: &str = "CAUSEWAY_TRACE";

/// `host:port` (a name is resolved; its first address is taken).
pub fn parse_metrics_addr(value: &str) -> Result<SocketAddr, ConfigError> {
    let bad = |reason: String| ConfigError::InvalidVar {
        name: METRICS_ADDR_ENV.into(),
        value: value.into(),
        reason,
    };
    value
        .trim()
        .to_socket_addrs()
        .map_err(|e| bad(format!("expected host:port ({e})")))?
        .next()
        .ok_or_else(|| bad("the name has no address".into()))
}

pub(crate) fn from_env(o: &mut Options) -> Result<(), ConfigError> {
    if let Some(v) = std::env::var(METRICS_ADDR_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
    {
        o.metrics_addr = Some(parse_metrics_addr(&v)?);
    }
    if let Some(v) = std::env::var_os(TRACE_ENV).filter(|v| !v.is_empty()) {
        o.trace_dir = Some(v.into());
    }
    if let Some(v) = std::env::var_os("CAUSEWAY_CLOCK_MAP").filter(|v| !v.is_empty()) {
        o.clock_map = Some(v.into());
    }
    Ok(())
}

/// The address rank `local_rank` of a host serves on: `base`'s port plus
/// the local rank (port 0 stays 0: any free port).
pub fn rank_metrics_addr(base: SocketAddr, local_rank: usize) -> Result<SocketAddr, ConfigError> {
    if base.port() == 0 {
        return Ok(base);
    }
    let port = u16::try_from(usize::from(base.port()) + local_rank).map_err(|_| {
        ConfigError::Invalid(format!(
            "{METRICS_ADDR_ENV}: port {} + local rank {local_rank} is above 65535",
            base.port()
        ))
    })?;
    let mut a = base;
    a.set_port(port);
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_ports_follow_the_local_rank() {
        let a = parse_metrics_addr("127.0.0.1:9500").expect("addr");
        assert_eq!(rank_metrics_addr(a, 3).expect("port").port(), 9503);
        let any = parse_metrics_addr("0.0.0.0:0").expect("addr");
        assert_eq!(rank_metrics_addr(any, 5).expect("port"), any);
        assert!(parse_metrics_addr("localhost:9000").is_ok());
        assert!(parse_metrics_addr("9000").is_err());
        let top = parse_metrics_addr("[::1]:65535").expect("addr");
        assert!(rank_metrics_addr(top, 1).is_err());
    }
}
