//! The classifier's rule model (what a validated policy becomes), how rules
//! compile into the entries of the kernel's maps (`compile`), and a pure
//! reference classifier (`reference`) that the kernel program is
//! differential-tested against. Writing the entries is `causeway::classifier::maps`.

pub mod addr_table;
pub mod admission;
pub mod compile;
pub mod reference;
mod reference_parse;
pub mod rule;

pub use admission::{Admission, AdmissionError, UnclassifiedAction};
pub use rule::{DscpSet, IpPrefix, PortRange, Rule, RuleSet, RuleSetError, Verdict};
