//! Rendezvous through the key-value store: claim a rank, agree on the world and
//! a session id, publish where we listen, learn everyone else's address and labels.

use std::net::{IpAddr, SocketAddr, TcpListener, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::config::{Identity, Options};
use crate::error::{CollectiveError, ConfigError, Rank, Result, StoreError};
use crate::store::{StoreClient, StoreServer};
use crate::topology::Topology;
use crate::transport::tcp::{self, TcpTuning};

/// Everything the mesh needs, learned from the store.
pub(crate) struct Joined {
    pub session: u64,
    pub topology: Topology,
    pub host_ids: Vec<String>,
    pub domains: Vec<String>,
    pub addrs: Vec<SocketAddr>,
    pub listener: TcpListener,
    pub store: StoreClient,
    pub server: Option<StoreServer>,
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
pub(crate) fn join(id: &Identity, opts: &Options, host_store: bool) -> Result<Joined> {
    let master = resolve(&id.master_addr, id.master_port)?;
    let deadline = Instant::now() + opts.rendezvous_timeout;
    let server = if id.rank == 0 && host_store {
        Some(StoreServer::bind(master)?)
    } else {
        None
    };
    let mut store = StoreClient::connect(master, opts.rendezvous_timeout)?;
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
    let listener = tcp::listen(SocketAddr::new(ip, 0), tuning)
        .map_err(|e| CollectiveError::io(format!("listen on {ip}"), e))?;
    if opts.wan_latency_stream {
        // Accepted latency connections must start with it (see `mesh::tune`);
        // the others are switched to theirs right after the accept.
        tcp::prefer_congestion(socket2::SockRef::from(&listener), &tcp::LATENCY_CONGESTION);
    }
    let me = listener
        .local_addr()
        .map_err(|e| CollectiveError::io("listener address", e))?;

    if store.add(&format!("claim/{}", id.rank), 1)? > 1 {
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
    for (what, v) in [("domain", &id.domain), ("host", &id.host_id)] {
        if v.is_empty() || v.contains('\n') {
            return Err(ConfigError::Invalid(format!(
                "{what} label {v:?} must be non-empty, one line"
            ))
            .into());
        }
    }
    store.set(
        &format!("rank/{}", id.rank),
        format!("{me}\n{}\n{}", id.domain, id.host_id).as_bytes(),
    )?;

    let mut entries: Vec<Option<(SocketAddr, String, String)>> = vec![None; id.world];
    loop {
        for (q, e) in entries.iter_mut().enumerate().filter(|(_, e)| e.is_none()) {
            match store.get(&format!("rank/{q}"), Duration::from_millis(20)) {
                Ok(v) => *e = Some(parse_entry(q, &v)?),
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
    let entries: Vec<(SocketAddr, String, String)> = entries.into_iter().flatten().collect();
    let labels: Vec<(String, String)> = entries
        .iter()
        .map(|(_, d, h)| (d.clone(), h.clone()))
        .collect();
    Ok(Joined {
        session,
        topology: Topology::from_labels(&labels),
        host_ids: entries.iter().map(|e| e.2.clone()).collect(),
        domains: entries.iter().map(|e| e.1.clone()).collect(),
        addrs: entries.iter().map(|e| e.0).collect(),
        listener,
        store,
        server,
    })
}

fn parse_entry(q: Rank, v: &[u8]) -> Result<(SocketAddr, String, String)> {
    let bad = || StoreError::Protocol(format!("bad entry for rank {q}"));
    let s = std::str::from_utf8(v).map_err(|_| bad())?;
    let mut it = s.split('\n');
    let addr = it.next().and_then(|a| a.parse().ok()).ok_or_else(bad)?;
    let domain = it.next().ok_or_else(bad)?.to_string();
    let host = it.next().ok_or_else(bad)?.to_string();
    Ok((addr, domain, host))
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
