//! Peers that closed in order: fine only while nothing more is owed.

use super::{ExecError, Executor, Pending};
use crate::schedule::Action;

impl<P> Executor<'_, P> {
    /// Fails if a departed peer still owes bytes that are not in the stash.
    pub(super) fn check_departed(&self) -> Result<(), ExecError> {
        for &peer in &self.departed {
            let mut needed = 0usize;
            for (l, st) in self.lanes.iter().enumerate() {
                let started = self.started && l < self.next_lane;
                if started {
                    needed += st
                        .recvs
                        .iter()
                        .filter(|p| p.peer == peer)
                        .map(Pending::left)
                        .sum::<usize>();
                }
                let from = if started { st.step + 1 } else { 0 };
                for a in self.plan.lanes[l].steps.iter().skip(from).flatten() {
                    if let Action::Recv { peer: q, span, .. } = a {
                        needed += if *q == peer {
                            span.len * self.cfg.elem_bytes
                        } else {
                            0
                        };
                    }
                }
            }
            let stashed: usize = self
                .early
                .values()
                .flatten()
                .filter(|c| c.peer == peer)
                .map(|c| c.len)
                .sum();
            if needed > stashed {
                return Err(ExecError::PeerLeft { peer });
            }
        }
        Ok(())
    }
}
