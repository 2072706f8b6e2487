//! Observability: the agent's and the collective library's Prometheus
//! metrics scraped by a real server, and `causeway top` driven in tmux.

mod library;
mod prometheus;
mod top;

/// Both tests' policy: the clock probes (UDP 7339 either way) in a shaped class.
const POLICY: &str = r#"
[shaping]
link_rate = "1gbit"

[[class]]
id = 0
name = "default"

[[class]]
id = 4
name = "clock"
shaping = { rate = "10mbit", ceil = "20mbit", over_limit = "drop" }

[[rule]]
priority = 10
protocol = "udp"
dst_port = 7339
class = "clock"

[[rule]]
priority = 11
protocol = "udp"
src_port = 7339
class = "clock"
"#;
