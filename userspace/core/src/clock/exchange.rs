//! Matching responses to requests (pure: no sockets, no clock reads).
//!
//! The requester remembers each request it sent (sequence number, the
//! session nonce, the peer, its own t1 stamps); a response or follow-up is
//! accepted only from that peer, with that nonce, for a request still
//! pending, and only once. Everything else is counted and ignored, so
//! forged, replayed or late datagrams never reach the estimator.

use std::{collections::BTreeMap, net::SocketAddr};

use super::{
    estimator::Sample,
    probe::{Kind, Probe, KERNEL, SOFTWARE, USER},
    source::Source,
};
use bpf_maps::clock::FLAG_KERNEL_T1;

/// Why an incoming datagram was ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Reject {
    #[error("no pending request with this sequence number from this peer")]
    Unsolicited,
    #[error("the nonce does not match the session's")]
    WrongNonce,
    #[error("the request was already answered")]
    Replayed,
    #[error("not a response or follow-up")]
    WrongKind,
}

/// What the requester counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ExchangeCounters {
    pub sent: u64,
    pub completed: u64,
    pub expired: u64,
    pub unsolicited: u64,
    pub wrong_nonce: u64,
    pub replayed: u64,
    pub wrong_kind: u64,
    /// Kernel samples dropped because an egress stamp (which no tag
    /// covers) contradicts the covered or local stamps
    /// ([`Requester::check_kernel_egress_stamps`]).
    #[serde(default)]
    pub kernel_inconsistent: u64,
}

/// Local receive stamps of a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxStamps {
    /// Userspace time right after `recvmsg` returned.
    pub user: u64,
    /// SO_TIMESTAMPING software receive stamp, if the socket delivered one.
    pub software: Option<u64>,
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    peer: SocketAddr,
    sent_at: u64,
    user_t1: u64,
    software_t1: Option<u64>,
    /// Set once the response arrived and the software sample waits for
    /// the follow-up: (t2, t4).
    awaiting_follow_up: Option<(u64, u64)>,
}

/// Requests of one session with one peer.
#[derive(Clone, Debug)]
pub struct Requester {
    sender: u32,
    nonce: u64,
    next_seq: u32,
    timeout_ns: u64,
    pending: BTreeMap<u32, Pending>,
    /// Sequence numbers answered recently (for replay detection).
    answered: BTreeMap<u32, u64>,
    check_kernel_egress: bool,
    pub counters: ExchangeCounters,
}

impl Requester {
    pub fn new(sender: u32, nonce: u64, timeout_ns: u64) -> Self {
        Requester {
            sender,
            nonce,
            next_seq: 1,
            timeout_ns,
            pending: BTreeMap::new(),
            answered: BTreeMap::new(),
            check_kernel_egress: false,
            counters: ExchangeCounters::default(),
        }
    }

    /// For authenticated peers: the kernel egress stamps t1 (request) and
    /// t3 (response) cross the wire outside the tag, so a kernel sample is
    /// used only if they agree with the stamps the tag covers or this host
    /// took: u1 ≤ k1, k4 ≤ u4 (ours), k2 ≤ u2, u3 ≤ k3 (the responder's,
    /// covered) and k3 − k2 ≤ k4 − k1. Then the kernel sample's offset
    /// interval lies inside the covered userspace one, which holds the
    /// truth: a rewrite can bias the kernel source at most by the
    /// userspace-stamped round trip, never beyond it.
    pub fn check_kernel_egress_stamps(&mut self) {
        self.check_kernel_egress = true;
    }

    /// A new request to `peer`, stamped `user_t1` (taken just before send).
    pub fn request(&mut self, peer: SocketAddr, user_t1: u64) -> Probe {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1).max(1);
        let mut p = Probe::new(Kind::Request, seq, self.sender, self.nonce);
        p.stamps[USER][0] = user_t1;
        self.pending.insert(
            seq,
            Pending {
                peer,
                sent_at: user_t1,
                user_t1,
                software_t1: None,
                awaiting_follow_up: None,
            },
        );
        self.counters.sent += 1;
        p
    }

    /// The SO_TIMESTAMPING transmit stamp of request `seq`, once the error
    /// queue delivered it.
    pub fn tx_software(&mut self, seq: u32, stamp: u64) {
        if let Some(p) = self.pending.get_mut(&seq) {
            p.software_t1 = Some(stamp);
        }
    }

    /// Handles a response or follow-up; returns the samples it completed.
    pub fn receive(
        &mut self,
        from: SocketAddr,
        probe: &Probe,
        rx: RxStamps,
    ) -> Result<Vec<(Source, Sample)>, Reject> {
        let r = self.match_probe(from, probe, rx);
        match r {
            Err(Reject::Unsolicited) => self.counters.unsolicited += 1,
            Err(Reject::WrongNonce) => self.counters.wrong_nonce += 1,
            Err(Reject::Replayed) => self.counters.replayed += 1,
            Err(Reject::WrongKind) => self.counters.wrong_kind += 1,
            Ok(_) => {}
        }
        r
    }

    fn match_probe(
        &mut self,
        from: SocketAddr,
        probe: &Probe,
        rx: RxStamps,
    ) -> Result<Vec<(Source, Sample)>, Reject> {
        if probe.kind == Kind::Request {
            return Err(Reject::WrongKind);
        }
        if probe.nonce != self.nonce {
            return Err(Reject::WrongNonce);
        }
        let Some(p) = self.pending.get(&probe.seq).copied() else {
            let replay = self.answered.contains_key(&probe.seq) && probe.kind == Kind::Response;
            return Err(if replay {
                Reject::Replayed
            } else {
                Reject::Unsolicited
            });
        };
        if p.peer != from {
            return Err(Reject::Unsolicited);
        }
        match probe.kind {
            Kind::Response if p.awaiting_follow_up.is_some() => Err(Reject::Replayed),
            Kind::Response => Ok(self.on_response(probe, p, rx)),
            Kind::FollowUp => {
                let (t2, t4) = p.awaiting_follow_up.ok_or(Reject::Unsolicited)?;
                self.finish(probe.seq);
                let t3 = probe.stamps[SOFTWARE][2];
                Ok(p.software_t1
                    .filter(|_| t3 != 0)
                    .map(|t1| (Source::SoTimestamping, Sample { t1, t2, t3, t4 }))
                    .into_iter()
                    .collect())
            }
            Kind::Request => Err(Reject::WrongKind),
        }
    }

    fn on_response(&mut self, probe: &Probe, p: Pending, rx: RxStamps) -> Vec<(Source, Sample)> {
        let mut out = Vec::new();
        let all_kernel = (0..4).all(|s| probe.flags & (FLAG_KERNEL_T1 << s) != 0);
        let k = probe.stamps[KERNEL];
        let u = probe.stamps[USER];
        let consistent = !self.check_kernel_egress
            || (p.user_t1 <= k[0]
                && k[3] <= rx.user
                && k[1] <= u[1]
                && u[2] <= k[2]
                && k[0] <= k[3]
                && k[1] <= k[2]
                && k[2] - k[1] <= k[3] - k[0]);
        if all_kernel && !consistent {
            self.counters.kernel_inconsistent += 1;
        }
        if all_kernel && consistent {
            out.push((
                Source::Kernel,
                Sample {
                    t1: k[0],
                    t2: k[1],
                    t3: k[2],
                    t4: k[3],
                },
            ));
        }
        if u[0] == p.user_t1 && u[1] != 0 && u[2] != 0 {
            out.push((
                Source::Userspace,
                Sample {
                    t1: p.user_t1,
                    t2: u[1],
                    t3: u[2],
                    t4: rx.user,
                },
            ));
        }
        let s = probe.stamps[SOFTWARE];
        let software = p.software_t1.zip(rx.software).filter(|_| s[1] != 0);
        match software {
            Some((_, t4)) if probe.two_step() => {
                if let Some(e) = self.pending.get_mut(&probe.seq) {
                    e.awaiting_follow_up = Some((s[1], t4));
                }
                self.counters.completed += 1;
                return out;
            }
            Some((t1, t4)) if s[2] != 0 => {
                out.push((
                    Source::SoTimestamping,
                    Sample {
                        t1,
                        t2: s[1],
                        t3: s[2],
                        t4,
                    },
                ));
            }
            _ => {}
        }
        self.counters.completed += 1;
        self.finish(probe.seq);
        out
    }

    fn finish(&mut self, seq: u32) {
        if let Some(p) = self.pending.remove(&seq) {
            self.answered.insert(seq, p.sent_at);
        }
    }

    /// Forgets requests older than the timeout (local time `now`).
    pub fn expire(&mut self, now: u64) {
        let timeout = self.timeout_ns;
        let before = self.pending.len();
        // A response that waits for its follow-up gets a second timeout.
        self.pending.retain(|_, p| {
            let age = now.saturating_sub(p.sent_at);
            age <= timeout || p.awaiting_follow_up.is_some() && age <= 2 * timeout
        });
        self.counters.expired += (before - self.pending.len()) as u64;
        // Replays are recognised for ten timeouts; later ones are unsolicited.
        self.answered
            .retain(|_, sent| now.saturating_sub(*sent) <= 10 * timeout);
    }

    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

/// The responder's half: a response to `req` carrying the request's t1
/// stamps, this host's receive stamps t2 and its send stamp `user_t3`.
pub fn respond(req: &Probe, sender: u32, rx: RxStamps, user_t3: u64, two_step: bool) -> Probe {
    let mut r = Probe::new(Kind::Response, req.seq, sender, req.nonce);
    r.stamps[USER] = [req.stamps[USER][0], rx.user, user_t3, 0];
    r.stamps[SOFTWARE][1] = rx.software.unwrap_or(0);
    // Kernel t1 (the requester's egress) and t2 (our ingress) travel back;
    // the kernel adds t3 on the way out and the requester's kernel t4.
    let kernel_in = FLAG_KERNEL_T1 | (FLAG_KERNEL_T1 << 1);
    r.flags = req.flags & kernel_in;
    r.stamps[KERNEL][0] = req.kernel_stamp(0).unwrap_or(0);
    r.stamps[KERNEL][1] = req.kernel_stamp(1).unwrap_or(0);
    if two_step && rx.software.is_some() {
        r.flags |= bpf_maps::clock::FLAG_TWO_STEP;
    }
    r
}

/// The follow-up that carries the responder's SO_TIMESTAMPING t3.
pub fn follow_up(resp: &Probe, software_t3: u64) -> Probe {
    let mut f = Probe::new(Kind::FollowUp, resp.seq, resp.sender, resp.nonce);
    f.stamps[SOFTWARE][2] = software_t3;
    f
}
