//! A pure reference model of the XDP ingress path: parser, unclassified
//! action, admission and rule matcher over a whole frame in a byte slice,
//! written independently of the kernel code (`ebpf/src/parse.rs`,
//! `ebpf/src/xdp_ingress.rs`, `ebpf/src/admission.rs`, `ebpf/src/classify.rs`)
//! from the same documented rules, so that a differential test can compare
//! the two.
//!
//! Parser rules (see `ebpf/src/parse.rs` for the full text):
//! Ethernet, then at most two VLAN tags (outer `0x88a8` or `0x8100`, inner
//! `0x8100`), then IPv4 or IPv6 — a further tag is [`Unclassified::VlanDepth`],
//! anything else [`Unclassified::NotIp`]. IP headers must be complete and
//! sane (else unclassified); an IP length past the frame's end is read up to
//! the frame's end ([`Partial::LengthOverrun`]). Ports come only from TCP/UDP
//! headers fully inside the datagram ([`Partial::L4Truncated`] otherwise),
//! never from non-first fragments. IPv6 extension headers (0, 43, 44, 51, 60)
//! are walked at most `MAX_IPV6_EXT_HEADERS` deep; when the walk cannot
//! finish ([`Partial::ExtChain`]) the protocol is the last Next Header value
//! seen and there are no ports.
//!
//! Policy, in order: unparsed frames pass, unless the set drops unclassified
//! frames or has admission (non-IP frames always pass); partly parsed frames
//! are dropped when the set drops unclassified frames; then admission (rules
//! in `ebpf/src/admission.rs`); then the rules: in priority order, the first
//! whose every present field accepts the frame wins; a rule with a port range
//! never matches a frame without ports; no match → `DEFAULT_CLASS`, pass.

use std::{collections::HashMap, net::IpAddr};

use bpf_maps::{
    classifier::DEFAULT_CLASS,
    counters::{
        REASON_ADM_FRAGMENT, REASON_ADM_SOURCE, REASON_ADM_UNPROVEN, REASON_BAD_HEADER,
        REASON_EXT_CHAIN, REASON_L4_TRUNCATED, REASON_LENGTH_OVERRUN, REASON_NOT_IP,
        REASON_TRUNCATED, REASON_VLAN_DEPTH,
    },
};

use super::{
    admission::UnclassifiedAction,
    rule::{RuleSet, Verdict},
};

pub use super::reference_parse::parse;

/// Why a frame is not parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unclassified {
    Truncated,
    NotIp,
    BadHeader,
    VlanDepth,
}

/// Why a parsed frame was read only in part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Partial {
    LengthOverrun,
    ExtChain,
    L4Truncated,
}

/// Why admission dropped a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmissionDrop {
    Source,
    Fragment,
    Unproven,
}

/// The fragment a datagram is, when it is one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fragment {
    /// IPv4 identification or IPv6 fragment-header identification.
    pub id: u32,
    /// IPv4 protocol or the fragment header's Next Header.
    pub proto: u8,
    /// A non-first fragment.
    pub later: bool,
}

/// The fields the policy looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameFields {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    pub dscp: u8,
    /// (source, destination), when the frame carries a complete TCP/UDP header.
    pub ports: Option<(u16, u16)>,
    pub partial: Option<Partial>,
    pub fragment: Option<Fragment>,
}

/// What the XDP path does with one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Not parsed, passed (counted unclassified).
    Unclassified(Unclassified),
    /// Not parsed, dropped (counted unclassified).
    UnclassifiedDropped(Unclassified),
    /// Parsed in part, dropped by `unclassified = "drop"` (counted unclassified).
    PartialDropped(Partial),
    /// Dropped by admission (counted only under its reason).
    Refused(AdmissionDrop),
    Classified {
        class: u8,
        verdict: Verdict,
        /// Index of the winning rule in priority order.
        rule: Option<usize>,
        partial: Option<Partial>,
    },
}

impl Outcome {
    pub fn dropped(&self) -> bool {
        match self {
            Self::Unclassified(_) => false,
            Self::UnclassifiedDropped(_) | Self::PartialDropped(_) | Self::Refused(_) => true,
            Self::Classified { verdict, .. } => *verdict == Verdict::Drop,
        }
    }

    /// The `REASON_*` counter slot the frame is counted in, if any.
    pub fn reason(&self) -> Option<u32> {
        let unparsed = |u: &Unclassified| match u {
            Unclassified::NotIp => REASON_NOT_IP,
            Unclassified::Truncated => REASON_TRUNCATED,
            Unclassified::BadHeader => REASON_BAD_HEADER,
            Unclassified::VlanDepth => REASON_VLAN_DEPTH,
        };
        let partial = |p: &Partial| match p {
            Partial::LengthOverrun => REASON_LENGTH_OVERRUN,
            Partial::ExtChain => REASON_EXT_CHAIN,
            Partial::L4Truncated => REASON_L4_TRUNCATED,
        };
        match self {
            Self::Unclassified(u) | Self::UnclassifiedDropped(u) => Some(unparsed(u)),
            Self::PartialDropped(p) => Some(partial(p)),
            Self::Refused(AdmissionDrop::Source) => Some(REASON_ADM_SOURCE),
            Self::Refused(AdmissionDrop::Fragment) => Some(REASON_ADM_FRAGMENT),
            Self::Refused(AdmissionDrop::Unproven) => Some(REASON_ADM_UNPROVEN),
            Self::Classified { partial: p, .. } => p.as_ref().map(partial),
        }
    }
}

/// The first fragments admission remembers (the kernel's LRU map, without
/// its evictions), per datagram, with the rule-set generation.
#[derive(Clone, Debug, Default)]
pub struct FragmentMemory {
    seen: HashMap<(IpAddr, IpAddr, u32, u8), u64>,
    /// The generation entries are made and checked under.
    pub generation: u64,
}

/// Parses and classifies `frame` with `rules` (no fragment remembered).
pub fn evaluate(rules: &RuleSet, frame: &[u8]) -> Outcome {
    evaluate_with(rules, frame, &mut FragmentMemory::default())
}

/// Parses and classifies `frame` with `rules`, remembering first fragments
/// in `memory`.
pub fn evaluate_with(rules: &RuleSet, frame: &[u8], memory: &mut FragmentMemory) -> Outcome {
    let drop_unclassified = rules.unclassified() == UnclassifiedAction::Drop;
    let fields = match parse(frame) {
        Ok(fields) => fields,
        Err(Unclassified::NotIp) => return Outcome::Unclassified(Unclassified::NotIp),
        Err(why) if drop_unclassified || rules.admission().is_some() => {
            return Outcome::UnclassifiedDropped(why)
        }
        Err(why) => return Outcome::Unclassified(why),
    };
    if let (Some(p), true) = (fields.partial, drop_unclassified) {
        return Outcome::PartialDropped(p);
    }
    if let Some(refused) = admission(rules, &fields, memory) {
        return Outcome::Refused(refused);
    }
    match first_match(rules, &fields) {
        Some(i) => {
            let r = &rules.rules()[i];
            Outcome::Classified {
                class: r.class,
                verdict: r.verdict,
                rule: Some(i),
                partial: fields.partial,
            }
        }
        None => Outcome::Classified {
            class: DEFAULT_CLASS as u8,
            verdict: Verdict::Pass,
            rule: None,
            partial: fields.partial,
        },
    }
}

/// Admission's verdict on a parsed frame: `Some` drops it.
fn admission(
    rules: &RuleSet,
    fields: &FrameFields,
    memory: &mut FragmentMemory,
) -> Option<AdmissionDrop> {
    let admission = rules.admission()?;
    let may_reach_a_port = matches!(fields.proto, 6 | 17 | 0 | 43 | 44 | 51 | 60);
    if !may_reach_a_port {
        return None;
    }
    let key = |f: &Fragment| (fields.src, fields.dst, f.id, f.proto);
    if let Some((_, dport)) = fields.ports {
        if !admission.protects(dport) {
            if let Some(f) = &fields.fragment {
                memory.seen.insert(key(f), memory.generation);
            }
            return None;
        }
        return (!admission.admits(fields.src)).then_some(AdmissionDrop::Source);
    }
    if admission.admits(fields.src) {
        return None;
    }
    match &fields.fragment {
        Some(f) if f.later => {
            let remembered = memory.seen.get(&key(f)) == Some(&memory.generation);
            (!remembered).then_some(AdmissionDrop::Fragment)
        }
        _ => Some(AdmissionDrop::Unproven),
    }
}

/// Index (in priority order) of the first rule that accepts `fields`.
pub fn first_match(rules: &RuleSet, fields: &FrameFields) -> Option<usize> {
    rules.rules().iter().position(|r| {
        let prefixes = r.src.is_none_or(|p| p.contains(fields.src))
            && r.dst.is_none_or(|p| p.contains(fields.dst));
        let proto = r.proto.is_none_or(|p| p == fields.proto)
            && r.dscp.is_none_or(|d| d.contains(fields.dscp));
        let ports = match fields.ports {
            Some((s, d)) => {
                r.src_ports.is_none_or(|p| p.contains(s))
                    && r.dst_ports.is_none_or(|p| p.contains(d))
            }
            None => r.src_ports.is_none() && r.dst_ports.is_none(),
        };
        prefixes && proto && ports
    })
}

#[cfg(test)]
#[path = "reference_tests.rs"]
mod tests;
