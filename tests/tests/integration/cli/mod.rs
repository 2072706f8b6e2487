//! The real `causeway` binary in namespaces.

mod attach_lifecycle;
mod classify_traffic;
mod kernel_log;
