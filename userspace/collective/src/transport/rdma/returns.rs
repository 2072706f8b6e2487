//! Which bytes of a receive ring its reader is done with. Bytes are handed
//! out in stream order but may come back in any order (a frame read in place
//! is given back when the engine drops it); the peer may write again only
//! over the prefix that came back in full, so that prefix is the credit.

use std::collections::BTreeMap;

#[derive(Debug, Default)]
pub(super) struct Returns {
    /// Every stream position before this came back.
    freed: u64,
    /// Ranges that came back past a gap: start → end.
    ahead: BTreeMap<u64, u64>,
}

impl Returns {
    /// `[start, end)` came back; returns how far the freed prefix grew.
    pub fn give(&mut self, start: u64, end: u64) -> u64 {
        debug_assert!(start >= self.freed && end > start, "{start}..{end}");
        if start != self.freed {
            self.ahead.insert(start, end);
            return 0;
        }
        let before = self.freed;
        self.freed = end;
        while let Some(e) = self.ahead.remove(&self.freed) {
            self.freed = e;
        }
        self.freed - before
    }

    /// Every position before this came back.
    pub fn freed(&self) -> u64 {
        self.freed
    }

    /// Ranges that came back but wait for an earlier one.
    pub fn waiting(&self) -> usize {
        self.ahead.len()
    }
}

#[cfg(test)]
mod tests {
    use super::Returns;

    #[test]
    fn in_order_returns_free_at_once() {
        let mut r = Returns::default();
        assert_eq!(r.give(0, 10), 10);
        assert_eq!(r.give(10, 15), 5);
        assert_eq!((r.freed(), r.waiting()), (15, 0));
    }

    /// A later range that comes back first frees nothing until the gap
    /// before it is returned; then both are freed together.
    #[test]
    fn a_gap_holds_everything_after_it() {
        let mut r = Returns::default();
        assert_eq!(r.give(0, 4), 4);
        assert_eq!(r.give(9, 12), 0);
        assert_eq!(r.give(6, 9), 0);
        assert_eq!((r.freed(), r.waiting()), (4, 2));
        assert_eq!(r.give(4, 6), 8);
        assert_eq!((r.freed(), r.waiting()), (12, 0));
    }

    /// Any order of return frees exactly the whole stream in the end, and
    /// the prefix never passes a byte that has not come back.
    #[test]
    fn every_order_frees_the_whole_stream_and_never_more() {
        let ranges = [(0u64, 3u64), (3, 4), (4, 9), (9, 10), (10, 16)];
        let mut orders = vec![vec![0usize, 1, 2, 3, 4]];
        // Every permutation of five ranges (Heap's algorithm, iteratively).
        let mut a = [0usize, 1, 2, 3, 4];
        let mut c = [0usize; 5];
        let mut i = 0;
        while i < 5 {
            if c[i] < i {
                if i % 2 == 0 {
                    a.swap(0, i);
                } else {
                    a.swap(c[i], i);
                }
                orders.push(a.to_vec());
                c[i] += 1;
                i = 0;
            } else {
                c[i] = 0;
                i += 1;
            }
        }
        assert_eq!(orders.len(), 120);
        for order in orders {
            let mut r = Returns::default();
            let mut back = [false; 5];
            let mut total = 0;
            for k in order {
                back[k] = true;
                total += r.give(ranges[k].0, ranges[k].1);
                let prefix = back.iter().take_while(|&&b| b).count();
                let expect = if prefix == 0 { 0 } else { ranges[prefix - 1].1 };
                assert_eq!(r.freed(), expect);
                assert_eq!(total, expect);
            }
            assert_eq!((r.freed(), r.waiting()), (16, 0));
        }
    }
}
