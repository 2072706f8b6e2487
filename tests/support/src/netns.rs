//! Network namespaces and veth links for tests, torn down on drop (also when
//! the test panics). Names include the process id and a counter so that
//! tests running in parallel never collide. Addresses are only ever
//! assigned inside the test's own namespaces.

use std::{
    fs::File,
    io,
    process::{Command, Output},
    sync::atomic::{AtomicU32, Ordering},
};

use nix::sched::{setns, CloneFlags};

/// Moves the calling thread (only it) into the named network namespace
/// (`/run/netns/NAME`); sockets it opens afterwards stay in that namespace.
pub fn enter(name: &str) -> io::Result<()> {
    let path = format!("/run/netns/{name}");
    let file = File::open(&path).map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
    setns(file, CloneFlags::CLONE_NEWNET)
        .map_err(|e| io::Error::other(format!("setns into {path}: {e}")))
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A name no other test of any process uses: `<prefix><pid>x<n>`, at most
/// 15 characters (an interface name's limit) for prefixes of ≤ 3 characters.
pub fn unique_name(prefix: &str) -> String {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}x{n}", std::process::id())
}

/// Runs a command, panicking with its output when it fails.
pub fn run(program: &str, args: &[&str]) -> Output {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A network namespace made with `ip netns add`, deleted on drop.
pub struct Netns {
    name: String,
}

impl Netns {
    /// A new namespace with `lo` up and IPv6 off (no ND/MLD/RA noise on
    /// its links).
    pub fn new(prefix: &str) -> Self {
        let name = unique_name(prefix);
        run("ip", &["netns", "add", &name]);
        let ns = Self { name };
        ns.ip(&["link", "set", "lo", "up"]);
        for key in ["all", "default"] {
            ns.exec(&[
                "sysctl",
                "-qw",
                &format!("net.ipv6.conf.{key}.disable_ipv6=1"),
            ]);
        }
        ns
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip -n <ns> ARGS`.
    pub fn ip(&self, args: &[&str]) -> Output {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// `ip netns exec <ns> ARGS` (a new mount namespace: fine for tools
    /// that do not need the host's bpffs).
    pub fn exec(&self, args: &[&str]) -> Output {
        let mut all = vec!["netns", "exec", &self.name];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// Runs `f` on a new thread that has entered this namespace (only the
    /// network namespace), and returns its result.
    pub fn in_ns<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let enter = self.enterer();
        std::thread::spawn(move || {
            enter();
            f()
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    }

    /// A closure that moves the thread calling it into this namespace
    /// (panicking if it cannot): for threads that outlive one call.
    pub fn enterer(&self) -> impl FnOnce() + Send + 'static {
        let name = self.name.clone();
        move || enter(&name).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The MAC address of `iface` in this namespace.
    pub fn mac(&self, iface: &str) -> String {
        let out = self.ip(&["-j", "link", "show", "dev", iface]);
        let links: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("ip -j link show prints JSON");
        links[0]["address"]
            .as_str()
            .unwrap_or_else(|| panic!("no MAC for {iface}: {links}"))
            .to_string()
    }

    /// (packets, bytes) the kernel counted as sent by `iface`.
    pub fn tx_counters(&self, iface: &str) -> (u64, u64) {
        let out = self.ip(&["-s", "-j", "link", "show", "dev", iface]);
        let links: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("ip -s -j link show prints JSON");
        let tx = &links[0]["stats64"]["tx"];
        (
            tx["packets"].as_u64().expect("tx packets"),
            tx["bytes"].as_u64().expect("tx bytes"),
        )
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace also deletes the veth ends inside it.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// Two namespaces joined by a veth pair with IPv4 addresses and static
/// neighbour entries, so that no ARP (nor, with IPv6 off, anything else)
/// crosses the link unless a test sends it.
pub struct VethLink {
    pub a: Netns,
    pub b: Netns,
    pub a_if: String,
    pub b_if: String,
    pub a_addr: String,
    pub b_addr: String,
}

impl VethLink {
    /// Namespaces `cwa…`/`cwb…`; `subnet` is the third octet of 10.77.<subnet>.0/24.
    pub fn new(subnet: u8) -> Self {
        let a = Netns::new("cwa");
        let b = Netns::new("cwb");
        let a_if = unique_name("va");
        let b_if = unique_name("vb");
        run(
            "ip",
            &[
                "link",
                "add",
                &a_if,
                "netns",
                a.name(),
                "type",
                "veth",
                "peer",
                "name",
                &b_if,
                "netns",
                b.name(),
            ],
        );
        let a_addr = format!("10.77.{subnet}.1");
        let b_addr = format!("10.77.{subnet}.2");
        for (ns, dev, addr) in [(&a, &a_if, &a_addr), (&b, &b_if, &b_addr)] {
            ns.exec(&[
                "sysctl",
                "-qw",
                &format!("net.ipv6.conf.{dev}.disable_ipv6=1"),
            ]);
            ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", dev]);
            ns.ip(&["link", "set", dev, "up"]);
        }
        let (a_mac, b_mac) = (a.mac(&a_if), b.mac(&b_if));
        a.ip(&[
            "neigh",
            "replace",
            &b_addr,
            "lladdr",
            &b_mac,
            "dev",
            &a_if,
            "nud",
            "permanent",
        ]);
        b.ip(&[
            "neigh",
            "replace",
            &a_addr,
            "lladdr",
            &a_mac,
            "dev",
            &b_if,
            "nud",
            "permanent",
        ]);
        Self {
            a,
            b,
            a_if,
            b_if,
            a_addr,
            b_addr,
        }
    }
}

#[cfg(test)]
mod tests {
    //! The guard removes what it made, also when the test panics.

    use std::net::UdpSocket;
    use std::time::Duration;

    use super::{unique_name, Netns, VethLink};
    use crate::require_root;

    fn exists(name: &str) -> bool {
        std::path::Path::new("/run/netns").join(name).exists()
    }

    #[test]
    fn namespaces_and_veths_go_on_drop_and_on_panic() {
        require_root!();
        let link = VethLink::new(201);
        let (a, b) = (link.a.name().to_string(), link.b.name().to_string());
        assert!(exists(&a) && exists(&b));
        // The link carries a datagram from A to B.
        let b_bind = format!("{}:7070", link.b_addr);
        let rx = link
            .b
            .in_ns(move || UdpSocket::bind(b_bind).expect("bind in B"));
        rx.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let tx = link
            .a
            .in_ns(|| UdpSocket::bind("0.0.0.0:0").expect("bind in A"));
        tx.send_to(b"over the veth", format!("{}:7070", link.b_addr))
            .expect("send");
        let mut buf = [0u8; 32];
        let (n, _) = rx.recv_from(&mut buf).expect("datagram arrives");
        assert_eq!(&buf[..n], b"over the veth");
        drop((rx, tx));
        drop(link);
        assert!(!exists(&a) && !exists(&b), "dropped");

        let mut name = String::new();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let ns = Netns::new("cwg");
            name = ns.name().to_string();
            ns.in_ns(|| panic!("deliberate panic inside the namespace"));
        }));
        assert!(r.is_err());
        assert!(
            !name.is_empty() && !exists(&name),
            "unwinding removed {name}"
        );
        assert!(unique_name("x") != unique_name("x"));
    }
}
