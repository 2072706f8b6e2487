use super::*;
use crate::classifier::{
    admission::Admission,
    rule::{DscpSet, IpPrefix, PortRange, Rule},
};
use bpf_maps::counters::REASON_LENGTH_OVERRUN;

/// Ethernet header with the given EtherType chain (tags first).
fn eth(types: &[u16]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    for (i, t) in types.iter().enumerate() {
        f.extend_from_slice(&t.to_be_bytes());
        if i + 1 < types.len() {
            f.extend_from_slice(&[0x00, 0x0a]); // TCI of a tag
        }
    }
    f
}

fn ipv4(proto: u8, tos: u8, frag: u16, options: usize, payload: &[u8]) -> Vec<u8> {
    let ihl = 5 + options / 4;
    let total = (ihl * 4 + payload.len()) as u16;
    let mut h = vec![(4 << 4) | ihl as u8, tos];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&[0, 1]);
    h.extend_from_slice(&frag.to_be_bytes());
    h.extend_from_slice(&[64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    h.extend(std::iter::repeat_n(1u8, options)); // NOP options
    h.extend_from_slice(payload);
    h
}

fn udp(sport: u16, dport: u16) -> Vec<u8> {
    let mut u = sport.to_be_bytes().to_vec();
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&[0, 8, 0, 0]);
    u
}

fn ipv6(next: u8, tclass: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60 | (tclass >> 4), tclass << 4, 0, 0];
    h.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    h.extend_from_slice(&[next, 64]);
    h.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    h.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    h.extend_from_slice(payload);
    h
}

fn frame(types: &[u16], l3: Vec<u8>) -> Vec<u8> {
    let mut f = eth(types);
    f.extend(l3);
    f
}

#[test]
fn ipv4_udp_with_options_and_qinq() {
    let f = frame(
        &[0x88a8, 0x8100, 0x0800],
        ipv4(17, 46 << 2, 0, 8, &udp(1000, 5001)),
    );
    let fields = parse(&f).unwrap();
    assert_eq!(fields.proto, 17);
    assert_eq!(fields.dscp, 46);
    assert_eq!(fields.ports, Some((1000, 5001)));
    assert_eq!(fields.src, "10.0.0.1".parse::<IpAddr>().unwrap());
}

#[test]
fn unclassified_frames() {
    assert_eq!(parse(&eth(&[0x0806])), Err(Unclassified::NotIp));
    assert_eq!(
        parse(&frame(
            &[0x8100, 0x88a8, 0x0800],
            ipv4(17, 0, 0, 0, &udp(1, 2))
        )),
        Err(Unclassified::VlanDepth)
    );
    assert_eq!(
        parse(&frame(
            &[0x8100, 0x8100, 0x8100, 0x0800],
            ipv4(17, 0, 0, 0, &udp(1, 2))
        )),
        Err(Unclassified::VlanDepth)
    );
    let mut full = frame(&[0x0800], ipv4(6, 0, 0, 0, &[0; 20]));
    full.truncate(14 + 19);
    assert_eq!(parse(&full), Err(Unclassified::Truncated));
    let mut bad_ihl = frame(&[0x0800], ipv4(6, 0, 0, 0, &[0; 20]));
    bad_ihl[14] = 0x44;
    assert_eq!(parse(&bad_ihl), Err(Unclassified::BadHeader));
    let mut short_total = frame(&[0x0800], ipv4(6, 0, 0, 0, &[0; 20]));
    short_total.truncate(short_total.len() - 1);
    let fields = parse(&short_total).unwrap();
    assert_eq!(fields.partial, Some(Partial::LengthOverrun));
    assert_eq!(fields.proto, 6);
}

#[test]
fn fragments_and_truncated_l4() {
    let later = frame(&[0x0800], ipv4(17, 0, 185, 0, &udp(1, 2)));
    assert_eq!(parse(&later).unwrap().ports, None);
    let first = frame(&[0x0800], ipv4(17, 0, 0x2000, 0, &udp(1, 2)));
    assert_eq!(parse(&first).unwrap().ports, Some((1, 2)));
    let short_tcp = frame(&[0x0800], ipv4(6, 0, 0, 0, &[0; 19]));
    let fields = parse(&short_tcp).unwrap();
    assert_eq!((fields.proto, fields.ports), (6, None));
}

#[test]
fn ipv6_extension_chains() {
    let mut chain = vec![43, 0, 0, 0, 0, 0, 0, 0]; // hop-by-hop → routing
    chain.extend_from_slice(&[44, 0, 0, 0, 0, 0, 0, 0]); // routing → fragment
    chain.extend_from_slice(&[17, 0, 0, 0, 0, 0, 0, 1]); // first fragment, M=1 → UDP
    chain.extend(udp(7, 8));
    let f = frame(&[0x86dd], ipv6(0, 0xb8, &chain));
    let fields = parse(&f).unwrap();
    assert_eq!(
        (fields.proto, fields.ports, fields.dscp),
        (17, Some((7, 8)), 46)
    );

    let later = frame(&[0x86dd], ipv6(44, 0, &[6, 0, 0, 8, 0, 0, 0, 1]));
    assert_eq!(parse(&later).unwrap().proto, 6);
    assert_eq!(parse(&later).unwrap().ports, None);

    let mut long = Vec::new();
    for _ in 0..7 {
        long.extend_from_slice(&[60, 0, 0, 0, 0, 0, 0, 0]);
    }
    let f = frame(&[0x86dd], ipv6(60, 0, &long));
    assert_eq!(
        (parse(&f).unwrap().proto, parse(&f).unwrap().ports),
        (60, None)
    );

    let cut = frame(&[0x86dd], ipv6(60, 0, &[17, 1, 0, 0, 0, 0, 0, 0])); // claims 16 bytes
    assert_eq!(parse(&cut).unwrap().proto, 60);
}

#[test]
fn first_matching_rule_wins() {
    let base = Rule::any(0, 0, Verdict::Pass);
    let ports = Rule {
        priority: 1,
        proto: Some(17),
        dst_ports: Some(PortRange::new(5000, 5999).unwrap()),
        class: 3,
        ..base
    };
    let peers = Rule {
        priority: 2,
        src: Some(IpPrefix::new("10.0.0.0".parse().unwrap(), 8).unwrap()),
        class: 5,
        verdict: Verdict::Drop,
        ..base
    };
    let rules = RuleSet::new(vec![peers, ports]).unwrap();
    let udp_frame = frame(&[0x0800], ipv4(17, 0, 0, 0, &udp(1, 5001)));
    assert_eq!(
        evaluate(&rules, &udp_frame),
        Outcome::Classified {
            class: 3,
            verdict: Verdict::Pass,
            rule: Some(0),
            partial: None,
        }
    );
    let later = frame(&[0x0800], ipv4(17, 0, 100, 0, &udp(1, 5001)));
    assert_eq!(
        evaluate(&rules, &later),
        Outcome::Classified {
            class: 5,
            verdict: Verdict::Drop,
            rule: Some(1),
            partial: None,
        }
    );
    let v6 = frame(&[0x86dd], ipv6(59, 0, &[]));
    assert_eq!(
        evaluate(&rules, &v6),
        Outcome::Classified {
            class: 0,
            verdict: Verdict::Pass,
            rule: None,
            partial: None,
        }
    );
    assert_eq!(
        evaluate(&rules, &eth(&[0x88cc])),
        Outcome::Unclassified(Unclassified::NotIp)
    );
}

fn any_rule(priority: u32) -> Rule {
    Rule::any(priority, 1, Verdict::Pass)
}

#[test]
fn unclassified_action_drops_what_the_parser_cannot_read() {
    let drop_udp = Rule {
        proto: Some(17),
        dst_ports: Some(PortRange::new(5001, 5001).unwrap()),
        verdict: Verdict::Drop,
        ..any_rule(1)
    };
    let pass = RuleSet::new(vec![drop_udp]).unwrap();
    let drop = pass.clone().with_unclassified(UnclassifiedAction::Drop);
    // Total length claims 200 bytes more than the frame: classified on the
    // bytes present, so the drop rule still sees the port.
    let mut long = frame(&[0x0800], ipv4(17, 0, 0, 0, &udp(1, 5001)));
    long[16..18].copy_from_slice(&228u16.to_be_bytes());
    assert_eq!(evaluate(&pass, &long).reason(), Some(REASON_LENGTH_OVERRUN));
    assert!(evaluate(&pass, &long).dropped());
    assert_eq!(
        evaluate(&drop, &long),
        Outcome::PartialDropped(Partial::LengthOverrun)
    );
    let three_tags = frame(
        &[0x8100, 0x8100, 0x8100, 0x0800],
        ipv4(17, 0, 0, 0, &udp(1, 5001)),
    );
    assert_eq!(
        evaluate(&pass, &three_tags),
        Outcome::Unclassified(Unclassified::VlanDepth)
    );
    assert_eq!(
        evaluate(&drop, &three_tags),
        Outcome::UnclassifiedDropped(Unclassified::VlanDepth)
    );
    let mut chain = Vec::new();
    for _ in 0..7 {
        chain.extend_from_slice(&[60, 0, 0, 0, 0, 0, 0, 0]);
    }
    let deep = frame(&[0x86dd], ipv6(60, 0, &chain));
    assert_eq!(
        evaluate(&drop, &deep),
        Outcome::PartialDropped(Partial::ExtChain)
    );
    // ARP passes whatever the action.
    assert_eq!(
        evaluate(&drop, &eth(&[0x0806])),
        Outcome::Unclassified(Unclassified::NotIp)
    );
}

#[test]
fn dscp_lists() {
    let rule = Rule {
        dscp: Some(DscpSet::new(&[34, 46]).unwrap()),
        ..any_rule(1)
    };
    let rules = RuleSet::new(vec![rule]).unwrap();
    let with = |tos: u8| frame(&[0x0800], ipv4(17, tos, 0, 0, &udp(1, 2)));
    let class = |f: &[u8]| match evaluate(&rules, f) {
        Outcome::Classified { class, .. } => class,
        other => panic!("{other:?}"),
    };
    assert_eq!((class(&with(34 << 2)), class(&with(46 << 2))), (1, 1));
    assert_eq!(class(&with(10 << 2)), 0);
    assert!(DscpSet::new(&[64]).is_err() && DscpSet::new(&[]).is_err());
}

#[test]
fn admission_and_later_fragments() {
    let admitted = IpPrefix::new("10.0.0.0".parse().unwrap(), 30).unwrap();
    let adm = Admission::new(vec![admitted], vec![PortRange::new(5000, 5100).unwrap()]).unwrap();
    let rules = RuleSet::new(vec![]).unwrap().with_admission(Some(adm));
    let mut memory = FragmentMemory::default();
    let with_src = |mut f: Vec<u8>, last: u8| {
        f[14 + 15] = last;
        f
    };
    let to = |dport: u16, frag: u16| frame(&[0x0800], ipv4(17, 0, frag, 0, &udp(1, dport)));
    // 10.0.0.1 is admitted; 10.0.0.9 is not.
    assert!(!evaluate_with(&rules, &to(5001, 0), &mut memory).dropped());
    let spoofed = with_src(to(5001, 0), 9);
    assert_eq!(
        evaluate_with(&rules, &spoofed, &mut memory),
        Outcome::Refused(AdmissionDrop::Source)
    );
    assert!(!evaluate_with(&rules, &with_src(to(80, 0), 9), &mut memory).dropped());
    // Later fragments: dropped from a non-admitted source unless its first
    // fragment went to an unprotected port.
    let later = with_src(to(5001, 185), 9);
    assert_eq!(
        evaluate_with(&rules, &later, &mut memory),
        Outcome::Refused(AdmissionDrop::Fragment)
    );
    assert!(!evaluate_with(&rules, &with_src(to(80, 0x2000), 9), &mut memory).dropped());
    assert!(!evaluate_with(&rules, &later, &mut memory).dropped());
    memory.generation += 1;
    assert!(evaluate_with(&rules, &later, &mut memory).dropped());
    assert!(!evaluate_with(&rules, &to(5001, 185), &mut memory).dropped());
    // ICMP is not admission's business; a cut UDP header from outside is.
    let icmp = with_src(frame(&[0x0800], ipv4(1, 0, 0, 0, &[8, 0, 0, 0])), 9);
    assert!(!evaluate_with(&rules, &icmp, &mut memory).dropped());
    let cut = with_src(frame(&[0x0800], ipv4(17, 0, 0, 0, &[0, 1, 0x13])), 9);
    assert_eq!(
        evaluate_with(&rules, &cut, &mut memory),
        Outcome::Refused(AdmissionDrop::Unproven)
    );
    // And a header the parser cannot read at all.
    let mut bad = to(5001, 0);
    bad[14] = 0x44;
    assert_eq!(
        evaluate_with(&rules, &bad, &mut memory),
        Outcome::UnclassifiedDropped(Unclassified::BadHeader)
    );
}
