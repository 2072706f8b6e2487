//! Observability: the agent's Prometheus metrics scraped by a real
//! server, and `causeway top` driven in tmux.

mod prometheus;
mod top;
