//! What the bootstrap store refuses: connections past a bound, keys past a
//! bound, requests faster than a per-connection rate, and (with TLS) writes
//! to a rank's keys by a certificate other than the one that claimed the rank.
//! A refused request gets [`crate::StoreError::Refused`]; the connection and
//! the job go on. Pure: time is an argument.

use std::collections::HashMap;
use std::time::Instant;

/// Bounds of one store server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreLimits {
    /// Client connections served at once (one thread each); more are closed at accept.
    pub max_connections: usize,
    /// Keys stored at once; setting a new key past it is refused.
    pub max_keys: usize,
    /// Requests per second per connection, sustained.
    pub requests_per_sec: u32,
    /// Requests a connection may make at once before the rate applies.
    pub burst: u32,
}

impl Default for StoreLimits {
    /// Room for thousands of ranks: a rank keeps one connection and polls at
    /// most every 20 ms per key it waits for.
    fn default() -> Self {
        StoreLimits {
            max_connections: 4096,
            max_keys: 1 << 20,
            requests_per_sec: 2000,
            burst: 4000,
        }
    }
}

/// A token bucket on the caller's clock.
#[derive(Debug)]
pub(crate) struct RateLimit {
    tokens: f64,
    last: Instant,
    rate: f64,
    burst: f64,
}

impl RateLimit {
    pub fn new(limits: &StoreLimits, now: Instant) -> Self {
        RateLimit {
            tokens: f64::from(limits.burst),
            last: now,
            rate: f64::from(limits.requests_per_sec),
            burst: f64::from(limits.burst),
        }
    }

    /// Takes one token if there is one.
    pub fn allow(&mut self, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now.max(self.last);
        self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The rank a key belongs to: `claim/<r>` and `rank/<r>`; `world` and
/// `session` belong to rank 0.
fn rank_of(key: &str) -> Option<u64> {
    if key == "world" || key == "session" {
        return Some(0);
    }
    let (prefix, r) = key.split_once('/')?;
    matches!(prefix, "claim" | "rank")
        .then(|| r.parse().ok())
        .flatten()
}

/// Which client identity (its certificate) owns which rank's keys: the
/// first to claim a rank (`claim/<r>`) owns it.
#[derive(Debug, Default)]
pub(crate) struct Owners {
    by_rank: HashMap<u64, Vec<u8>>,
}

impl Owners {
    /// Whether `who` may write `key` (`claiming`: an add to `claim/<r>`).
    /// Without an identity (a plaintext store) every write is allowed.
    pub fn may_write(&mut self, key: &str, who: Option<&[u8]>) -> Result<(), String> {
        let (Some(who), Some(r)) = (who, rank_of(key)) else {
            return Ok(());
        };
        match self.by_rank.get(&r) {
            Some(owner) if owner.as_slice() == who => Ok(()),
            Some(_) => Err(format!(
                "key {key:?} belongs to rank {r}, claimed by another certificate"
            )),
            None if key.starts_with("claim/") => {
                self.by_rank.insert(r, who.to_vec());
                Ok(())
            }
            None => Err(format!(
                "key {key:?} belongs to rank {r}, which this certificate has not claimed"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_bucket_allows_the_burst_then_the_rate() {
        let l = StoreLimits {
            requests_per_sec: 10,
            burst: 3,
            ..StoreLimits::default()
        };
        let t0 = Instant::now();
        let mut b = RateLimit::new(&l, t0);
        assert!((0..3).all(|_| b.allow(t0)));
        assert!(!b.allow(t0));
        assert!(!b.allow(t0 + Duration::from_millis(50)));
        assert!(b.allow(t0 + Duration::from_millis(110)));
        assert!(!b.allow(t0 + Duration::from_millis(110)));
        // Idle for long: back to the burst, not more.
        let later = t0 + Duration::from_secs(100);
        assert_eq!((0..10).filter(|_| b.allow(later)).count(), 3);
    }

    #[test]
    fn a_rank_is_owned_by_the_certificate_that_claimed_it() {
        let mut o = Owners::default();
        let (a, b): (&[u8], &[u8]) = (b"cert-a", b"cert-b");
        assert!(o.may_write("rank/1", Some(a)).is_err(), "unclaimed");
        o.may_write("claim/1", Some(a)).expect("first claim");
        o.may_write("rank/1", Some(a)).expect("own key");
        let e = o.may_write("claim/1", Some(b)).expect_err("taken");
        assert!(e.contains("rank 1"), "{e}");
        assert!(o.may_write("rank/1", Some(b)).is_err());
        assert!(o.may_write("session", Some(a)).is_err(), "rank 0's key");
        o.may_write("claim/0", Some(b)).expect("claim 0");
        o.may_write("world", Some(b)).expect("rank 0 writes world");
        o.may_write("error", Some(a))
            .expect("shared keys stay writable");
        o.may_write("rank/9", None).expect("no TLS: no owners");
    }
}
