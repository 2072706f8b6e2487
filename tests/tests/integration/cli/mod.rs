//! The real `causeway` binary in namespaces.

mod admission_traffic;
mod attach_lifecycle;
mod classify_traffic;
mod kernel_log;
mod path_steering;
