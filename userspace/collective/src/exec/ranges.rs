//! The byte ranges of one receive that have arrived, kept disjoint and merged.

use std::ops::Range;

/// Sorted, disjoint, non-adjacent ranges.
#[derive(Debug, Default)]
pub(super) struct Received {
    ranges: Vec<Range<usize>>,
    total: usize,
}

impl Received {
    /// Adds `r`; false (and nothing added) if it overlaps what arrived before.
    pub fn insert(&mut self, r: Range<usize>) -> bool {
        if r.is_empty() {
            return true;
        }
        // The first range that ends after r starts is the only one that can overlap.
        let k = self.ranges.partition_point(|x| x.end <= r.start);
        if self.ranges.get(k).is_some_and(|x| x.start < r.end) {
            return false;
        }
        self.total += r.len();
        let left = k > 0 && self.ranges[k - 1].end == r.start;
        let right = self.ranges.get(k).is_some_and(|x| x.start == r.end);
        match (left, right) {
            (true, true) => {
                self.ranges[k - 1].end = self.ranges[k].end;
                self.ranges.remove(k);
            }
            (true, false) => self.ranges[k - 1].end = r.end,
            (false, true) => self.ranges[k].start = r.start,
            (false, false) => self.ranges.insert(k, r),
        }
        true
    }

    /// Whether all of `r` has arrived.
    pub fn covers(&self, r: Range<usize>) -> bool {
        if r.is_empty() {
            return true;
        }
        let k = self.ranges.partition_point(|x| x.end <= r.start);
        self.ranges
            .get(k)
            .is_some_and(|x| x.start <= r.start && r.end <= x.end)
    }

    pub fn total(&self) -> usize {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_neighbours_and_refuses_overlaps() {
        let mut r = Received::default();
        assert!(r.insert(8..16));
        assert!(r.insert(0..8));
        assert!(r.insert(24..32));
        assert_eq!(r.ranges, vec![0..16, 24..32]);
        assert!(!r.insert(4..12), "inside");
        assert!(!r.insert(12..20), "overlaps the end of the first");
        assert!(!r.insert(20..28), "overlaps the start of the second");
        assert!(!r.insert(0..40), "covers both");
        assert!(r.insert(16..24));
        assert_eq!(r.ranges, vec![0..32]);
        assert_eq!(r.total(), 32);
        assert!(!r.insert(0..8), "a duplicate");
        assert_eq!(r.total(), 32);
        let mut r = Received::default();
        assert!(r.insert(0..8) && r.insert(10..20));
        assert!(!r.insert(8..12), "touches the first, overlaps the second");
        assert!(r.insert(8..10));
        assert_eq!(r.ranges, vec![0..20]);
    }

    #[test]
    fn covers_only_what_arrived_whole() {
        let mut r = Received::default();
        assert!(r.insert(0..8) && r.insert(16..24));
        assert!(r.covers(0..8) && r.covers(2..6) && r.covers(16..24));
        assert!(r.covers(5..5), "nothing is always there");
        assert!(!r.covers(4..12), "runs past the first range");
        assert!(!r.covers(8..16), "the gap");
        assert!(!r.covers(0..24), "spans the gap");
        assert!(!r.covers(24..32));
    }
}
