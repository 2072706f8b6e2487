//! How many ranks of a domain split its WAN path now: those with data
//! waiting to cross it.
//!
//! A hierarchical allreduce sends from every rank of a domain at once, but a
//! broadcast from one rank, a point-to-point send, or the rank whose half
//! finished first leaves the others idle. Splitting the path by the domain's
//! ranks held a lone sender to its share: a cross-domain broadcast of 64 MiB
//! on wan40 took 1.98× the bound (docs/BENCHMARKS.md). So each rank tells the
//! others of its domain, over the LAN connection they share, when it starts
//! having WAN data waiting and when it has had none for a while (a
//! `WanSending` frame on each change); each splits the path among itself and
//! the ranks that said they send.
//!
//! - A rank sends from the first reading with unsent data on a bulk
//!   connection; it stops [`IDLE_AFTER`] (at least one minimum RTT) after
//!   the last such reading, so that the gap between two chunks is not a
//!   stop.
//! - A rank that has not reported yet counts as sending: a rank never
//!   takes a share it was not given. A rank that starts sending keeps to
//!   its share of all the domain's ranks for [`SETTLE`], until the others'
//!   announcements had time to arrive (ranks that start together each last
//!   heard the other say it was idle). A lone sender that another rank
//!   joins counts it within one LAN hop and one reading; until then the
//!   domain sends above its caps for ~10–20 ms, which the bottleneck queue
//!   and the trim absorb.
//!
//! Pure: readings and time in, the state to announce and the count out.

use std::collections::BTreeMap;

use crate::transport::tcp::TcpInfo;

/// How long after its last unsent byte a rank still counts as sending, ns
/// (at least this, or the path's minimum RTT if longer).
pub const IDLE_AFTER: u64 = 20_000_000;
/// How long a rank that starts sending keeps to its share of all the
/// domain's ranks before it believes the others idle, ns: long enough for
/// the others' own announcements to arrive (two readings and a LAN hop).
/// The ranks of a hierarchical allreduce start their WAN sends together,
/// each having last heard the other say it was idle; taken at its word at
/// once, each paced at the whole path for a reading or two, which
/// overflowed a one-BDP queue at 1 Gbit/s (gig10, 64 MiB: 5,488 drops).
pub const SETTLE: u64 = 30_000_000;

/// The ranks of a domain that send across the WAN now, as one rank sees it.
#[derive(Debug, Clone)]
pub struct DomainShare {
    /// The domain's ranks, this one included.
    ranks: usize,
    /// What each other rank said last.
    peers: BTreeMap<usize, bool>,
    /// This rank's state as last announced, and when it last had unsent data.
    sending: bool,
    last_unsent_ns: Option<u64>,
    /// When this rank last started sending.
    since_ns: u64,
}

impl DomainShare {
    pub fn new(ranks: usize) -> Self {
        DomainShare {
            ranks: ranks.max(1),
            peers: BTreeMap::new(),
            sending: false,
            last_unsent_ns: None,
            since_ns: 0,
        }
    }

    /// The domain has `ranks` ranks, this one included.
    pub fn set_ranks(&mut self, ranks: usize) {
        self.ranks = ranks.max(1);
    }

    /// Rank `from` of the domain said whether it sends.
    pub fn peer(&mut self, from: usize, sending: bool) {
        self.peers.insert(from, sending);
    }

    /// One reading of this rank's bulk connections at `now_ns` (`min_rtt_us`:
    /// the path's); returns the state to announce when it changed.
    pub fn observe(
        &mut self,
        now_ns: u64,
        min_rtt_us: u32,
        infos: &[Option<TcpInfo>],
    ) -> Option<bool> {
        if infos.iter().flatten().any(|i| i.unsent) {
            self.last_unsent_ns = Some(now_ns);
        }
        let linger = IDLE_AFTER.max(u64::from(min_rtt_us) * 1_000);
        let sending = self
            .last_unsent_ns
            .is_some_and(|t| now_ns.saturating_sub(t) <= linger);
        (sending != self.sending).then(|| {
            self.sending = sending;
            if sending {
                self.since_ns = now_ns;
            }
            sending
        })
    }

    /// The ranks the path is split among at `now_ns`: this one and every
    /// other that sends or has not said (at least 1); all of the domain's
    /// while this rank is idle (the cap it leaves on its sockets is the
    /// one its next bytes leave under, before the next reading) and within
    /// [`SETTLE`] of it starting to send.
    pub fn flows(&self, now_ns: u64) -> usize {
        if !self.sending || now_ns.saturating_sub(self.since_ns) < SETTLE {
            return self.ranks;
        }
        let others = self.ranks - 1;
        let idle = self.peers.values().filter(|&&s| !s).count().min(others);
        self.ranks - idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn reading(unsent: bool) -> [Option<TcpInfo>; 2] {
        let i = TcpInfo {
            busy: unsent,
            unsent,
            ..TcpInfo::default()
        };
        [Some(TcpInfo::default()), Some(i)]
    }

    #[test]
    fn unknown_peers_count_as_sending() {
        let mut s = DomainShare::new(3);
        assert_eq!(s.observe(0, 1_000, &reading(true)), Some(true));
        assert_eq!(s.flows(SETTLE), 3);
        assert_eq!(DomainShare::new(0).flows(0), 1);
    }

    #[test]
    fn the_path_is_split_among_the_ranks_that_send() {
        let mut s = DomainShare::new(3);
        assert_eq!(s.observe(0, 1_000, &reading(true)), Some(true));
        s.peer(1, false);
        assert_eq!(s.flows(SETTLE), 2);
        s.peer(2, false);
        assert_eq!(s.flows(SETTLE), 1);
        s.peer(1, true);
        assert_eq!(s.flows(SETTLE), 2);
        // Idle itself: the cap it leaves behind is its share of all.
        assert_eq!(
            s.observe(SETTLE + 60 * MS, 1_000, &reading(false)),
            Some(false)
        );
        assert_eq!(s.flows(SETTLE + 60 * MS), 3);
    }

    #[test]
    fn a_rank_that_starts_sending_keeps_to_its_share_of_all_until_the_others_could_say() {
        let mut s = DomainShare::new(2);
        s.peer(1, false);
        assert_eq!(s.observe(100 * MS, 40_000, &reading(true)), Some(true));
        assert_eq!(s.flows(100 * MS), 2);
        assert_eq!(s.flows(100 * MS + SETTLE - 1), 2);
        assert_eq!(s.flows(100 * MS + SETTLE), 1, "the peer stayed idle");
        s.peer(1, true);
        assert_eq!(s.flows(200 * MS), 2);
    }

    #[test]
    fn a_rank_sends_from_its_first_unsent_byte_and_stops_a_min_rtt_after_its_last() {
        let mut s = DomainShare::new(2);
        assert_eq!(s.observe(0, 40_000, &reading(false)), None);
        assert_eq!(s.observe(10 * MS, 40_000, &reading(true)), Some(true));
        // Gaps between chunks, shorter than the 40 ms minimum RTT: no change.
        for t in [20, 30, 50] {
            assert_eq!(s.observe(t * MS, 40_000, &reading(false)), None, "{t}");
        }
        assert_eq!(s.observe(60 * MS, 40_000, &reading(true)), None);
        assert_eq!(s.observe(100 * MS, 40_000, &reading(false)), None);
        assert_eq!(s.observe(110 * MS, 40_000, &reading(false)), Some(false));
        assert_eq!(s.observe(120 * MS, 40_000, &reading(false)), None);
    }

    #[test]
    fn a_short_path_lingers_at_least_idle_after() {
        let mut s = DomainShare::new(2);
        assert_eq!(s.observe(0, 1_000, &reading(true)), Some(true));
        assert_eq!(s.observe(20 * MS, 1_000, &reading(false)), None);
        assert_eq!(s.observe(30 * MS, 1_000, &reading(false)), Some(false));
    }
}
