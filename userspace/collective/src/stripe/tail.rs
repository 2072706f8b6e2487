//! The end of an operation: its last frames cut across the paths so that
//! every path lands its part at the same time.
//!
//! In the bulk of an operation the stripe hands whole frames to the path
//! with the most room in its share ([`super::sched`]); the paths drain what
//! they hold at their own rates, so the split follows them. At the end that
//! granularity is what is left: the engine keeps a few frames in flight per
//! peer, so the last ones go one or two per path, and a 1 MiB frame is
//! 84 ms of a rank's half of a 100 Mbit/s path. On `dual` (seven 64 MiB
//! allreduces, the emulators' interface counters read every 4 ms) the four
//! path directions stopped carrying 52–304 ms apart (median 127 ms); with
//! the cut, 41–146 ms (median 71 ms).
//!
//! [`split`] cuts a frame of the operation's tail (`exec::SendChunk::tail`)
//! into one piece per path, sized so that each lands when the others do
//! (water-filling the landing times: a path's next byte lands after what it
//! has not sent yet, at its rate, plus its one-way delay). The pieces are
//! frames of their own at their offsets; the receiver places chunks by
//! offset, so nothing else changes. Only payloads that are the elements
//! themselves (no WAN codec) are cut, on element boundaries.
//!
//! Pure: bytes, rates and delays in, pieces out.

/// One path as a frame's piece would see it: the connection that would
/// carry it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Lane {
    /// When a byte handed over now starts to be sent: what the connection
    /// has not sent yet at its rate, ns.
    pub busy_ns: f64,
    /// Bytes/s the connection sends at.
    pub rate: f64,
    /// One-way delay of the path, ns.
    pub one_way_ns: f64,
}

/// A piece of a frame: `len` bytes from `start`, for lane `lane`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    pub lane: usize,
    pub start: u64,
    pub len: u64,
}

/// No piece shorter than this (its frame header and the receiver's apply
/// cost more than the landing time it saves).
pub(crate) const MIN_PIECE: u64 = 64 << 10;

/// Cuts `len` bytes into pieces (multiples of `align`, at least
/// [`MIN_PIECE`] each, in lane order) so that all land together; a lane
/// whose first byte would land after the others' last gets nothing. Lanes
/// with no rate are left out; with none usable, everything goes to lane 0.
pub(crate) fn split(lanes: &[Lane], len: u64, align: u64) -> Vec<Piece> {
    let align = align.max(1);
    let start_of = |l: &Lane| l.busy_ns + l.one_way_ns;
    let mut usable: Vec<usize> = (0..lanes.len())
        .filter(|&i| lanes[i].rate > 0.0 && lanes[i].rate.is_finite())
        .collect();
    if usable.is_empty() {
        return vec![Piece {
            lane: 0,
            start: 0,
            len,
        }];
    }
    usable.sort_by(|&a, &b| start_of(&lanes[a]).total_cmp(&start_of(&lanes[b])));
    // Water level T: Σ rate_i · (T − start_i) over the lanes below T = len.
    let mut level = 0.0;
    let mut used = 0;
    for k in 1..=usable.len() {
        let set = &usable[..k];
        let rate: f64 = set.iter().map(|&i| lanes[i].rate).sum();
        let weighted: f64 = set
            .iter()
            .map(|&i| lanes[i].rate * start_of(&lanes[i]))
            .sum();
        let t = (len as f64 * 1e9 + weighted) / rate;
        level = t;
        used = k;
        match usable.get(k) {
            Some(&next) if start_of(&lanes[next]) < t => continue,
            _ => break,
        }
    }
    // Bytes per lane, rounded down to `align`; small pieces folded into
    // the largest; the remainder to the largest.
    let mut parts: Vec<(usize, u64)> = usable[..used]
        .iter()
        .map(|&i| {
            let b = (lanes[i].rate * (level - start_of(&lanes[i])) / 1e9).max(0.0);
            (i, (b as u64) / align * align)
        })
        .collect();
    while parts.len() > 1 {
        let (k, small) = parts
            .iter()
            .enumerate()
            .min_by_key(|(_, p)| p.1)
            .map_or((0, 0), |(k, p)| (k, p.1));
        if small >= MIN_PIECE {
            break;
        }
        parts.remove(k);
    }
    // What is left holds at least MIN_PIECE each, or is one part.
    let assigned: u64 = parts.iter().map(|p| p.1).sum();
    if let Some(b) = parts.iter_mut().max_by_key(|p| p.1) {
        b.1 += len - assigned.min(len);
    }
    parts.sort_by_key(|p| p.0);
    let mut at = 0;
    parts
        .into_iter()
        .map(|(lane, n)| {
            let piece = Piece {
                lane,
                start: at,
                len: n,
            };
            at += n;
            piece
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// A rank's halves of `dual`'s paths: 100 Mbit/s with 20 ms one way,
    /// 50 Mbit/s with 30 ms.
    fn lanes(busy0_ms: f64, busy1_ms: f64) -> Vec<Lane> {
        vec![
            Lane {
                busy_ns: busy0_ms * 1e6,
                rate: 12.5e6,
                one_way_ns: 20e6,
            },
            Lane {
                busy_ns: busy1_ms * 1e6,
                rate: 6.25e6,
                one_way_ns: 30e6,
            },
        ]
    }

    fn land(l: &Lane, p: &Piece) -> f64 {
        l.busy_ns + l.one_way_ns + p.len as f64 / l.rate * 1e9
    }

    /// Idle paths: the faster gets more, both land within one element.
    #[test]
    fn idle_paths_land_their_pieces_together() {
        let l = lanes(0.0, 0.0);
        let p = split(&l, MIB, 4);
        assert_eq!(p.len(), 2, "{p:?}");
        assert_eq!(p[0].start, 0);
        assert_eq!(p[1].start, p[0].len);
        assert_eq!(p[0].len + p[1].len, MIB);
        assert!(p.iter().all(|x| x.len % 4 == 0));
        let (a, b) = (land(&l[0], &p[0]), land(&l[1], &p[1]));
        assert!((a - b).abs() < 1e5, "{a} vs {b} ns");
        // Level (1 MiB + 12.5e6·20 ms + 6.25e6·30 ms) / 18.75 MB/s = 79.3 ms:
        // 741 KB on path 0.
        assert!(p[0].len > 730_000 && p[0].len < 750_000, "{p:?}");
    }

    /// A path still busy for longer than the whole frame takes on the other
    /// gets nothing.
    #[test]
    fn a_path_busy_past_the_others_landing_gets_nothing() {
        let p = split(&lanes(0.0, 200.0), MIB, 4);
        assert_eq!(
            p,
            vec![Piece {
                lane: 0,
                start: 0,
                len: MIB
            }]
        );
        let p = split(&lanes(300.0, 0.0), MIB, 4);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].lane, 1);
    }

    /// A piece below MIN_PIECE is folded into the other: one frame, not two.
    #[test]
    fn tiny_pieces_are_not_sent_on_their_own() {
        // Path 1 would land its first byte 9 ms before path 0's last: 58 KB.
        let p = split(&lanes(0.0, 60.0), MIB, 4);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].len, MIB);
        let small = split(&lanes(0.0, 0.0), 96 << 10, 4);
        assert_eq!(small.len(), 1, "{small:?}");
    }

    /// Unmeasured paths take nothing; with none measured, lane 0 takes all.
    #[test]
    fn unmeasured_lanes_are_left_out() {
        let mut l = lanes(0.0, 0.0);
        l[1].rate = 0.0;
        assert_eq!(split(&l, MIB, 4).len(), 1);
        l[0].rate = f64::NAN;
        assert_eq!(
            split(&l, MIB, 4),
            vec![Piece {
                lane: 0,
                start: 0,
                len: MIB
            }]
        );
    }

    proptest::proptest! {
        /// Pieces cover the frame exactly, in order, aligned, each large
        /// enough, and no lane's piece lands later than another lane's
        /// would by more than one aligned element or a tiny piece allows.
        #[test]
        fn pieces_tile_the_frame(
            len in 0u64..(4 * MIB),
            b0 in 0.0f64..400.0,
            b1 in 0.0f64..400.0,
            r1 in 1e6f64..50e6,
        ) {
            let mut l = lanes(b0, b1);
            l[1].rate = r1;
            let p = split(&l, len / 8 * 8, 8);
            let mut at = 0;
            for x in &p {
                proptest::prop_assert_eq!(x.start, at);
                proptest::prop_assert_eq!(x.len % 8, 0);
                proptest::prop_assert!(p.len() == 1 || x.len >= MIN_PIECE);
                at += x.len;
            }
            proptest::prop_assert_eq!(at, len / 8 * 8);
            if p.len() == 2 {
                let (a, b) = (land(&l[0], &p[0]), land(&l[1], &p[1]));
                let slack = 16.0 / l[0].rate.min(l[1].rate) * 1e9 + 1e3;
                proptest::prop_assert!((a - b).abs() <= slack, "{} vs {}", a, b);
            }
        }
    }
}
