//! Who is to blame when an operation stops: the rule every rank applies to
//! what it saw itself and what the others reported. Pure: time is an input
//! (a [`Duration`] since an epoch the driver picks), links are plain data.
//!
//! Evidence is *direct* when the observer waited on the culprit itself and
//! either its connection ended ([`How::ConnectionClosed`]) or nothing at all —
//! no data, no heartbeat — arrived from it for the timeout ([`How::Silent`]:
//! a timeout on a direct link). It is *indirect* ([`How::NoProgress`]) when
//! the peer waited on is alive (its heartbeats arrive) but sent nothing the
//! operation needs: it may itself be waiting on the rank that stopped.
//! [`How::Failed`] (misbehaviour, named in words) counts as direct.
//!
//! The rule ([`Judge`]); the same inputs in the same order give the same verdict:
//! 1. A direct verdict is final as soon as it is known; of several, the first
//!    known wins (a rank's own when it makes it, a report when it arrives). A
//!    closed connection waits [`SETTLE`] first: the closing rank's Abort may
//!    still arrive on another of its connections and say why.
//! 2. An indirect verdict (own or reported) is held for the grace period from
//!    the first one, and beyond it while a peer this rank waits on is *quiet*
//!    (its heartbeats stopped): until that link's own timeout, which gives a
//!    direct verdict. A direct verdict that arrives meanwhile replaces it.
//! 3. When the hold ends: this rank's own indirect verdict, else the first
//!    reported one.
//!
//! A rank whose Abort arrived closes its connections next: that is no evidence
//! against it.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::error::Rank;

/// How long a closed connection waits for the closing rank's Abort.
pub const SETTLE: Duration = Duration::from_millis(100);

/// How a rank was found to have stopped or failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// Its connection ended without a goodbye.
    ConnectionClosed,
    /// Nothing at all (no data, no heartbeat) arrived from it for this long
    /// while the observer waited on it: a timeout on a direct link.
    Silent(Duration),
    /// It is alive (heartbeats arrive) but sent nothing the operation needed
    /// for this long: it may itself wait on another rank.
    NoProgress(Duration),
    /// It sent what does not fit the operation, or failed otherwise (in words).
    Failed,
}

impl How {
    /// Direct evidence: everything but [`How::NoProgress`].
    pub fn is_direct(&self) -> bool {
        !matches!(self, How::NoProgress(_))
    }
}

impl std::fmt::Display for How {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            How::ConnectionClosed => write!(f, "connection closed"),
            How::Silent(d) => write!(
                f,
                "timeout on a direct link: nothing heard from it for {:.1} s",
                d.as_secs_f64()
            ),
            How::NoProgress(d) => write!(
                f,
                "no progress for {:.1} s (alive, may wait on another rank)",
                d.as_secs_f64()
            ),
            How::Failed => write!(f, "failed"),
        }
    }
}

/// `observer` found `culprit` at fault, `how`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub culprit: Rank,
    pub observer: Rank,
    pub how: How,
}

/// What a rank reports: a verdict and, unless it is its own, the rank whose
/// Abort carried it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub verdict: Verdict,
    pub from: Option<Rank>,
}

/// A peer the operation waits on, and when anything last arrived from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub peer: Rank,
    pub heard: Duration,
}

/// The timing of the rule, all derived from the operation timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JudgeConfig {
    pub me: Rank,
    /// A link silent this long while waited on is a direct verdict.
    pub timeout: Duration,
    /// A link silent this long has missed heartbeats (several intervals).
    pub quiet: Duration,
    /// How long an indirect verdict waits for a direct one.
    pub grace: Duration,
}

/// How often an idle connection carries a heartbeat for `timeout`.
pub fn heartbeat_interval(timeout: Duration) -> Duration {
    (timeout / 10).clamp(Duration::from_millis(10), Duration::from_millis(500))
}

impl JudgeConfig {
    pub fn new(me: Rank, timeout: Duration) -> Self {
        JudgeConfig {
            me,
            timeout,
            quiet: heartbeat_interval(timeout) * 3,
            grace: (timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1)),
        }
    }
}

/// One rank's judgement during one operation (see the module docs for the rule).
#[derive(Debug, Clone)]
pub struct Judge {
    cfg: JudgeConfig,
    /// The first direct verdict and when it became known.
    direct: Option<(Decision, Duration)>,
    own_indirect: Option<Verdict>,
    reported_indirect: Option<Decision>,
    /// When the first indirect verdict became known.
    since: Option<Duration>,
    aborted: BTreeSet<Rank>,
    /// The peers this rank's own operation stalled on (all of them, in order).
    stalled_on: Vec<Rank>,
}

impl Judge {
    pub fn new(cfg: JudgeConfig) -> Self {
        Judge {
            cfg,
            direct: None,
            own_indirect: None,
            reported_indirect: None,
            since: None,
            aborted: BTreeSet::new(),
            stalled_on: Vec::new(),
        }
    }

    pub fn config(&self) -> &JudgeConfig {
        &self.cfg
    }

    /// Something is known: the operation is failing.
    pub fn is_failing(&self) -> bool {
        self.direct.is_some() || self.since.is_some()
    }

    /// The peers the own operation stalled on ([`Judge::stalled`]).
    pub fn stalled_on(&self) -> &[Rank] {
        &self.stalled_on
    }

    fn offer(&mut self, d: Decision, now: Duration) {
        // A connection of `from` that closed just before its Abort arrived was
        // its giving up, not evidence against it.
        if let (Some(from), Some((old, _))) = (d.from, &self.direct) {
            if old.verdict.how == How::ConnectionClosed
                && old.verdict.culprit == from
                && old.from.is_none()
                && now < self.settled_at()
            {
                self.direct = None;
            }
        }
        if d.verdict.how.is_direct() {
            if self.direct.is_none() {
                self.direct = Some((d, now));
            }
            return;
        }
        self.since.get_or_insert(now);
        match d.from {
            None => {
                self.own_indirect.get_or_insert(d.verdict);
            }
            Some(_) => {
                self.reported_indirect.get_or_insert(d);
            }
        }
    }

    fn settled_at(&self) -> Duration {
        self.direct.as_ref().map_or(Duration::MAX, |(d, t)| {
            if d.verdict.how == How::ConnectionClosed {
                t.saturating_add(SETTLE)
            } else {
                *t
            }
        })
    }

    /// This rank saw `how` of `culprit` itself.
    pub fn observe(&mut self, culprit: Rank, how: How, now: Duration) {
        let verdict = Verdict {
            culprit,
            observer: self.cfg.me,
            how,
        };
        self.offer(
            Decision {
                verdict,
                from: None,
            },
            now,
        );
    }

    /// The own operation made no progress for `after`, waiting on `peers`.
    pub fn stalled(&mut self, peers: &[Rank], after: Duration, now: Duration) {
        if self.stalled_on.is_empty() {
            self.stalled_on = peers.to_vec();
        }
        let culprit = peers.first().copied().unwrap_or(self.cfg.me);
        self.observe(culprit, How::NoProgress(after), now);
    }

    /// A connection of `peer` ended without a goodbye.
    pub fn closed(&mut self, peer: Rank, now: Duration) {
        if !self.aborted.contains(&peer) {
            self.observe(peer, How::ConnectionClosed, now);
        }
    }

    /// `from` gave up and says `verdict` (its Abort).
    pub fn report(&mut self, from: Rank, verdict: Verdict, now: Duration) {
        self.aborted.insert(from);
        self.offer(
            Decision {
                verdict,
                from: Some(from),
            },
            now,
        );
    }

    /// Own direct verdict for the longest-silent link this rank waits on that
    /// was silent for the timeout (ties: the lower rank).
    pub fn check_links(&mut self, links: &[Link], now: Duration) {
        let silent = links
            .iter()
            .map(|l| (now.saturating_sub(l.heard), l.peer))
            .filter(|(s, _)| *s >= self.cfg.timeout)
            .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        if let Some((s, peer)) = silent {
            self.observe(peer, How::Silent(s), now);
        }
    }

    /// When an indirect verdict may be decided: the grace end, later while a
    /// link waited on is quiet (until its timeout).
    fn hold_until(&self, links: &[Link], now: Duration) -> Option<Duration> {
        let since = self.since?;
        let quiet_until = links
            .iter()
            .filter(|l| now.saturating_sub(l.heard) >= self.cfg.quiet)
            .map(|l| l.heard.saturating_add(self.cfg.timeout))
            .max()
            .unwrap_or(Duration::ZERO);
        Some(since.saturating_add(self.cfg.grace).max(quiet_until))
    }

    /// The verdict to report now, or `None` while there is none or it is held.
    pub fn decision(&self, links: &[Link], now: Duration) -> Option<Decision> {
        if let Some((d, _)) = &self.direct {
            return (now >= self.settled_at()).then_some(*d);
        }
        if now < self.hold_until(links, now)? {
            return None;
        }
        match self.own_indirect {
            Some(verdict) => Some(Decision {
                verdict,
                from: None,
            }),
            None => self.reported_indirect,
        }
    }

    /// The verdict once nothing more can arrive (every connection of the
    /// rank has ended): what [`decision`](Self::decision) gives after every
    /// hold, at once.
    pub fn final_decision(&self) -> Option<Decision> {
        self.decision(&[], Duration::MAX)
    }

    /// When to look again (check the links, ask for the decision).
    pub fn poll_timeout(&self, links: &[Link], now: Duration) -> Option<Duration> {
        let link_due = links
            .iter()
            .filter(|_| self.direct.is_none())
            .map(|l| l.heard.saturating_add(self.cfg.timeout))
            .min();
        let decide = match &self.direct {
            Some(_) => Some(self.settled_at()),
            None => self.hold_until(links, now),
        };
        [link_due, decide].into_iter().flatten().min()
    }
}

#[cfg(test)]
mod tests;
