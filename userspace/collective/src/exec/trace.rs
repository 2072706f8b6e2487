//! A record of what a driver did with the executor's outputs: every chunk it
//! sent and every chunk it applied, in order. The engine and the simulator keep
//! the same record, so one plan run through both can be compared message by message.

use crate::error::Rank;
use crate::wire::FrameHeader;

use super::{ApplyChunk, SendChunk};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    /// Written to the peer.
    Sent,
    /// Received from the peer and reduced or copied into the working buffer.
    Applied,
}

/// One chunk: which peer, which lane and step, where in the transfer, how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Message {
    pub dir: Direction,
    pub peer: Rank,
    pub lane: usize,
    pub step: usize,
    pub offset: u64,
    pub len: usize,
}

impl Message {
    /// The data frame `h` written to `peer`.
    pub fn sent(peer: Rank, h: &FrameHeader) -> Self {
        Message {
            dir: Direction::Sent,
            peer,
            lane: h.lane as usize,
            step: h.step as usize,
            offset: h.offset,
            len: h.len as usize,
        }
    }

    /// The chunk `s` sent (by a driver that writes no frame header, the simulator).
    pub fn of_send(s: &SendChunk) -> Self {
        Message {
            dir: Direction::Sent,
            peer: s.peer,
            lane: s.lane,
            step: s.step,
            offset: s.offset,
            len: s.range.len(),
        }
    }

    /// The chunk `a` applied to the buffer.
    pub fn applied<P>(a: &ApplyChunk<P>) -> Self {
        Message {
            dir: Direction::Applied,
            peer: a.peer,
            lane: a.id.lane,
            step: a.id.step,
            offset: a.id.offset,
            len: a.range.len(),
        }
    }
}
