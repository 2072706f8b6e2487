//! Rendezvous through the key-value store: claim a rank, agree on the world and
//! a session id, publish where we listen, learn everyone else's address and labels.

use std::net::{IpAddr, SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::agree::{self, Entry};
use crate::config::{Identity, Options};
use crate::error::{CollectiveError, ConfigError, Rank, Result, StoreError};
use crate::setup;
use crate::store::{StoreClient, StoreServer};
use crate::topology::Topology;
use crate::transport::tagging;
use crate::transport::tcp::{self, TcpTuning};
use crate::transport::tls_config::{self, TlsContext};

/// Everything the mesh needs, learned from the store.
pub(crate) struct Joined {
    pub session: u64,
    pub topology: Topology,
    pub host_ids: Vec<String>,
    pub domains: Vec<String>,
    pub addrs: Vec<SocketAddr>,
    /// Each rank's RDMA status from its entry (`ok`, why not, or nothing).
    pub rdma: Vec<Option<String>>,
    pub listener: TcpListener,
    /// Each rank's address per WAN path (empty: one path; `crate::stripe`).
    pub paths: Vec<Vec<IpAddr>>,
    /// This rank's TLS identity, when `CAUSEWAY_TLS` is not `off`.
    pub tls: Option<Arc<TlsContext>>,
    /// Copies of this rank's bulk WAN connections with the WAN path each
    /// uses (0 when not striped), filled by the mesh: the WAN estimates of
    /// each path read them and pace them (`estimates::paths`).
    pub wan_bulk: std::sync::Mutex<Vec<(usize, std::net::TcpStream)>>,
}

/// The bootstrap store: this rank's connection, and the server when this rank hosts it.
pub(crate) struct Bootstrap {
    pub store: StoreClient,
    pub server: Option<StoreServer>,
}

impl Bootstrap {
    /// Set-up failed on this rank with `e`: see [`setup::give_up`].
    pub fn give_up(&mut self, me: Rank, world: usize, e: &CollectiveError) {
        setup::give_up(&mut self.store, me, world, self.server.as_ref(), e);
    }
}

pub(crate) fn resolve(host: &str, port: u16) -> Result<SocketAddr> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| ConfigError::InvalidVar {
            name: "MASTER_ADDR".into(),
            value: host.into(),
            reason: format!("cannot resolve: {e}"),
        })?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| {
            ConfigError::InvalidVar {
                name: "MASTER_ADDR".into(),
                value: host.into(),
                reason: "no address".into(),
            }
            .into()
        })
}

/// Runs the rendezvous. `host_store`: rank 0 serves the store itself.
/// Every error after this rank registered reaches the other ranks (see [`setup`]).
pub(crate) fn join(id: &Identity, opts: &Options, host_store: bool) -> Result<(Joined, Bootstrap)> {
    let master = resolve(&id.master_addr, id.master_port)?;
    let deadline = Instant::now() + opts.rendezvous_timeout;
    let tls = opts.tls.load()?;
    if tls.is_some() {
        // Our own certificate's name must be expressible: fail before joining.
        tls_config::peer_name(&id.domain, &id.host_id)?;
    }
    let server = if id.rank == 0 && host_store {
        Some(StoreServer::bind_tls(master, tls.clone())?)
    } else {
        None
    };
    let mut store = StoreClient::connect_tls(master, opts.rendezvous_timeout, tls.as_ref())?;
    let ip: IpAddr = match id.listen_ip {
        Some(ip) => ip,
        None => store
            .local_addr()
            .map(|a| a.ip())
            .ok_or_else(|| CollectiveError::Rendezvous("no local address".into()))?,
    };
    let tuning = opts
        .wan_socket_buffer
        .map(TcpTuning::for_long_fat_pipes)
        .unwrap_or(TcpTuning {
            socket_buffer: None,
        });
    // With several WAN paths, peers dial this rank's address on each path.
    let bind_ip = crate::stripe::listen_ip(ip, &opts.wan_paths);
    let listener = tagging::listen_in(bind_ip, opts.ports, |a| tcp::listen(a, tuning))
        .map_err(|e| CollectiveError::io(format!("listen on {bind_ip}"), e))?;
    if opts.wan_latency_stream {
        // Accepted latency connections must start with it (see `mesh::tune`);
        // the others are switched to theirs right after the accept.
        tcp::prefer_congestion(socket2::SockRef::from(&listener), &tcp::LATENCY_CONGESTION);
    }
    let me = listener
        .local_addr()
        .map(|a| std::net::SocketAddr::new(ip, a.port()))
        .map_err(|e| CollectiveError::io("listener address", e))?;

    let claimed = match store.add(&format!("claim/{}", id.rank), 1) {
        // With TLS: another certificate claimed this rank first.
        Err(StoreError::Refused { .. }) => 2,
        r => r?,
    };
    if claimed > 1 {
        store.set("error", format!("dup {}", id.rank).as_bytes())?;
        return Err(CollectiveError::DuplicateRank { rank: id.rank });
    }
    if id.rank == 0 {
        store.set("world", id.world.to_string().as_bytes())?;
        store.set(
            "session",
            format!("{:016x}", rand::random::<u64>()).as_bytes(),
        )?;
    }
    let left = || deadline.saturating_duration_since(Instant::now());
    let world = String::from_utf8_lossy(&store.get("world", left())?).into_owned();
    if world != id.world.to_string() {
        store.set(
            "error",
            format!("world {} {} {}", id.rank, id.world, world).as_bytes(),
        )?;
        return Err(CollectiveError::Inconsistent {
            rank: id.rank,
            what: "WORLD_SIZE",
            expected: world,
            got: id.world.to_string(),
        });
    }
    let session = u64::from_str_radix(&String::from_utf8_lossy(&store.get("session", left())?), 16)
        .map_err(|_| StoreError::Protocol("session id is not hex".into()))?;
    let path = id.domain_claim.file.as_ref().map(|(p, _)| p);
    for (what, v) in [("domain", Some(&id.domain)), ("host", Some(&id.host_id))]
        .into_iter()
        .chain([("topology file", path)])
    {
        if v.is_some_and(|v| v.is_empty() || v.contains('\n')) {
            return Err(ConfigError::Invalid(format!(
                "{what} label {v:?} must be non-empty, one line"
            ))
            .into());
        }
    }
    let entry = Entry::new(me, id, opts, crate::mesh_rdma::status(opts, me.ip()));
    setup::will(&mut store, id.rank)?;
    store.set(&format!("rank/{}", id.rank), entry.encode().as_bytes())?;
    let mut boot = Bootstrap { store, server };
    let (entries, domains) = match learn(id, opts, &mut boot.store, deadline) {
        Ok(v) => v,
        Err(e) => {
            boot.give_up(id.rank, id.world, &e);
            return Err(e);
        }
    };
    let labels: Vec<(String, String)> = entries
        .iter()
        .zip(&domains)
        .map(|(e, d)| (d.clone(), e.host.clone()))
        .collect();
    let domain_count = {
        let mut d: Vec<&String> = domains.iter().collect();
        d.sort();
        d.dedup();
        d.len()
    };
    if tls.is_none() && domain_count > 1 && id.rank == 0 {
        tracing::warn!(
            domains = domain_count,
            "RUNNING WITHOUT TLS ACROSS {domain_count} DOMAINS: anyone on the path can read and forge tensors and rendezvous keys; set CAUSEWAY_TLS_CERT, CAUSEWAY_TLS_KEY, CAUSEWAY_TLS_CA (made with `causeway certs`)"
        );
    } else if tls.is_none() && domain_count > 1 {
        tracing::warn!("running without TLS across {domain_count} domains");
    }
    let mut joined = Joined {
        session,
        topology: Topology::from_labels(&labels),
        host_ids: entries.iter().map(|e| e.host.clone()).collect(),
        domains,
        addrs: entries.iter().map(|e| e.addr).collect(),
        rdma: entries.iter().map(|e| e.rdma.clone()).collect(),
        listener,
        paths: Vec::new(),
        tls,
        wan_bulk: Default::default(),
    };
    if !opts.wan_paths.is_empty() {
        let t = &joined.topology;
        let wanted = |q| t.class(id.rank, q) == crate::topology::LinkClass::InterDomain;
        let (s, r, w) = (session, id.rank, id.world);
        match crate::stripe::exchange(&mut boot.store, s, r, w, &opts.wan_paths, wanted, left()) {
            Ok(p) => joined.paths = p,
            Err(e) => {
                boot.give_up(id.rank, id.world, &e);
                return Err(e);
            }
        }
    }
    Ok((joined, boot))
}

/// Everyone's registration, once all ranks registered and agree (domains, wire options).
fn learn(
    id: &Identity,
    opts: &Options,
    store: &mut StoreClient,
    deadline: Instant,
) -> Result<(Vec<Entry>, Vec<String>)> {
    let mut entries: Vec<Option<Entry>> = vec![None; id.world];
    loop {
        for (q, e) in entries.iter_mut().enumerate().filter(|(_, e)| e.is_none()) {
            match store.get(&format!("rank/{q}"), Duration::from_millis(20)) {
                Ok(v) => *e = Some(Entry::parse(q, &v)?),
                Err(StoreError::Timeout { .. }) => {}
                Err(err) => return Err(err.into()),
            }
        }
        if entries.iter().all(Option::is_some) {
            break;
        }
        if let Ok(e) = store.get("error", Duration::ZERO) {
            return Err(remote_error(&String::from_utf8_lossy(&e)));
        }
        setup::check(store)?;
        if Instant::now() >= deadline {
            let missing: Vec<Rank> = entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.is_none())
                .map(|(q, _)| q)
                .collect();
            return Err(CollectiveError::RendezvousTimeout {
                missing,
                stage: "join",
                after: opts.rendezvous_timeout,
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let entries: Vec<Entry> = entries.into_iter().flatten().collect();
    // Every rank runs the same checks on the same entries: all fail alike.
    let claims: Vec<_> = entries.iter().map(|e| &e.claim).collect();
    let domains = agree::domains(&claims)?;
    agree::wire_options(&entries.iter().map(|e| &e.wire[..]).collect::<Vec<_>>())?;
    if id.rank == 0 && id.world > 1 && claims.iter().all(|c| *c == &Default::default()) {
        tracing::info!("no rank set CAUSEWAY_DOMAIN or CAUSEWAY_TOPOLOGY: one domain, \"default\"");
    }
    Ok((entries, domains))
}

/// Turns the `error` key another rank left into the same typed error it returned.
fn remote_error(s: &str) -> CollectiveError {
    let f: Vec<&str> = s.split(' ').collect();
    match f.as_slice() {
        ["dup", r] => match r.parse() {
            Ok(rank) => CollectiveError::DuplicateRank { rank },
            Err(_) => CollectiveError::Rendezvous(s.into()),
        },
        ["world", r, got, expected] => match r.parse() {
            Ok(rank) => CollectiveError::Inconsistent {
                rank,
                what: "WORLD_SIZE",
                expected: expected.to_string(),
                got: got.to_string(),
            },
            Err(_) => CollectiveError::Rendezvous(s.into()),
        },
        _ => CollectiveError::Rendezvous(format!("another rank failed: {s}")),
    }
}
