//! [`CommunicatorBuilder`]: a communicator from explicit values.

use std::net::{IpAddr, SocketAddr};

use crate::comm::Communicator;
use crate::config::{default_host_id, DomainClaim, Identity, Options};
use crate::error::{Rank, Result};

/// Builds a communicator from explicit values (tests, embedding); see also
/// [`Communicator::from_env`].
#[derive(Debug, Clone)]
pub struct CommunicatorBuilder {
    id: Identity,
    opts: Options,
    host_store: bool,
}

impl CommunicatorBuilder {
    pub fn new(rank: Rank, world: usize) -> Self {
        CommunicatorBuilder {
            id: Identity {
                rank,
                world,
                local_rank: None,
                master_addr: "127.0.0.1".into(),
                master_port: 29500,
                domain: "default".into(),
                domain_claim: DomainClaim::default(),
                host_id: default_host_id(),
                listen_ip: None,
            },
            opts: Options::default(),
            host_store: true,
        }
    }

    /// Where rank 0's key-value store listens.
    pub fn master(mut self, addr: SocketAddr) -> Self {
        self.id.master_addr = addr.ip().to_string();
        self.id.master_port = addr.port();
        self
    }
    /// This rank's domain (as `CAUSEWAY_DOMAIN`). Either every rank names one
    /// or none does (then the job is one domain).
    pub fn domain(mut self, d: impl Into<String>) -> Self {
        self.id.domain = d.into();
        self.id.domain_claim.named = Some(self.id.domain.clone());
        self
    }
    pub fn host_id(mut self, h: impl Into<String>) -> Self {
        self.id.host_id = h.into();
        self
    }
    pub fn listen_ip(mut self, ip: IpAddr) -> Self {
        self.id.listen_ip = Some(ip);
        self
    }
    pub fn options(mut self, o: Options) -> Self {
        self.opts = o;
        self
    }
    /// The codec of payloads that cross domains when a call names none
    /// (as `CAUSEWAY_WAN_CODEC`).
    pub fn wan_codec(mut self, c: crate::codec::CodecSpec) -> Self {
        self.opts.wan_codec = c;
        self
    }
    /// This rank's address on each WAN path, in path order (as
    /// `CAUSEWAY_WAN_PATHS`): bulk chunks to other domains are striped over them.
    pub fn wan_paths(mut self, ips: Vec<std::net::IpAddr>) -> Self {
        self.opts.wan_paths = ips;
        self
    }
    /// Mutual TLS (as `CAUSEWAY_TLS*`).
    pub fn tls(mut self, t: crate::transport::tls_config::TlsSettings) -> Self {
        self.opts.tls = t;
        self
    }
    /// `false`: rank 0 does not start a store (one is already running at `master`).
    pub fn host_store(mut self, yes: bool) -> Self {
        self.host_store = yes;
        self
    }
    pub(crate) fn into_parts(self) -> (Identity, Options) {
        (self.id, self.opts)
    }
    pub fn build(self) -> Result<Communicator> {
        Communicator::start(self.id, self.opts, self.host_store)
    }
}
