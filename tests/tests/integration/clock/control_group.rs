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

fn status_as(socket: &std::path::Path, gid: u32) -> std::process::Output {
    Command::new(causeway_bin())
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

    let member = status_as(&socket, CONTROL_GID);
    let out = String::from_utf8_lossy(&member.stdout);
    assert!(
        member.status.success() && out.contains("PEER") && out.contains("authenticated probes"),
        "the control group was refused: {}{}",
        out,
        String::from_utf8_lossy(&member.stderr)
    );
    let outsider = status_as(&socket, NOBODY);
    assert!(
        !outsider.status.success(),
        "a user outside the group was served: {}",
        String::from_utf8_lossy(&outsider.stdout)
    );
}
