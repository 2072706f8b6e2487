//! Observability: the agent's Prometheus metrics scraped by a real server.

mod prometheus;
