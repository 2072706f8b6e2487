//! The executor's vocabulary as plain data: its settings, where a chunk
//! belongs, and the outputs a driver performs.

use std::ops::Range;
use std::time::Duration;

use crate::error::Rank;
use crate::wire::Call;

/// How one operation is executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecConfig {
    /// The operation's sequence number (named in errors).
    pub op: u64,
    /// The rank running this executor, and its call: every chunk must carry the same call.
    pub rank: Rank,
    pub call: Call,
    /// Bytes per element: plan spans are in elements, outputs in bytes.
    pub elem_bytes: usize,
    /// Lanes in flight at once (at least 1).
    pub window: usize,
    /// Largest payload of one chunk; a transfer is cut into chunks of this size
    /// (`usize::MAX`: one chunk per transfer).
    pub frame_bytes: usize,
    /// The operation fails when no input arrived for this long.
    pub idle_timeout: Duration,
    /// Flag the sends of the operation's end ([`SendChunk::tail`]). Off for
    /// the start-up probe: its transfers measure what each path carries as
    /// the bulk of an operation is split, not as its end is.
    pub mark_tail: bool,
}

/// Where an incoming chunk belongs: lane, step, and byte offset inside the transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChunkId {
    pub lane: usize,
    pub step: usize,
    /// Relative to the transfer, so sender and receiver spans may sit at different places.
    pub offset: u64,
}

/// Send `range` of the working buffer (as it is now) to `peer` as chunk `offset`
/// of the transfer of `transfer_len` bytes for (`lane`, `step`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendChunk {
    pub peer: Rank,
    /// The call the chunk belongs to (this rank's).
    pub call: Call,
    pub lane: usize,
    pub step: usize,
    pub offset: u64,
    pub range: Range<usize>,
    pub transfer_len: usize,
    /// The plan writes nothing more into `range` during this operation
    /// ([`crate::schedule::Lane::settled`]): the bytes may be sent from the
    /// working buffer itself rather than a copy.
    pub settled: bool,
    /// The plan writes `range` again only with what `peer` sends in a later
    /// step ([`crate::schedule::Lane::answered_by`]): it may be sent from
    /// the working buffer too, if the engine waits for the send to be
    /// written before it writes the range.
    pub answered: bool,
    /// Sent once at most `window` lanes were left to start: these and the
    /// lanes in flight carry the operation's last bytes (a striped peer
    /// cuts such chunks across its paths so that they finish together,
    /// `stripe::tail`).
    pub tail: bool,
}

/// Combine `payload` into `range` of the working buffer (`reduce`) or overwrite it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyChunk<P> {
    pub peer: Rank,
    pub id: ChunkId,
    pub range: Range<usize>,
    pub reduce: bool,
    pub payload: P,
}

/// What the driver must do next, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output<P> {
    Send(SendChunk),
    Apply(ApplyChunk<P>),
    /// Every lane is complete (emitted once, last).
    Done,
}
