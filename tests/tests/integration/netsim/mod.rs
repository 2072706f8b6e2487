//! The WAN emulator and the testbed API.

mod cut;
mod dual;
mod lifecycle;
mod link;
mod mesh;
mod panic;
mod rtt;
