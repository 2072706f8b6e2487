//! The [`Testbed`] API: build a multi-domain topology with emulated WAN paths,
//! run things inside its hosts, change paths while traffic flows, tear it all
//! down on drop (also when a test panics).

use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::emulator::{Dir, Emulator, EmulatorConfig, EmulatorError, EmulatorStats};
use crate::netns::{self, NetnsError};
use crate::params::{ParamsError, ParamsPatch};
use crate::profile::Profile;
use crate::sys;
use crate::topology::{Host, Path, Plan, PlanError};

/// Failures of the testbed.
#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    #[error("bad topology: {0}")]
    Plan(#[from] PlanError),
    #[error(transparent)]
    System(#[from] NetnsError),
    #[error("WAN path {path}: {source}")]
    Emulator { path: usize, source: EmulatorError },
    #[error("WAN path {path}: {source}")]
    Params { path: usize, source: ParamsError },
    #[error("no WAN path {0}")]
    NoPath(usize),
    #[error("this needs root (network namespaces and raw sockets)")]
    NotRoot,
}

/// Builder for a [`Testbed`].
#[derive(Debug, Clone)]
pub struct TestbedBuilder {
    domains: usize,
    hosts: usize,
    profile: Profile,
    tag: Option<String>,
    seed: u64,
    spin_ns: u64,
    spin_share: f64,
    realtime_priority: Option<i32>,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Tag prefix of testbeds made by process `pid`: `t{pid}x`.
fn owner_prefix(pid: u32) -> String {
    format!("t{pid}x")
}

impl TestbedBuilder {
    pub fn domains(mut self, n: usize) -> Self {
        self.domains = n;
        self
    }
    pub fn hosts_per_domain(mut self, n: usize) -> Self {
        self.hosts = n;
        self
    }
    pub fn wan(mut self, profile: Profile) -> Self {
        self.profile = profile;
        self
    }
    /// Explicit tag (default: unique per process and testbed, `t{pid}x{n}`).
    pub fn tag(mut self, tag: &str) -> Self {
        self.tag = Some(tag.to_string());
        self
    }
    /// Seed of the emulators' loss/jitter generators.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Wake this long before each departure and busy-wait up to it (default
    /// 200 µs; 0 = sleep on an hrtimer, which wakes tens of µs late).
    pub fn spin_us(mut self, us: u64) -> Self {
        self.spin_ns = us * 1000;
        self
    }
    /// Share of one core each emulator direction may spend spinning (default
    /// 0.05; 1.0 = unlimited).
    pub fn spin_share(mut self, share: f64) -> Self {
        self.spin_share = share;
        self
    }
    /// SCHED_FIFO priority of the emulator threads (default 10; None = normal).
    pub fn realtime_priority(mut self, prio: Option<i32>) -> Self {
        self.realtime_priority = prio;
        self
    }

    /// Create the namespaces, links, addresses and routes, and start one emulator
    /// per WAN path. On any error everything made so far is removed again.
    pub fn build(self) -> Result<Testbed, TestbedError> {
        if !sys::is_root() {
            return Err(TestbedError::NotRoot);
        }
        remove_orphans();
        let tag = self.tag.unwrap_or_else(|| {
            format!(
                "{}{}",
                owner_prefix(std::process::id()),
                NEXT.fetch_add(1, Ordering::Relaxed)
            )
        });
        let plan = Plan::new(&tag, self.domains, self.hosts, &self.profile.paths())?;
        // From here on, Drop cleans up whatever was made.
        let mut tb = Testbed {
            plan,
            emulators: Vec::new(),
        };
        netns::delete_prefix(&tb.plan.prefix)?; // leftovers of an earlier run with this tag
        crate::network::create(&tb.plan)?;
        for p in tb.plan.paths.clone() {
            let mut cfg = EmulatorConfig::new("ea", "eb", p.params);
            cfg.netns = Some(p.emulator_netns.clone());
            cfg.seed = self.seed.wrapping_add(p.index as u64);
            cfg.spin_ns = self.spin_ns;
            cfg.spin_share = self.spin_share;
            cfg.realtime_priority = self.realtime_priority;
            let em = Emulator::start(cfg).map_err(|source| TestbedError::Emulator {
                path: p.index,
                source,
            })?;
            tb.emulators.push(em);
        }
        Ok(tb)
    }
}

/// Remove testbeds left behind by processes of this program that died without
/// running their destructors (SIGKILL, abort).
fn remove_orphans() {
    let Ok(names) = netns::list() else { return };
    for name in names {
        let Some(rest) = name.strip_prefix("cw-t") else {
            continue;
        };
        let Some((pid, _)) = rest.split_once('x') else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if pid != std::process::id() && !sys::process_alive(pid as i32) {
            let _ = netns::delete(&name);
        }
    }
}

/// A running testbed. Dropping it stops the emulators and deletes every namespace.
pub struct Testbed {
    plan: Plan,
    emulators: Vec<Emulator>,
}

/// A process started in a host; killed when dropped.
pub struct NsChild {
    child: Option<Child>,
}

impl NsChild {
    /// The running process.
    pub fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("present until consumed")
    }

    /// Wait for the process to finish and collect its output.
    pub fn wait_output(mut self) -> std::io::Result<Output> {
        self.child
            .take()
            .expect("present until consumed")
            .wait_with_output()
    }
}

impl Drop for NsChild {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Testbed {
    pub fn builder() -> TestbedBuilder {
        TestbedBuilder {
            domains: 2,
            hosts: 2,
            profile: Profile::Wan40,
            tag: None,
            seed: 1,
            spin_ns: crate::emulator::DEFAULT_SPIN_NS,
            spin_share: crate::emulator::DEFAULT_SPIN_SHARE,
            realtime_priority: Some(10),
        }
    }

    pub fn tag(&self) -> &str {
        &self.plan.tag
    }
    pub fn plan(&self) -> &Plan {
        &self.plan
    }
    pub fn hosts(&self) -> &[Host] {
        &self.plan.hosts
    }
    pub fn paths(&self) -> &[Path] {
        &self.plan.paths
    }
    /// Host `index` of domain `domain`. Panics if it does not exist (a test bug).
    pub fn host(&self, domain: usize, index: usize) -> &Host {
        self.plan
            .hosts
            .iter()
            .find(|h| h.domain == domain && h.index == index)
            .unwrap_or_else(|| panic!("no host {index} in domain {domain}"))
    }
    /// The gateway namespace of `domain`.
    pub fn gateway_netns(&self, domain: usize) -> &str {
        &self.plan.gateways[domain]
    }

    fn ns_command(netns: &str, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", netns, program]).args(args);
        c
    }

    /// Run a program inside a host and wait for it (exit status not checked).
    pub fn run(&self, host: &Host, program: &str, args: &[&str]) -> std::io::Result<Output> {
        Self::ns_command(&host.netns, program, args).output()
    }

    /// Run a program inside a host; a non-zero exit is an error carrying its
    /// stderr. Returns its stdout.
    pub fn run_ok(
        &self,
        host: &Host,
        program: &str,
        args: &[&str],
    ) -> Result<String, TestbedError> {
        let out = netns::run_checked(&mut Self::ns_command(&host.netns, program, args))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Start a program inside a host (stdout/stderr piped, stdin closed).
    pub fn spawn(&self, host: &Host, program: &str, args: &[&str]) -> std::io::Result<NsChild> {
        let child = Self::ns_command(&host.netns, program, args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        Ok(NsChild { child: Some(child) })
    }

    /// Run a closure on a thread inside a host's network namespace.
    pub fn in_host<R: Send, F: FnOnce() -> R + Send>(
        &self,
        host: &Host,
        f: F,
    ) -> Result<R, NetnsError> {
        netns::in_netns(&host.netns, f)
    }

    /// Run a closure on a thread inside any namespace of the testbed (e.g. a gateway).
    pub fn in_netns<R: Send, F: FnOnce() -> R + Send>(
        &self,
        netns: &str,
        f: F,
    ) -> Result<R, NetnsError> {
        netns::in_netns(netns, f)
    }

    fn emulator(&self, path: usize) -> Result<&Emulator, TestbedError> {
        self.emulators.get(path).ok_or(TestbedError::NoPath(path))
    }

    /// Change a path's parameters in both directions while traffic flows.
    pub fn set_path(&self, path: usize, patch: &ParamsPatch) -> Result<(), TestbedError> {
        self.set_path_dir(path, Dir::Both, patch)
    }

    /// Change one direction of a path (`AToB` = from the lower domain to the higher).
    pub fn set_path_dir(
        &self,
        path: usize,
        dir: Dir,
        patch: &ParamsPatch,
    ) -> Result<(), TestbedError> {
        self.emulator(path)?
            .set(dir, patch)
            .map_err(|source| TestbedError::Params { path, source })
    }

    /// Cut a path: every frame is dropped in both directions until restored.
    pub fn cut_path(&self, path: usize) -> Result<(), TestbedError> {
        self.set_path(
            path,
            &ParamsPatch {
                up: Some(false),
                ..Default::default()
            },
        )
    }

    pub fn restore_path(&self, path: usize) -> Result<(), TestbedError> {
        self.set_path(
            path,
            &ParamsPatch {
                up: Some(true),
                ..Default::default()
            },
        )
    }

    /// Parameters and counters of a path's emulator.
    pub fn path_stats(&self, path: usize) -> Result<EmulatorStats, TestbedError> {
        Ok(self.emulator(path)?.stats())
    }

    /// Tear down now and report the first error (Drop does the same, silently).
    pub fn teardown(mut self) -> Result<(), TestbedError> {
        self.emulators.clear();
        netns::delete_prefix(&self.plan.prefix)?;
        Ok(())
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        self.emulators.clear();
        if let Err(e) = netns::delete_prefix(&self.plan.prefix) {
            eprintln!(
                "causeway-netsim: tearing down testbed {}: {e}",
                self.plan.tag
            );
        }
    }
}
