//! XDP admission: frames aimed at the protected (training and probe) ports
//! pass only from admitted source prefixes; everything that cannot be proven
//! admitted is dropped (the rules in `userspace/core/src/classifier/reference.rs`
//! are the same).
//!
//! * Only frames that can reach a port are judged: TCP, UDP, and frames whose
//!   upper-layer protocol is unknown (an IPv6 extension header number).
//! * With ports: a destination port outside `CW_ADM_PORTS` passes (a first
//!   fragment of such a datagram is remembered in `CW_ADM_FRAG`, keyed by
//!   source, destination, protocol and IP ID, with the generation); a
//!   protected port needs an admitted source (`REASON_ADM_SOURCE`).
//! * A later fragment (no ports) passes from an admitted source, or when its
//!   first fragment was remembered under the current generation; otherwise
//!   it is dropped (`REASON_ADM_FRAGMENT`). A later fragment that arrives
//!   before its first fragment is therefore dropped: the stated strict rule.
//! * No ports for another reason (L4 header cut, extension chain unfinished):
//!   admitted source or dropped (`REASON_ADM_UNPROVEN`).
//!
//! The per-frame cost is one array lookup for frames to unprotected ports,
//! plus one LPM lookup (whatever the number of prefixes) for the others.

use bpf_maps::{
    classifier::{FragmentKey, ADMISSION_PORT_WORDS},
    counters::{REASON_ADM_FRAGMENT, REASON_ADM_SOURCE, REASON_ADM_UNPROVEN},
};

use crate::{
    addresses::{lookup_v4, lookup_v6, ConfigSnapshot},
    maps::{ADMISSION_FRAGMENTS, ADMISSION_PORTS, ADMISSION_V4, ADMISSION_V6},
    parse::{
        ParsedFrame, FLAG_FRAGMENT, FLAG_LATER_FRAGMENT, IPPROTO_AH, IPPROTO_DSTOPTS,
        IPPROTO_FRAGMENT, IPPROTO_HOPOPTS, IPPROTO_ROUTING, IPPROTO_TCP, IPPROTO_UDP,
    },
};

/// The `REASON_*` a frame is dropped for, or `None` when admission lets it
/// through to the rules.
#[inline(always)]
pub fn check(frame: &ParsedFrame, config: ConfigSnapshot) -> Option<u32> {
    if !matches!(
        frame.proto,
        IPPROTO_TCP
            | IPPROTO_UDP
            | IPPROTO_HOPOPTS
            | IPPROTO_ROUTING
            | IPPROTO_FRAGMENT
            | IPPROTO_AH
            | IPPROTO_DSTOPTS
    ) {
        return None;
    }
    if frame.has_ports() {
        if !protected(config.set, frame.dst_port) {
            if frame.flags & FLAG_FRAGMENT != 0 {
                remember(frame, config.generation);
            }
            return None;
        }
        return (!admitted(frame, config.set)).then_some(REASON_ADM_SOURCE);
    }
    if admitted(frame, config.set) {
        return None;
    }
    if frame.flags & FLAG_LATER_FRAGMENT != 0 {
        return (!remembered(frame, config.generation)).then_some(REASON_ADM_FRAGMENT);
    }
    Some(REASON_ADM_UNPROVEN)
}

#[inline(always)]
fn protected(set: u32, port: u16) -> bool {
    let index = set * ADMISSION_PORT_WORDS + u32::from(port >> 5);
    ADMISSION_PORTS
        .get(index)
        .is_some_and(|word| word & (1 << (port & 31)) != 0)
}

#[inline(always)]
fn admitted(frame: &ParsedFrame, set: u32) -> bool {
    if frame.ip_version == 4 {
        lookup_v4(&ADMISSION_V4, set, &frame.src_addr).is_some()
    } else {
        lookup_v6(&ADMISSION_V6, set, &frame.src_addr).is_some()
    }
}

#[inline(always)]
fn key(frame: &ParsedFrame) -> FragmentKey {
    FragmentKey {
        src: frame.src_addr,
        dst: frame.dst_addr,
        id: frame.frag_id,
        proto: u32::from(frame.frag_proto),
    }
}

#[inline(always)]
fn remember(frame: &ParsedFrame, generation: u64) {
    // A full map evicts its least recently used entry; a failed insert only
    // means the later fragments are dropped (the strict side).
    let _ = ADMISSION_FRAGMENTS.insert(key(frame), generation, 0);
}

#[inline(always)]
fn remembered(frame: &ParsedFrame, generation: u64) -> bool {
    // SAFETY: the value is a plain u64 read at once; an entry being replaced
    // concurrently yields the old or the new generation, either a valid answer.
    unsafe { ADMISSION_FRAGMENTS.get(key(frame)) }.is_some_and(|g| *g == generation)
}
