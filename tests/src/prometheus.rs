//! A real Prometheus server (Debian's `prometheus`, installed by `cargo
//! xtask setup`) for the metrics tests: started in a network namespace on its
//! loopback with a generated configuration, scraping the given targets every
//! second, queried over its HTTP API. Killed and its data removed on drop,
//! also when the test panics.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use causeway_test_support::netns;

/// A running Prometheus server.
pub struct Prometheus {
    child: Child,
    dir: PathBuf,
    netns: String,
    /// Where its HTTP API listens (in `netns`).
    pub addr: SocketAddr,
}

impl Prometheus {
    /// Starts `prometheus` in `netns` on `addr`, scraping `targets` as
    /// `(job, host:port)` every second.
    pub fn start(netns: &str, addr: SocketAddr, targets: &[(&str, SocketAddr)]) -> Prometheus {
        let dir =
            std::env::temp_dir().join(format!("cw-prometheus-{}-{netns}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("prometheus scratch dir");
        let mut config = String::from(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n",
        );
        for (job, target) in targets {
            config.push_str(&format!(
                "  - job_name: {job}\n    static_configs:\n      - targets: ['{target}']\n"
            ));
        }
        let config_file = dir.join("prometheus.yml");
        std::fs::write(&config_file, config).expect("write prometheus.yml");
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("log file");
        let child = Command::new("ip")
            .args(["netns", "exec", netns, "prometheus"])
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus (cargo xtask setup installs it)");
        let p = Prometheus {
            child,
            dir,
            netns: netns.to_string(),
            addr,
        };
        p.wait_ready();
        p
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if self.get("/-/ready").is_some_and(|(s, _)| s == 200) {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("prometheus did not become ready:\n{}", self.log());
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// `GET path` on the server (from inside its namespace): status and body.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let (addr, path, ns) = (self.addr, path.to_string(), self.netns.clone());
        std::thread::spawn(move || {
            netns::enter(&ns).ok()?;
            http_get(addr, &path)
        })
        .join()
        .ok()
        .flatten()
    }

    /// Runs an instant query; the `data.result` array of the answer.
    pub fn query(&self, promql: &str) -> Vec<serde_json::Value> {
        let path = format!("/api/v1/query?query={}", percent_encode(promql));
        let (status, body) = self
            .get(&path)
            .unwrap_or_else(|| panic!("no answer to {promql}"));
        assert_eq!(status, 200, "{promql}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("the API answers JSON");
        assert_eq!(v["status"], "success", "{promql}: {body}");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// The value of an instant query that must yield exactly one sample.
    pub fn scalar(&self, promql: &str) -> f64 {
        let r = self.query(promql);
        assert_eq!(r.len(), 1, "{promql}: {r:?}");
        r[0]["value"][1]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{promql}: {r:?}"))
    }

    /// Waits until `promql` yields one sample satisfying `ok`; returns it.
    pub fn wait_for(&self, promql: &str, timeout: Duration, ok: impl Fn(f64) -> bool) -> f64 {
        let deadline = Instant::now() + timeout;
        loop {
            let r = self.query(promql);
            let v = (r.len() == 1)
                .then(|| {
                    r[0]["value"][1]
                        .as_str()
                        .and_then(|s| s.parse::<f64>().ok())
                })
                .flatten();
            if let Some(v) = v.filter(|v| ok(*v)) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "{promql}: {r:?} after {timeout:?}; targets: {:?}",
                self.get("/api/v1/targets")
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        // `ip netns exec` execs prometheus: the child is the server itself.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One HTTP/1.1 GET with `Connection: close`: status and body.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let body = if head
        .lines()
        .any(|l| l.eq_ignore_ascii_case("transfer-encoding: chunked"))
    {
        dechunk(body)?
    } else {
        body.to_string()
    };
    Some((status, body))
}

fn dechunk(mut body: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n")?;
        let n = usize::from_str_radix(size.trim(), 16).ok()?;
        if n == 0 {
            return Some(out);
        }
        out.push_str(rest.get(..n)?);
        body = rest.get(n + 2..)?;
    }
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
