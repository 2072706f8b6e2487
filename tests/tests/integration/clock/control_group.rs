//! The agent's control socket with a control group: a non-root user whose
//! group is the control group reads `causeway clock status`; the same user
//! outside the group is refused. The clock map's pin gets mode 0640 and
//! the configured group.

use std::{
    net::IpAddr,
    os::unix::{
        fs::{MetadataExt, PermissionsExt},
        process::CommandExt,
    },
    process::Command,
};

use bpf_maps::clock::MAP_CLOCK_PEERS;
use causeway::{
    clock::SyncClock,
    datapath::{Layout, NetnsScope},
};
use causeway_test_support::{netns::VethLink, require_root};
use causeway_tests::{causeway_cli::causeway_bin, clock_agent::Agent};

/// A gid no account uses here: the test needs no group database entry.
const CONTROL_GID: u32 = 4242;
const NOBODY: u32 = 65534;

/// A copy of the `causeway` binary that `nobody` can run: the checkout may
/// sit under a directory only root can enter (CI clones into one).
fn binary_for_nobody() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cw-control-group-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("binary directory");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod dir");
    let bin = dir.join("causeway");
    std::fs::copy(causeway_bin(), &bin).expect("copy the causeway binary");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod bin");
    bin
}

fn status_as(bin: &std::path::Path, socket: &std::path::Path, gid: u32) -> std::process::Output {
    Command::new(bin)
        .args(["clock", "status", "--socket"])
        .arg(socket)
        .uid(NOBODY)
        .gid(gid)
        .output()
        .expect("run causeway as nobody")
}

#[test]
fn a_member_of_the_control_group_reads_clock_status_and_others_cannot() {
    require_root!("a_member_of_the_control_group_reads_clock_status_and_others_cannot");
    let link = VethLink::new(99);
    let peer: IpAddr = link.b_addr.parse().expect("test address");
    let a = Agent::start_with(
        link.a.name(),
        &link.a_if,
        1,
        peer,
        SyncClock::IDENTITY,
        &format!("control_group = {CONTROL_GID}\nclock_map_group = {CONTROL_GID}"),
    );
    a.wait_ready();
    let socket = a.socket();
    let meta = std::fs::metadata(&socket).expect("socket exists");
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    assert_eq!(meta.gid(), CONTROL_GID);

    // The clock map training processes read: group-readable, not writable.
    let paths = Layout::default()
        .iface(&NetnsScope::Named(a.netns.clone()), &a.iface)
        .expect("paths");
    let pin = std::fs::metadata(paths.maps_dir.join(MAP_CLOCK_PEERS)).expect("clock map pin");
    assert_eq!(
        (pin.permissions().mode() & 0o777, pin.gid()),
        (0o640, CONTROL_GID)
    );

    let bin = binary_for_nobody();
    let member = status_as(&bin, &socket, CONTROL_GID);
    let out = String::from_utf8_lossy(&member.stdout);
    assert!(
        member.status.success() && out.contains("PEER") && out.contains("authenticated probes"),
        "the control group was refused: {}{}",
        out,
        String::from_utf8_lossy(&member.stderr)
    );
    let outsider = status_as(&bin, &socket, NOBODY);
    let _ = std::fs::remove_dir_all(bin.parent().expect("binary directory"));
    let err = String::from_utf8_lossy(&outsider.stderr);
    assert!(
        !outsider.status.success() && err.contains("Permission denied"),
        "a user outside the group was served: {}",
        String::from_utf8_lossy(&outsider.stdout)
    );
    println!("outside the group: {}", err.trim());
}
