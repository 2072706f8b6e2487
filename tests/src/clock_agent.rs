//! A `causeway agent` process run by a test: started with a generated
//! configuration in a network namespace; on drop it is stopped (SIGTERM)
//! and its interface detached, so no pins outlive the test.

use std::{
    net::IpAddr,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use causeway::{
    agent::{
        control::{self, Request},
        report::AgentReport,
    },
    clock::SyncClock,
    datapath::{Layout, NetnsScope},
};

use crate::causeway_cli::causeway_bin;

pub struct Agent {
    child: Option<Child>,
    pub netns: String,
    pub iface: String,
    config: PathBuf,
}

impl Agent {
    /// Starts an agent in `netns` owning `iface`, probing `peer` every
    /// 100 ms, with the synthetic clock `clock`.
    pub fn start(netns: &str, iface: &str, host_id: u32, peer: IpAddr, clock: SyncClock) -> Agent {
        let config =
            std::env::temp_dir().join(format!("cw-clock-{}-{netns}.toml", std::process::id()));
        let text = format!(
            "host_id = {host_id}\n[[interfaces]]\nname = \"{iface}\"\n[clock]\ninterval_ms = 100\n\
             [[clock.peers]]\nname = \"peer\"\naddr = \"{peer}:7339\"\n\
             [clock.synthetic]\noffset_ns = {}\ndrift_ppb = {}\nepoch_ns = {}\n",
            clock.offset_ns, clock.drift_ppb, clock.epoch_ns
        );
        std::fs::write(&config, text).expect("write the agent config");
        let mut agent = Agent {
            child: None,
            netns: netns.to_string(),
            iface: iface.to_string(),
            config,
        };
        agent.spawn();
        agent
    }

    fn spawn(&mut self) {
        let child = Command::new(causeway_bin())
            .args(["--netns", &self.netns, "agent", "--config"])
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start causeway agent");
        self.child = Some(child);
    }

    /// Stops the process with SIGTERM and waits; pins and programs stay.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("agent is running");
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        c.wait().expect("wait for the agent")
    }

    /// Starts the process again with the same configuration.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop the agent first");
        self.spawn();
    }

    pub fn socket(&self) -> PathBuf {
        causeway::agent::default_socket(&Layout::default(), &NetnsScope::Named(self.netns.clone()))
    }

    pub fn status(&self) -> Option<AgentReport> {
        control::request(&self.socket(), &Request::ClockStatus)
            .ok()?
            .clock
    }

    /// Waits until the control socket answers.
    pub fn wait_ready(&self) -> AgentReport {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(r) = self.status() {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "agent in {} did not come up",
                self.netns
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.stop();
        }
        let _ = Command::new(causeway_bin())
            .args(["--netns", &self.netns, "detach", "--iface", &self.iface])
            .output();
        let _ = std::fs::remove_file(&self.config);
    }
}
