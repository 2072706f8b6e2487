//! The programs' log records (through aya-log's `AYA_LOGS` ring buffer):
//! off by default, switched per interface by [`CLS_FLAG_LOG`] in that
//! interface's `ClassifierConfig::flags`, and rate-limited per event and
//! CPU by the [`LogRate`] slots of [`MAP_LOG_RATE`].
//!
//! [`CLS_FLAG_LOG`]: crate::classifier::CLS_FLAG_LOG

/// Per-CPU array of [`LogRate`], indexed by `LOG_EVENT_*`.
pub const MAP_LOG_RATE: &str = "CW_LOG_RATE";
/// aya-log's ring buffer of records (its name is aya-log's, not ours).
pub const MAP_LOG_RECORDS: &str = "AYA_LOGS";

/// Events that log, one rate-limit slot each.
pub const LOG_EVENT_INGRESS_TRUNCATED: u32 = 0;
pub const LOG_EVENT_INGRESS_NOT_IP: u32 = 1;
pub const LOG_EVENT_INGRESS_BAD_HEADER: u32 = 2;
pub const LOG_EVENT_EGRESS_TRUNCATED: u32 = 3;
pub const LOG_EVENT_EGRESS_NOT_IP: u32 = 4;
pub const LOG_EVENT_EGRESS_BAD_HEADER: u32 = 5;
pub const LOG_EVENT_SHAPER_DROP: u32 = 6;
/// Slots in [`MAP_LOG_RATE`].
pub const LOG_EVENTS: u32 = 8;

/// Records per event, per CPU and per [`LOG_WINDOW_NS`]; the frames past
/// them are counted and reported in the next record.
pub const LOG_RECORDS_PER_WINDOW: u32 = 4;
/// The rate-limit window: one second.
pub const LOG_WINDOW_NS: u64 = 1_000_000_000;

/// One event's rate limit on one CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LogRate {
    /// `bpf_ktime_get_ns` at the start of the current window.
    pub window_start_ns: u64,
    /// Records written in the current window.
    pub records: u32,
    /// Events not logged since the last record.
    pub suppressed: u32,
}

crate::assert_no_padding!(LogRate, u64, u32, u32);
crate::impl_pod!(LogRate);
