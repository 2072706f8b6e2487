//! Per-class egress shaping, as models: the token bucket shared with the TC
//! program (`bucket`), the program's per-class table (`config`), the HTB
//! hierarchy (or `fq` root, for paced classes) that finishes the job in the
//! qdisc (`htb`), and the validated
//! plan both derive from (`plan`). Writing the maps and running `tc` is
//! `causeway::shaper`.

pub mod bucket;
pub mod config;
pub mod htb;
pub mod plan;

pub use bucket::{BucketError, BucketParams, Decision, Pacing, SharedBucket};
pub use config::{ClassShaping, OverAction, ParseOverActionError, ShapingError, ShapingTable};
pub use plan::{ClassShapingPolicy, PacingMode, PlanError, Setting, ShapingPolicy};
