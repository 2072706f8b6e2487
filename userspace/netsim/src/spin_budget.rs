//! How long a direction thread may busy-wait before a departure.
//!
//! A sleeping thread wakes tens of µs late (about 90 µs on average here, even
//! under SCHED_FIFO with a 1 ns timer slack), and the two directions of a path
//! are late by different amounts: an asymmetry that no endpoint can see, which
//! is exactly what clock synchronisation cannot tolerate. Waking `spin_ns` early
//! and spinning up to the departure makes it exact, but under bulk traffic a
//! departure is always near, so unbounded spinning would burn a whole core per
//! direction. The budget grants spinning only while the time spent spinning
//! stays within `share` of the elapsed time (a token bucket of CPU time): sparse
//! traffic — probes, RPCs, the first frames of a flow — leaves on time, bulk
//! traffic falls back to sleeping, where a few tens of µs do not matter.
//!
//! Pure and deterministic: time is a parameter, so it is tested with a virtual clock.

/// The bucket never holds more than this much spinning time (so a long idle
/// period cannot pay for a long burst of spinning).
pub const MAX_TOKENS_NS: i64 = 5_000_000;

/// Whether to spin before the next departure; see the module documentation.
#[derive(Debug, Clone)]
pub struct SpinBudget {
    spin_ns: u64,
    /// Fraction of one core granted to spinning, in parts per million.
    share_ppm: u64,
    /// Spinning time available, ns (negative after overspending).
    tokens: i64,
    last: Option<u64>,
    spinning: bool,
}

impl SpinBudget {
    /// Spin at most `spin_ns` before a departure, using at most `share`
    /// (0.0–1.0, clamped) of one core on average. `spin_ns == 0` never spins;
    /// `share >= 1.0` spins whenever a departure is within `spin_ns`.
    pub fn new(spin_ns: u64, share: f64) -> Self {
        let share_ppm = (share.clamp(0.0, 1.0) * 1e6).round() as u64;
        Self {
            spin_ns,
            share_ppm,
            tokens: MAX_TOKENS_NS,
            last: None,
            spinning: false,
        }
    }

    /// Called once per pass of the forwarding loop at time `now` (ns, monotonic)
    /// with the time `wait` left until the next departure. Charges the time
    /// since the previous pass if that pass spun, and answers whether to spin
    /// (true) or to sleep (false) now.
    pub fn spin_now(&mut self, now: u64, wait: u64) -> bool {
        let elapsed = self
            .last
            .map_or(0, |last| now.saturating_sub(last))
            .min(i64::MAX as u64 / 1_000_000) as i64;
        self.last = Some(now);
        if self.spinning {
            self.tokens = self.tokens.saturating_sub(elapsed);
        }
        let earned = elapsed.saturating_mul(self.share_ppm as i64) / 1_000_000;
        self.tokens = self.tokens.saturating_add(earned).min(MAX_TOKENS_NS);
        let unlimited = self.share_ppm >= 1_000_000;
        self.spinning = self.spin_ns > 0 && wait <= self.spin_ns && (unlimited || self.tokens > 0);
        self.spinning
    }

    /// How long to sleep when [`spin_now`](Self::spin_now) said no: until
    /// `spin_ns` before the departure, or, inside that window (the budget is
    /// spent) or when spinning is off, until the departure itself.
    pub fn sleep_for(&self, wait: u64) -> u64 {
        if self.share_ppm == 0 || wait <= self.spin_ns {
            wait
        } else {
            wait - self.spin_ns
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;

    /// Drives a budget through a virtual forwarding loop: departures every
    /// `gap` ns, a pass every `step` ns while spinning; returns the share of
    /// time spent spinning and the share of departures preceded by a spin.
    fn simulate(budget: &mut SpinBudget, gap: u64, step: u64, total: u64) -> (f64, f64) {
        let (mut now, mut spun, mut precise, mut departures) = (0u64, 0u64, 0u64, 0u64);
        let (mut next, mut last_pass_spun) = (gap, false);
        while now < total {
            let wait = next.saturating_sub(now);
            if wait == 0 {
                departures += 1;
                precise += u64::from(last_pass_spun);
                next += gap;
                continue;
            }
            last_pass_spun = budget.spin_now(now, wait);
            if last_pass_spun {
                spun += step.min(wait);
                now += step.min(wait);
            } else {
                // Sleep until spin_ns before the departure (or to it).
                let sleep = budget.sleep_for(wait).max(1).min(wait);
                now += sleep;
            }
        }
        (
            spun as f64 / total as f64,
            precise as f64 / departures.max(1) as f64,
        )
    }

    #[test]
    fn sparse_departures_are_all_preceded_by_a_spin() {
        // Clock probes: 20 departures per second, 200 µs spin, 2 % budget.
        let mut b = SpinBudget::new(200 * US, 0.02);
        let (cpu, precise) = simulate(&mut b, 50_000 * US, 5 * US, 10_000_000 * US);
        assert_eq!(precise, 1.0);
        assert!(cpu < 0.005, "spinning took {cpu}");
    }

    #[test]
    fn bulk_departures_stay_within_the_share() {
        // 100k departures per second: a departure is always within 200 µs.
        for share in [0.01, 0.02, 0.1] {
            let mut b = SpinBudget::new(200 * US, share);
            let (cpu, precise) = simulate(&mut b, 10 * US, US, 2_000_000 * US);
            assert!(
                cpu <= share * 1.05 + MAX_TOKENS_NS as f64 / 2e9,
                "share {share}: spun {cpu}"
            );
            assert!(precise < 0.5, "share {share}: {precise} precise");
        }
    }

    #[test]
    fn zero_spin_or_zero_share_never_spins() {
        let mut b = SpinBudget::new(0, 1.0);
        assert!(!b.spin_now(0, 0));
        assert!(!b.spin_now(10, 5));
        assert_eq!(b.sleep_for(5), 5);
        let mut b = SpinBudget::new(200 * US, 0.0);
        // The initial bucket may be spent, then never again.
        let (cpu, _) = simulate(&mut b, 10 * US, US, 1_000_000 * US);
        assert!(cpu <= MAX_TOKENS_NS as f64 / 1e9 * 1.01);
        assert_eq!(b.sleep_for(500), 500);
    }

    #[test]
    fn full_share_spins_whenever_a_departure_is_near() {
        let mut b = SpinBudget::new(200 * US, 1.0);
        let (_, precise) = simulate(&mut b, 10 * US, US, 100_000 * US);
        assert_eq!(precise, 1.0);
        assert!(!b.spin_now(u64::MAX / 2, 300 * US));
        assert_eq!(b.sleep_for(300 * US), 100 * US);
    }

    #[test]
    fn an_idle_period_refills_at_most_the_cap() {
        let mut b = SpinBudget::new(200 * US, 0.5);
        // Overspend: spin continuously for 100 ms.
        for t in 0..100_000 {
            b.spin_now(t * US, 10 * US);
        }
        assert!(b.tokens <= US as i64, "bucket not spent: {}", b.tokens);
        // Spent and inside the window: sleep to the departure, do not poll.
        assert_eq!(b.sleep_for(10 * US), 10 * US);
        // A very long idle gap refills to the cap only.
        b.spin_now(10_000_000_000 * US, 10 * US);
        assert!(b.tokens <= MAX_TOKENS_NS);
    }
}
