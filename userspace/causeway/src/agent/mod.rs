//! `causeway agent`: the per-host daemon. It owns (attaches, or adopts when
//! already pinned) the XDP and TC programs of its interfaces, configures the
//! kernel clock stamps, runs clock sync with its peers, publishes each
//! peer's estimate in the pinned `CW_CLK_PEERS` map of every interface, and
//! serves the local control socket. SIGTERM or SIGINT stop it cleanly; the
//! programs stay attached (pinned) so that a restart adopts them.

pub mod config;
pub mod control;
pub mod metrics;
pub mod metrics_http;
pub mod observe;
mod probe_keys;
pub mod report;
pub mod steering;

use std::path::PathBuf;

use tokio::{
    signal::unix::{signal, SignalKind},
    sync::watch,
    task::{JoinHandle, JoinSet},
};

use crate::{
    clock::{maps::ClockMaps, Session, SessionConfig, SessionError, SessionStatus},
    datapath::{Datapath, DatapathError, FaultPlan, Layout, NetnsScope},
    kernel_log,
};
pub use config::AgentConfig;
use report::{peer_clock, AgentReport, IfaceReport};

/// Why the agent stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("interface {iface}: {source}")]
    Datapath {
        iface: String,
        #[source]
        source: Box<DatapathError>,
    },
    #[error("interface {iface}: {source}")]
    Attach {
        iface: String,
        #[source]
        source: Box<crate::datapath::ApplyError>,
    },
    #[error("{0}")]
    Lock(#[source] Box<DatapathError>),
    #[error("interface {iface}: clock maps: {source}")]
    ClockMaps {
        iface: String,
        #[source]
        source: Box<crate::clock::maps::ClockMapsError>,
    },
    #[error("clock session: {0}")]
    Session(#[from] SessionError),
    #[error(transparent)]
    Steering(#[from] steering::SteeringError),
    #[error("control socket: {0}")]
    Control(#[from] control::ControlError),
    #[error("metrics address {addr}: {source}")]
    Metrics {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("installing the signal handlers: {0}")]
    Signal(#[source] std::io::Error),
    #[error("the clock session task failed: {0}")]
    Task(String),
}

/// The control socket of the agent of `scope`, unless configured.
pub fn default_socket(layout: &Layout, scope: &NetnsScope) -> PathBuf {
    layout.state_root.join(scope.dir_name()).join("agent.sock")
}

struct Owned {
    report: IfaceReport,
    maps: ClockMaps,
    /// The XDP program, whose log buffer the agent reads.
    prog_id: u32,
}

/// Attaches or adopts every configured interface and configures its
/// kernel stamps. Holds the state lock while it changes attachments.
fn own_interfaces(
    cfg: &AgentConfig,
    layout: &Layout,
    scope: &NetnsScope,
) -> Result<Vec<Owned>, AgentError> {
    if cfg.interfaces.is_empty() {
        return Ok(Vec::new());
    }
    let datapath = Datapath::new(layout.clone(), scope.clone());
    let locked = datapath.lock().map_err(|e| AgentError::Lock(Box::new(e)))?;
    let mut owned = Vec::new();
    for i in &cfg.interfaces {
        let err = |source: DatapathError| AgentError::Datapath {
            iface: i.name.clone(),
            source: Box::new(source),
        };
        let xdp = locked
            .attach(&i.name, i.mode, None, &FaultPlan::NONE)
            .map_err(|source| AgentError::Attach {
                iface: i.name.clone(),
                source: Box::new(source),
            })?
            .attached;
        let paths = layout.iface(scope, &i.name).map_err(err)?;
        let tc = locked.ensure_tc(&i.name, xdp.ifindex).map_err(err)?;
        let maps_err = |source| AgentError::ClockMaps {
            iface: i.name.clone(),
            source: Box::new(source),
        };
        let mut maps = ClockMaps::from_pins(&paths.maps_dir).map_err(maps_err)?;
        let port = if cfg.kernel_stamps {
            cfg.bind.port()
        } else {
            0
        };
        maps.set_config(&cfg.clock.stamp_config(port))
            .map_err(maps_err)?;
        restrict_clock_map(&paths.maps_dir, cfg.clock_map_group).map_err(err)?;
        tracing::info!(
            iface = %i.name, xdp_link = xdp.link_id, xdp_adopted = xdp.adopted,
            tc_link = tc.link_id, tc_adopted = tc.adopted, kernel_stamps = cfg.kernel_stamps,
            "interface owned"
        );
        owned.push(Owned {
            report: IfaceReport::new(&i.name, xdp.ifindex, xdp.link_id, xdp.adopted, tc),
            maps,
            prog_id: xdp.prog_id,
        });
    }
    Ok(owned)
}

/// Gives the pinned peer-clock map an explicit mode: 0600 (root only), or
/// 0640 with `group`, whose members may then open it read-only (readers
/// also need CAP_BPF while `kernel.unprivileged_bpf_disabled` is set).
fn restrict_clock_map(maps_dir: &std::path::Path, group: Option<u32>) -> Result<(), DatapathError> {
    use std::os::unix::fs::PermissionsExt;
    let pin = maps_dir.join(bpf_maps::clock::MAP_CLOCK_PEERS);
    let io = |what| {
        let pin = pin.clone();
        move |source| DatapathError::Io {
            what,
            path: pin,
            source,
        }
    };
    std::os::unix::fs::chown(&pin, None, Some(group.unwrap_or(0)))
        .map_err(io("set the group of"))?;
    let mode = if group.is_some() { 0o640 } else { 0o600 };
    std::fs::set_permissions(&pin, std::fs::Permissions::from_mode(mode))
        .map_err(io("set the mode of"))
}

/// Runs the agent until SIGTERM/SIGINT.
pub async fn run(cfg: AgentConfig, layout: Layout, scope: NetnsScope) -> Result<(), AgentError> {
    let mut owned = own_interfaces(&cfg, &layout, &scope)?;
    let log_tasks = follow_kernel_logs(&owned);
    let kernel_stamps = cfg.kernel_stamps && !owned.is_empty();
    let session = Session::new(SessionConfig {
        host_id: cfg.host_id,
        bind: cfg.bind,
        peers: cfg.peers.clone(),
        interval: cfg.interval,
        fast_start: cfg.fast_start,
        burst: cfg.burst,
        timeout: cfg.interval.max(std::time::Duration::from_millis(500)) * 4,
        estimator: cfg.estimator.clone(),
        clock: cfg.clock,
        zero_checksum: kernel_stamps,
    })?;
    let socket = cfg
        .control_socket
        .clone()
        .unwrap_or_else(|| default_socket(&layout, &scope));
    let listener = control::bind(&socket, cfg.control_group)?;
    let metrics_listener = match cfg.metrics {
        Some(addr) => Some(
            metrics_http::bind(addr)
                .await
                .map_err(|source| AgentError::Metrics { addr, source })?,
        ),
        None => None,
    };
    let steering_stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let steering_task = match &cfg.steering {
        Some(s) => Some(steering::start(s, &layout, &scope, steering_stop.clone())?),
        None => None,
    };
    let mut sigterm = signal(SignalKind::terminate()).map_err(AgentError::Signal)?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(AgentError::Signal)?;

    let (status_tx, mut status_rx) = watch::channel(SessionStatus::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut session_task: JoinHandle<Result<(), SessionError>> =
        tokio::spawn(session.run(status_tx, stop_rx.clone()));
    let mut report = AgentReport {
        host_id: cfg.host_id,
        scope: scope.to_string(),
        kernel_stamps,
        interfaces: owned.iter().map(|o| o.report.clone()).collect(),
        wan_paths: cfg.library_wan_paths.clone(),
        ..AgentReport::default()
    };
    let (report_tx, report_rx) = watch::channel(report.clone());
    let metrics_task = match metrics_listener {
        Some(listener) => {
            let source = metrics_http::Source {
                layout: layout.clone(),
                scope: scope.clone(),
                ifaces: cfg.interfaces.iter().map(|i| i.name.clone()).collect(),
                report: report_rx.clone(),
            };
            tracing::info!(addr = ?listener.local_addr().ok(), "serving /metrics");
            Some(tokio::spawn(metrics_http::serve(
                listener,
                source,
                stop_rx.clone(),
            )))
        }
        None => None,
    };
    let control_task = tokio::spawn(control::serve(
        listener,
        cfg.control_group,
        report_rx,
        stop_rx,
    ));
    tracing::info!(socket = %socket.display(), peers = cfg.peers.len(), "agent running");

    let mut publish = tokio::time::interval(std::time::Duration::from_millis(100));
    let outcome = loop {
        tokio::select! {
            _ = sigterm.recv() => break Ok(()),
            _ = sigint.recv() => break Ok(()),
            done = &mut session_task => {
                break Err(match done {
                    Ok(Err(e)) => AgentError::Session(e),
                    Ok(Ok(())) => AgentError::Task("stopped on its own".into()),
                    Err(e) => AgentError::Task(e.to_string()),
                });
            }
            _ = publish.tick() => {
                report.session = status_rx.borrow_and_update().clone();
                publish_estimates(&mut owned, &mut report);
                report_tx.send_replace(report.clone());
            }
        }
    };
    let _ = stop_tx.send(true);
    steering_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(t) = steering_task {
        match tokio::task::spawn_blocking(move || t.join()).await {
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "the path-steering controller failed"),
            Ok(Err(_)) | Err(_) => tracing::warn!("the path-steering controller panicked"),
            Ok(Ok(Ok(()))) => {}
        }
    }
    if !session_task.is_finished() {
        let _ = session_task.await;
    }
    let _ = control_task.await;
    if let Some(t) = metrics_task {
        let _ = t.await;
    }
    drop(log_tasks); // a dropped JoinSet aborts its tasks
    let _ = std::fs::remove_file(&socket);
    tracing::info!("agent stopped; programs stay attached and pinned");
    outcome
}

/// Prints the log records of every owned interface's programs as tracing
/// events (target `causeway::ebpf`); `causeway log --on` switches them on.
fn follow_kernel_logs(owned: &[Owned]) -> JoinSet<()> {
    let mut tasks = JoinSet::new();
    for o in owned {
        let iface = o.report.name.clone();
        let reader = kernel_log::Reader::open(o.prog_id, &iface, |line| {
            tracing::info!(target: "causeway::ebpf", iface = %line.iface, level = line.level, "{}", line.message);
        });
        match reader {
            Ok(reader) => {
                tasks.spawn(async move {
                    if let Err(e) = reader.follow().await {
                        tracing::warn!(iface = %iface, error = %e, "stopped reading the eBPF log");
                    }
                });
            }
            Err(e) => tracing::warn!(iface = %iface, error = %e, "cannot read the eBPF log"),
        }
    }
    tasks
}

/// Writes every peer's selected estimate into each interface's peer map
/// and refreshes the stamp counters.
fn publish_estimates(owned: &mut [Owned], report: &mut AgentReport) {
    for (o, r) in owned.iter_mut().zip(report.interfaces.iter_mut()) {
        if let Ok(c) = o.maps.counters() {
            (r.stamps_rx, r.stamps_tx, r.stamps_skipped) = (c.rx_stamped, c.tx_stamped, c.skipped);
        }
    }
    for peer in &report.session.peers {
        let Some(sel) = &peer.selected else { continue };
        report.published += 1;
        let value = peer_clock(sel, report.published);
        for o in owned.iter_mut() {
            if let Err(e) = o.maps.publish(peer.addr.ip(), &value) {
                tracing::warn!(peer = %peer.name, error = %e, "cannot publish the clock estimate");
            }
        }
    }
}
