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
//! How late a wake-up is depends on the machine and its load (tens of µs on an
//! idle host, hundreds under a parallel build or on a busy hypervisor), so the
//! window adapts: the loop reports how late each timed sleep woke
//! ([`SpinBudget::woke`]), and the window is kept at one and a half times the
//! 90th percentile of that lateness (a stochastic quantile tracker: a rare
//! very late wake-up moves it by one step only), never below the configured
//! `spin_ns` nor above [`MAX_SPIN_NS`].
//!
//! Pure and deterministic: time is a parameter, so it is tested with a virtual clock.

/// The bucket never holds more than this much spinning time (so a long idle
/// period cannot pay for a long burst of spinning).
pub const MAX_TOKENS_NS: i64 = 5_000_000;
/// The widest spin window however late wake-ups are.
pub const MAX_SPIN_NS: u64 = 2_000_000;
/// The wake-up lateness quantile tracker moves down by this much after a
/// wake-up earlier than its estimate, and up by [`WAKE_UP_STEPS`] times as
/// much after a later one: it settles where 1 in (1 + steps) wake-ups is
/// later, the 90th percentile.
const WAKE_STEP_NS: u64 = 2_000;
const WAKE_UP_STEPS: u64 = 9;

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
    /// Estimated 90th percentile of the reported wake-up lateness, ns.
    wake_late_ns: u64,
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
            wake_late_ns: 0,
        }
    }

    /// A timed sleep ended `late_ns` after the time it was asked to end.
    pub fn woke(&mut self, late_ns: u64) {
        self.wake_late_ns = if late_ns > self.wake_late_ns {
            (self.wake_late_ns + WAKE_STEP_NS * WAKE_UP_STEPS).min(late_ns)
        } else {
            self.wake_late_ns.saturating_sub(WAKE_STEP_NS).max(late_ns)
        };
    }

    /// The spin window now: see the module documentation.
    pub fn window_ns(&self) -> u64 {
        if self.spin_ns == 0 {
            return 0;
        }
        (self.wake_late_ns.saturating_mul(3) / 2)
            .max(self.spin_ns)
            .min(MAX_SPIN_NS.max(self.spin_ns))
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
        self.spinning =
            self.spin_ns > 0 && wait <= self.window_ns() && (unlimited || self.tokens > 0);
        self.spinning
    }

    /// How long to sleep when [`spin_now`](Self::spin_now) said no: until
    /// `spin_ns` before the departure, or, inside that window (the budget is
    /// spent) or when spinning is off, until the departure itself.
    pub fn sleep_for(&self, wait: u64) -> u64 {
        let window = self.window_ns();
        if self.share_ppm == 0 || wait <= window {
            wait
        } else {
            wait - window
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

    /// As [`simulate`], but every sleep wakes `late` ns after it was asked
    /// to end, reported to the budget; returns the mean departure lateness.
    fn simulate_late_wakes(
        budget: &mut SpinBudget,
        gap: u64,
        late: u64,
        total: u64,
        report: bool,
    ) -> f64 {
        let (mut now, mut next, mut late_sum, mut departures) = (0u64, gap, 0u64, 0u64);
        while now < total {
            if now >= next {
                late_sum += now - next;
                departures += 1;
                next += gap;
                continue;
            }
            let wait = next - now;
            if budget.spin_now(now, wait) {
                now += US.min(wait);
            } else {
                let asked = now + budget.sleep_for(wait).max(1).min(wait);
                now = asked + late;
                if report {
                    budget.woke(late);
                }
            }
        }
        late_sum as f64 / departures.max(1) as f64
    }

    #[test]
    fn the_window_grows_to_cover_late_wake_ups_and_decays_after() {
        // Wake-ups 400 µs late, twice the configured window: after some 23
        // late wake-ups (of 100) the window covers them and departures leave
        // on time.
        let mut b = SpinBudget::new(200 * US, 0.05);
        let mean_late = simulate_late_wakes(&mut b, 50_000 * US, 400 * US, 5_000_000 * US, true);
        assert!(mean_late < 60.0 * US as f64, "mean lateness {mean_late} ns");
        assert_eq!(b.window_ns(), 600 * US);
        let later = simulate_late_wakes(&mut b, 50_000 * US, 400 * US, 5_000_000 * US, true);
        assert!(later < US as f64, "mean lateness once settled {later} ns");
        // Unreported, the fixed window leaves every departure 200 µs late.
        let mut fixed = SpinBudget::new(200 * US, 0.05);
        let mean_late =
            simulate_late_wakes(&mut fixed, 50_000 * US, 400 * US, 5_000_000 * US, false);
        assert!((mean_late - 200_000.0).abs() < 1_000.0, "{mean_late}");
        // Prompt wake-ups shrink it back to the configured window.
        for _ in 0..400 {
            b.woke(5 * US);
        }
        assert_eq!(b.window_ns(), 200 * US);
        // One wake-up in twenty very late (a preemption) hardly moves it.
        for i in 0..2_000 {
            b.woke(if i % 20 == 0 { 5_000 * US } else { 5 * US });
        }
        assert!(b.window_ns() <= 200 * US, "{}", b.window_ns());
        // Never wider than the cap, never for a zero window.
        for _ in 0..10_000 {
            b.woke(50_000 * US);
        }
        assert_eq!(b.window_ns(), MAX_SPIN_NS);
        let mut off = SpinBudget::new(0, 1.0);
        off.woke(50_000 * US);
        assert_eq!(off.window_ns(), 0);
        assert!(!off.spin_now(0, 10));
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
