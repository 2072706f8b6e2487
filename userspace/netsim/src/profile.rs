//! Named WAN profiles: the paths every pair of domains gets.

use std::fmt;
use std::str::FromStr;

use crate::params::LinkParams;

/// A WAN profile. RTTs are round-trip: each direction gets half as one-way delay.
#[derive(Debug, Clone, PartialEq)]
pub enum Profile {
    /// RTT 40 ms, 200 Mbit/s, no loss.
    Wan40,
    /// RTT 80 ms, 100 Mbit/s, 0.1 % loss.
    Lossy80,
    /// Two paths: RTT 40 ms / 200 Mbit/s (default) and RTT 60 ms / 100 Mbit/s.
    Dual,
    /// One path with no delay, rate limit or loss.
    Lan,
    /// Explicit per-path parameters (used in both directions), first = default path.
    Custom(Vec<LinkParams>),
}

impl Profile {
    /// Parameters of each path between a pair of domains; the first is the default.
    pub fn paths(&self) -> Vec<LinkParams> {
        match self {
            Profile::Wan40 => vec![LinkParams::wan(20.0, 200.0, 0.0)],
            Profile::Lossy80 => vec![LinkParams::wan(40.0, 100.0, 0.001)],
            Profile::Dual => vec![
                LinkParams::wan(20.0, 200.0, 0.0),
                LinkParams::wan(30.0, 100.0, 0.0),
            ],
            Profile::Lan => vec![LinkParams::default()],
            Profile::Custom(p) => p.clone(),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Profile::Wan40 => "wan40",
            Profile::Lossy80 => "lossy80",
            Profile::Dual => "dual",
            Profile::Lan => "lan",
            Profile::Custom(_) => "custom",
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown profile name.
#[derive(Debug, thiserror::Error)]
#[error("unknown WAN profile {0:?} (known: wan40, lossy80, dual, lan)")]
pub struct UnknownProfile(pub String);

impl FromStr for Profile {
    type Err = UnknownProfile;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "wan40" => Ok(Profile::Wan40),
            "lossy80" => Ok(Profile::Lossy80),
            "dual" => Ok(Profile::Dual),
            "lan" => Ok(Profile::Lan),
            other => Err(UnknownProfile(other.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_match_their_specification() {
        let w = Profile::Wan40.paths();
        assert_eq!(
            (w.len(), w[0].delay_ns, w[0].rate_bps),
            (1, 20_000_000, 200_000_000)
        );
        let l = Profile::Lossy80.paths();
        assert_eq!(
            (l[0].delay_ns, l[0].rate_bps, l[0].loss),
            (40_000_000, 100_000_000, 0.001)
        );
        let d = Profile::Dual.paths();
        assert_eq!(d.len(), 2);
        assert_eq!((d[1].delay_ns, d[1].rate_bps), (30_000_000, 100_000_000));
        for p in w.iter().chain(&l).chain(&d) {
            p.validate().unwrap();
        }
        assert_eq!("dual".parse::<Profile>().unwrap(), Profile::Dual);
        assert!("wan41".parse::<Profile>().is_err());
    }
}
