//! Two `chronyd -x` processes in two network namespaces, each with its own
//! generated configuration, command socket, logs and drift file in one
//! private temporary directory; all stopped and removed on drop (also
//! while a panic unwinds).

use std::{
    fs::{self, DirBuilder, File},
    net::Ipv4Addr,
    os::unix::{fs::DirBuilderExt, process::CommandExt},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::atomic::{AtomicU32, Ordering},
    time::{Duration, Instant},
};

use nix::{
    sys::{prctl, signal},
    unistd::Pid,
};

use super::{
    programs::Programs,
    tracking::{parse_tracking_csv, LogSummary, Tracking},
    ChronyError,
};

/// Where the two daemons run.
#[derive(Debug, Clone)]
pub struct PairSpec<'a> {
    pub server_netns: &'a str,
    pub server_ip: Ipv4Addr,
    pub client_netns: &'a str,
    /// Frequency error the client's virtual clock starts with (seeded
    /// through its drift file with no confidence in it, so chrony trusts
    /// its first measurement as much as it would without a drift file).
    pub client_freq_error_ppm: f64,
}

/// One error sample: the client's cooked clock minus the server's.
#[derive(Debug, Clone, Copy)]
pub struct ErrorSample {
    pub error_ns: f64,
    /// chrony's own maximum error: root delay / 2 + root dispersion.
    pub bound_ns: f64,
    pub synchronised: bool,
}

impl ErrorSample {
    pub fn between(client: &Tracking, server: &Tracking) -> ErrorSample {
        ErrorSample {
            error_ns: (client.correction_s - server.correction_s) * 1e9,
            bound_ns: client.max_error_s() * 1e9,
            synchronised: client.synchronised() && server.synchronised(),
        }
    }
}

/// A chronyd serving in one namespace and one synchronising to it in another.
pub struct ChronyPair {
    // Fields drop in order: both daemons stop before the directory goes.
    client: Daemon,
    server: Daemon,
    chronyc: PathBuf,
    dir: PrivateDir,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl ChronyPair {
    /// Starts the server, then the client, and waits until both answer
    /// chronyc on their own sockets.
    pub fn start(programs: &Programs, spec: &PairSpec) -> Result<ChronyPair, ChronyError> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = PrivateDir::create(
            std::env::temp_dir().join(format!("cw-chrony-{}x{n}", std::process::id())),
        )?;
        let (server_dir, client_dir) = (dir.sub("server")?, dir.sub("client")?);
        let server = Daemon::start(
            programs,
            spec.server_netns,
            &server_dir,
            &server_conf(&server_dir, spec.server_ip),
        )?;
        fs::write(
            client_dir.join("drift"),
            format!("{:.3} 1000000.000\n", spec.client_freq_error_ppm),
        )
        .map_err(|e| ChronyError::io("write the client drift file", e))?;
        let client = Daemon::start(
            programs,
            spec.client_netns,
            &client_dir,
            &client_conf(&client_dir, spec.server_ip),
        )?;
        Ok(ChronyPair {
            client,
            server,
            chronyc: programs.chronyc.clone(),
            dir,
        })
    }

    pub fn client_tracking(&self) -> Result<Tracking, ChronyError> {
        tracking(&self.chronyc, &self.client.dir)
    }

    pub fn server_tracking(&self) -> Result<Tracking, ChronyError> {
        tracking(&self.chronyc, &self.server.dir)
    }

    /// The error of chrony's time now. Both namespaces read the one host
    /// clock, so the true offset between the two hosts is 0.
    pub fn error_sample(&self) -> Result<ErrorSample, ChronyError> {
        let client = self.client_tracking()?;
        let server = self.server_tracking()?;
        Ok(ErrorSample::between(&client, &server))
    }

    /// What the client logged about its NTP measurements and regression.
    pub fn client_log(&self) -> Result<LogSummary, ChronyError> {
        let read = |name: &str| {
            let path = self.client.dir.join(name);
            fs::read_to_string(&path)
                .map_err(|e| ChronyError::io(format!("read {}", path.display()), e))
        };
        Ok(
            LogSummary::from_measurements_log(&read("measurements.log")?)
                .with_statistics_log(&read("statistics.log")?),
        )
    }

    /// Process ids of the server and the client chronyd.
    pub fn pids(&self) -> [Option<u32>; 2] {
        [&self.server, &self.client].map(|d| d.child.as_ref().map(Child::id))
    }

    /// The private directory holding configurations, sockets and logs.
    pub fn dir(&self) -> &Path {
        &self.dir.0
    }
}

fn server_conf(dir: &Path, ip: Ipv4Addr) -> String {
    let d = dir.display();
    format!(
        "# chronyd -x: serves its (free-running) clock, adjusts nothing\n\
         local stratum 1\nallow 10.0.0.0/8\nbindaddress {ip}\n{}",
        common_conf(&d.to_string())
    )
}

fn client_conf(dir: &Path, server: Ipv4Addr) -> String {
    let d = dir.display();
    // chrony polls below 1 s only when the delay is under 10 ms
    // (ntp_core.c, MAX_LAN_PEER_DELAY): on a WAN path it polls every 1 s.
    format!(
        "# chronyd -x: disciplines its virtual clock only\n\
         server {server} iburst minpoll -4 maxpoll -4 xleave\nport 0\n\
         logdir {d}\nlog measurements statistics tracking\n{}",
        common_conf(&d.to_string())
    )
}

fn common_conf(d: &str) -> String {
    format!(
        "pidfile {d}/chronyd.pid\nbindcmdaddress {d}/chronyd.sock\ncmdport 0\n\
         driftfile {d}/drift\nuser root\n"
    )
}

fn tracking(chronyc: &Path, dir: &Path) -> Result<Tracking, ChronyError> {
    let socket = dir.join("chronyd.sock");
    let out = Command::new(chronyc)
        .args(["-n", "-c", "-h"])
        .arg(&socket)
        .arg("tracking")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| ChronyError::io(format!("run {}", chronyc.display()), e))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || stdout.trim().is_empty() {
        return Err(ChronyError::Chronyc {
            args: format!("-h {} tracking", socket.display()),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    parse_tracking_csv(stdout.trim())
}

/// One chronyd, started through `ip netns exec`, which execs it: the child
/// is chronyd itself.
struct Daemon {
    netns: String,
    dir: PathBuf,
    child: Option<Child>,
}

impl Daemon {
    fn start(
        programs: &Programs,
        netns: &str,
        dir: &Path,
        conf: &str,
    ) -> Result<Daemon, ChronyError> {
        let conf_path = dir.join("chrony.conf");
        fs::write(&conf_path, conf)
            .map_err(|e| ChronyError::io(format!("write {}", conf_path.display()), e))?;
        let log_path = dir.join("chronyd.stderr");
        let log = File::create(&log_path)
            .map_err(|e| ChronyError::io(format!("create {}", log_path.display()), e))?;
        // -x: never adjust the host clock. -d: stay in the foreground.
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", netns])
            .arg(&programs.chronyd)
            .args(["-x", "-d", "-f"])
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        // Killed without unwinding (SIGKILL, ^C), the caller cannot stop
        // chronyd: the kernel sends it SIGTERM when the starting thread
        // ends (the setting survives exec, and `ip` execs chronyd).
        // SAFETY: the hook runs in the forked child before exec and only
        // makes the prctl(2) system call, which is async-signal-safe and
        // allocates nothing.
        unsafe {
            command.pre_exec(|| {
                prctl::set_pdeathsig(signal::Signal::SIGTERM).map_err(std::io::Error::from)
            });
        }
        let child = command
            .spawn()
            .map_err(|e| ChronyError::io(format!("start chronyd in {netns}"), e))?;
        let mut daemon = Daemon {
            netns: netns.to_string(),
            dir: dir.to_path_buf(),
            child: Some(child),
        };
        daemon.wait_answering(&programs.chronyc)?;
        Ok(daemon)
    }

    fn stderr_log(&self) -> String {
        fs::read_to_string(self.dir.join("chronyd.stderr"))
            .unwrap_or_default()
            .trim()
            .to_string()
    }

    fn wait_answering(&mut self, chronyc: &Path) -> Result<(), ChronyError> {
        let timeout = Duration::from_secs(10);
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    self.child = None;
                    return Err(ChronyError::Exited {
                        netns: self.netns.clone(),
                        status,
                        log: self.stderr_log(),
                    });
                }
            }
            let last = match tracking(chronyc, &self.dir) {
                Ok(_) => return Ok(()),
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(ChronyError::NoAnswer {
                    netns: self.netns.clone(),
                    secs: timeout.as_secs(),
                    last,
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        let _ = signal::kill(Pid::from_raw(c.id() as i32), signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// A directory only root can enter (chronyd requires that of the one
/// holding its command socket), removed with its contents on drop.
struct PrivateDir(PathBuf);

impl PrivateDir {
    fn create(path: PathBuf) -> Result<PrivateDir, ChronyError> {
        let _ = fs::remove_dir_all(&path);
        DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| ChronyError::io(format!("create {}", path.display()), e))?;
        Ok(PrivateDir(path))
    }

    fn sub(&self, name: &str) -> Result<PathBuf, ChronyError> {
        let path = self.0.join(name);
        DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| ChronyError::io(format!("create {}", path.display()), e))?;
        Ok(path)
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_never_touch_the_host_clock() {
        let dir = Path::new("/tmp/x");
        let ip = Ipv4Addr::new(10, 1, 0, 10);
        for conf in [server_conf(dir, ip), client_conf(dir, ip)] {
            for banned in ["rtcsync", "makestep", "rtcfile", "initstepslew"] {
                assert!(!conf.contains(banned), "{banned} in\n{conf}");
            }
            assert!(conf.contains("bindcmdaddress /tmp/x/chronyd.sock\ncmdport 0\n"));
            assert!(conf.contains("driftfile /tmp/x/drift\n"));
        }
        let client = client_conf(dir, ip);
        assert!(client.contains("server 10.1.0.10 iburst minpoll -4 maxpoll -4 xleave\n"));
        assert!(client.contains("port 0\n"));
        let server = server_conf(dir, ip);
        assert!(server.contains("local stratum 1\nallow 10.0.0.0/8\nbindaddress 10.1.0.10\n"));
    }
}
