//! TC egress shaping with HTB on a veth.

mod htb;
mod isolation;
mod live;
mod policer_matrix;
mod rate;
