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
    /// RTT 120 ms, 50 Mbit/s, 0.5 % loss: a long, thin, lossy path.
    Lossy120,
    /// RTT 10 ms, 1 Gbit/s, no loss: a short, fat path (CPU-bound on small hosts).
    Gig10,
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
            Profile::Lossy120 => vec![LinkParams::wan(60.0, 50.0, 0.005)],
            Profile::Gig10 => vec![LinkParams::wan(5.0, 1000.0, 0.0)],
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
            Profile::Lossy120 => "lossy120",
            Profile::Gig10 => "gig10",
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
#[error("unknown WAN profile {0:?} (known: wan40, lossy80, lossy120, gig10, dual, lan)")]
pub struct UnknownProfile(pub String);

impl FromStr for Profile {
    type Err = UnknownProfile;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "wan40" => Ok(Profile::Wan40),
            "lossy80" => Ok(Profile::Lossy80),
            "lossy120" => Ok(Profile::Lossy120),
            "gig10" => Ok(Profile::Gig10),
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
        let t = Profile::Lossy120.paths();
        assert_eq!(
            (t[0].delay_ns, t[0].rate_bps, t[0].loss),
            (60_000_000, 50_000_000, 0.005)
        );
        let g = Profile::Gig10.paths();
        assert_eq!((g[0].delay_ns, g[0].rate_bps), (5_000_000, 1_000_000_000));
        let d = Profile::Dual.paths();
        assert_eq!(d.len(), 2);
        assert_eq!((d[1].delay_ns, d[1].rate_bps), (30_000_000, 100_000_000));
        for p in w.iter().chain(&l).chain(&t).chain(&g).chain(&d) {
            p.validate().unwrap();
        }
        for p in [
            Profile::Wan40,
            Profile::Lossy80,
            Profile::Lossy120,
            Profile::Gig10,
            Profile::Dual,
            Profile::Lan,
        ] {
            assert_eq!(p.name().parse::<Profile>().unwrap(), p);
        }
        assert!("wan41".parse::<Profile>().is_err());
    }
}
