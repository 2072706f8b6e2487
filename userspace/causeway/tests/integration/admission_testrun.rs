//! XDP admission and the unclassified action through BPF_PROG_TEST_RUN:
//! 10,000 admitted prefixes loaded; spoofed sources and their later
//! fragments dropped and counted per reason; admitted peers and unprotected
//! ports pass; a restored snapshot puts the admission maps back.

use bpf_maps::counters::{
    IngressCounters, MAP_REASON_COUNTERS, REASON_ADM_FRAGMENT, REASON_ADM_SOURCE,
    REASON_ADM_UNPROVEN, REASON_BAD_HEADER, REASON_LENGTH_OVERRUN, REASON_SLOTS, REASON_VLAN_DEPTH,
};
use causeway::classifier::{
    Admission, IpPrefix, PortRange, Rule, RuleSet, UnclassifiedAction, Verdict,
};
use causeway_test_support::{frames::*, require_root};

use crate::classifier_harness::Harness;

const PASS: u32 = 2;
const DROP: u32 = 1;

fn prefix(addr: &str, len: u8) -> IpPrefix {
    IpPrefix::new(addr.parse().expect("address"), len).expect("prefix")
}

/// 10,000 prefixes: the peer networks 10.1.0.0/16 and fd00:1::/32, and
/// 9,998 others (IPv4 /24s and IPv6 /48s).
fn admission() -> Admission {
    let mut prefixes = vec![prefix("10.1.0.0", 16), prefix("fd00:1::", 32)];
    for i in 0..9_998u32 {
        prefixes.push(if i % 2 == 0 {
            prefix(
                &format!("172.{}.{}.0", 16 + i / 256 / 256, i / 256 % 256),
                24,
            )
        } else {
            prefix(&format!("fd20:{:x}:{:x}::", i / 65_536, i % 65_536), 48)
        });
    }
    let ports = vec![
        PortRange::new(29_500, 29_599).expect("range"),
        PortRange::new(3190, 3190).expect("probe port"),
    ];
    Admission::new(prefixes, ports).expect("within the map limits")
}

fn rules() -> RuleSet {
    let drop_ssh = Rule {
        priority: 10,
        src: None,
        dst: None,
        proto: Some(6),
        src_ports: None,
        dst_ports: Some(PortRange::new(22, 22).expect("range")),
        dscp: None,
        class: 3,
        verdict: Verdict::Drop,
    };
    RuleSet::new(vec![drop_ssh])
        .expect("valid rules")
        .with_admission(Some(admission()))
}

fn reasons(h: &Harness) -> Vec<IngressCounters> {
    let map = h.ebpf.map(MAP_REASON_COUNTERS).expect("reason map");
    let array = aya::maps::PerCpuArray::<_, IngressCounters>::try_from(map).expect("per-CPU");
    (0..REASON_SLOTS)
        .map(|r| {
            array
                .get(&r, 0)
                .expect("reading")
                .iter()
                .fold(0, |a, c| a + c.drops)
        })
        .map(|drops| IngressCounters {
            drops,
            ..IngressCounters::default()
        })
        .collect()
}

fn v4(src: [u8; 4], frag: u16, l4: &[u8]) -> Vec<u8> {
    let h = V4 {
        frag,
        ..V4::new(src, [10, 2, 0, 1], 17)
    };
    cat(&[&eth(&[], ETH_IPV4), &ipv4(h, l4)])
}

fn v6(src: &str, payload: &[u8], next: u8) -> Vec<u8> {
    let h = V6::new(src, "fd00:2::1", next);
    cat(&[&eth(&[], ETH_IPV6), &ipv6(h, payload)])
}

#[test]
fn spoofed_sources_and_their_later_fragments_are_dropped() {
    require_root!("spoofed_sources_and_their_later_fragments_are_dropped");
    let mut h = Harness::load();
    let started = std::time::Instant::now();
    h.maps.apply(&rules()).expect("applying 10,000 prefixes");
    println!("10,000 prefixes applied in {:.1?}", started.elapsed());
    let peer = [10, 1, 2, 3];
    let spoofed = [10, 3, 2, 3];
    let to_training = udp(40_000, 29_501, 64);
    let cases: Vec<(&str, Vec<u8>, u32, Option<u32>)> = vec![
        (
            "peer to a training port",
            v4(peer, 0, &to_training),
            PASS,
            None,
        ),
        (
            "172.x /24 peer",
            v4([172, 16, 9, 7], 0, &to_training),
            PASS,
            None,
        ),
        (
            "spoofed to a training port",
            v4(spoofed, 0, &to_training),
            DROP,
            Some(REASON_ADM_SOURCE),
        ),
        (
            "spoofed to the probe port",
            v4(spoofed, 0, &udp(1, 3190, 8)),
            DROP,
            Some(REASON_ADM_SOURCE),
        ),
        (
            "spoofed first fragment",
            v4(spoofed, 0x2000, &to_training),
            DROP,
            Some(REASON_ADM_SOURCE),
        ),
        (
            "its later fragment",
            v4(spoofed, 0x2000 | 185, &[0; 64]),
            DROP,
            Some(REASON_ADM_FRAGMENT),
        ),
        (
            "its last fragment",
            v4(spoofed, 370, &[0; 64]),
            DROP,
            Some(REASON_ADM_FRAGMENT),
        ),
        ("peer later fragment", v4(peer, 185, &[0; 64]), PASS, None),
        (
            "spoofed to port 80",
            v4(spoofed, 0, &udp(1, 80, 8)),
            PASS,
            None,
        ),
        (
            "spoofed, first fragment to port 80",
            v4(spoofed, 0x2000, &udp(1, 80, 64)),
            PASS,
            None,
        ),
        (
            "and its later fragment",
            v4(spoofed, 185, &[0; 64]),
            PASS,
            None,
        ),
        (
            "spoofed UDP header cut",
            v4(spoofed, 0, &[0x9c, 0x40, 0x73]),
            DROP,
            Some(REASON_ADM_UNPROVEN),
        ),
        (
            "spoofed ICMP",
            cat(&[
                &eth(&[], ETH_IPV4),
                &ipv4(V4::new(spoofed, [10, 2, 0, 1], 1), &[8, 0, 0, 0]),
            ]),
            PASS,
            None,
        ),
        (
            "v6 peer",
            v6("fd00:1::9", &udp(1, 29_501, 8), 17),
            PASS,
            None,
        ),
        (
            "v6 spoofed",
            v6("fd00:9::9", &udp(1, 29_501, 8), 17),
            DROP,
            Some(REASON_ADM_SOURCE),
        ),
        (
            "v6 spoofed later fragment",
            v6("fd00:9::9", &cat(&[&frag6(17, 20, false), &[0; 32]]), 44),
            DROP,
            Some(REASON_ADM_FRAGMENT),
        ),
        (
            "v6 peer later fragment",
            v6("fd00:1::9", &cat(&[&frag6(17, 20, false), &[0; 32]]), 44),
            PASS,
            None,
        ),
        (
            "bad header",
            {
                let mut f = v4(peer, 0, &to_training);
                f[14] = 0x44;
                f
            },
            DROP,
            Some(REASON_BAD_HEADER),
        ),
        (
            "three VLAN tags",
            cat(&[
                &eth(&[TPID_8021Q; 3], ETH_IPV4),
                &ipv4(V4::new(peer, [10, 2, 0, 1], 17), &to_training),
            ]),
            DROP,
            Some(REASON_VLAN_DEPTH),
        ),
        ("ARP", arp(), PASS, None),
        (
            "admitted ssh, dropped by the rule",
            cat(&[
                &eth(&[], ETH_IPV4),
                &ipv4(V4::new(peer, [10, 2, 0, 1], 6), &tcp(1, 22, 0)),
            ]),
            DROP,
            None,
        ),
    ];
    let mut failures = Vec::new();
    for (name, frame, want, reason) in &cases {
        let before = reasons(&h);
        let action = h.run(frame);
        let after = reasons(&h);
        if action != *want {
            failures.push(format!("{name}: action {action}, want {want}"));
        }
        for r in 0..REASON_SLOTS as usize {
            let grew = after[r].drops - before[r].drops;
            let expected = u64::from(reason.is_some_and(|x| x as usize == r));
            if grew != expected {
                failures.push(format!(
                    "{name}: reason {r} drops +{grew}, want +{expected}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn unclassified_drop_and_a_restored_snapshot() {
    require_root!("unclassified_drop_and_a_restored_snapshot");
    let mut h = Harness::load();
    let mut long = v4([10, 1, 2, 3], 0, &udp(1, 29_501, 8));
    long[16..18].copy_from_slice(&900u16.to_be_bytes());
    let drop_rules = RuleSet::new(vec![])
        .expect("no rules")
        .with_unclassified(UnclassifiedAction::Drop);
    h.maps.apply(&drop_rules).expect("unclassified = drop");
    assert_eq!(h.run(&long), DROP, "an over-long IPv4 length is dropped");
    assert_eq!(reasons(&h)[REASON_LENGTH_OVERRUN as usize].drops, 1);
    assert_eq!(h.run(&arp()), PASS, "ARP passes whatever the action");

    // Snapshot, apply admission, restore: the maps are as before.
    let snapshot = h.maps.snapshot().expect("snapshot");
    let config = snapshot.config;
    let staged = h.maps.stage(&rules()).expect("staging admission");
    h.maps.commit(&staged).expect("commit");
    let spoofed = v4([10, 3, 2, 3], 0, &udp(1, 29_501, 8));
    assert_eq!(h.run(&spoofed), DROP, "admission is live");
    h.maps.restore(&snapshot).expect("restore");
    assert_eq!(h.maps.config().expect("config"), config);
    let inactive = h.maps.read_set(1 - config.active_set).expect("read back");
    assert_eq!(inactive, snapshot.inactive, "the inactive set is back");
    assert_eq!(h.run(&spoofed), PASS, "no admission after the restore");
    assert_eq!(h.run(&long), DROP, "and unclassified = drop again");
}
