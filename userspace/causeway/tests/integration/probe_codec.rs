//! The controller's strict clock-probe codec (`causeway::clock::probe`)
//! and the zero-copy view of `causeway-wire` read and write the same bytes
//! (until the codec is built on the view, this keeps the two in step).

use causeway::clock::probe::{Kind, Probe};
use causeway_wire::probe::{Packet, Repr, PROBE_LEN};
use proptest::prelude::*;

fn kind() -> impl Strategy<Value = (Kind, u8)> {
    prop_oneof![
        Just((Kind::Request, bpf_maps::clock::PROBE_KIND_REQUEST)),
        Just((Kind::Response, bpf_maps::clock::PROBE_KIND_RESPONSE)),
        Just((Kind::FollowUp, bpf_maps::clock::PROBE_KIND_FOLLOW_UP)),
    ]
}

proptest! {
    #[test]
    fn controller_codec_and_wire_view_agree(
        (kind, wire_kind) in kind(),
        flags: u16,
        seq: u32,
        sender: u32,
        nonce: u64,
        stamps: [[u64; 4]; 3],
    ) {
        let probe = Probe { kind, flags, seq, sender, nonce, stamps };
        let encoded = probe.encode();
        let repr = Repr { kind: wire_kind, flags, seq, sender, nonce, stamps };
        let mut emitted = [0u8; PROBE_LEN];
        repr.emit(&mut emitted).expect("room for a probe");
        prop_assert_eq!(encoded, emitted);
        let view = Packet::new_checked(&encoded[..]).expect("a probe's length");
        prop_assert_eq!(Repr::parse(&view), Ok(repr));
        // What the strict decoder accepts, the view reads alike.
        if let Ok(decoded) = Probe::decode(&emitted) {
            prop_assert_eq!(decoded, probe);
            for set in 0..3 {
                for slot in 0..4 {
                    prop_assert_eq!(view.stamp(set, slot), Some(decoded.stamps[set][slot]));
                }
            }
        }
    }
}

#[test]
fn a_valid_request_reads_the_same_through_both() {
    let mut probe = Probe::new(Kind::Request, 9, 1, 0x1122_3344_5566_7788);
    probe.stamps[causeway::clock::probe::USER][0] = 123;
    let bytes = probe.encode();
    let decoded = Probe::decode(&bytes).expect("a valid request");
    let view = Packet::new_checked(&bytes[..]).expect("length");
    view.check_magic().expect("magic and version");
    assert_eq!(decoded, probe);
    assert_eq!(
        (view.kind(), view.seq(), view.sender(), view.nonce()),
        (
            bpf_maps::clock::PROBE_KIND_REQUEST,
            9,
            1,
            0x1122_3344_5566_7788
        )
    );
    assert_eq!(view.stamp(causeway::clock::probe::USER, 0), Some(123));
}
