//! Watermark math for one transform (ARCHITECTURE.md, "A watermark per operator").
//!
//! `input' = max(input, min(upstream outputs, pending input))` and
//! `output' = max(output, min(input', holds))`: both only move forward, and the output never
//! passes the input or a hold. The maximum timestamp means "no more data".

use weir_sdk::time::{Timestamp, MAX_TIMESTAMP, MIN_TIMESTAMP};

/// The input and output watermark of one transform.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watermarks {
    input: Timestamp,
    output: Timestamp,
}

impl Default for Watermarks {
    fn default() -> Self {
        Self::new()
    }
}

impl Watermarks {
    /// Both watermarks at the beginning of time.
    pub fn new() -> Self {
        Watermarks { input: MIN_TIMESTAMP, output: MIN_TIMESTAMP }
    }

    /// Watermarks restored from a checkpoint.
    pub fn restored(input: Timestamp, output: Timestamp) -> Self {
        Watermarks { input, output: output.min(input) }
    }

    /// The input watermark: no more input (that is not late) before it.
    pub fn input(&self) -> Timestamp {
        self.input
    }

    /// The output watermark: no more output (that is not late) before it.
    pub fn output(&self) -> Timestamp {
        self.output
    }

    /// Advances with the minimum output watermark of the upstream transforms (`MAX_TIMESTAMP`
    /// for a transform without inputs), the earliest timestamp of input not yet processed, and
    /// the earliest hold. Returns whether either watermark moved.
    pub fn advance(&mut self, upstream: Timestamp, pending: Option<Timestamp>, hold: Option<Timestamp>) -> bool {
        let before = *self;
        self.input = self.input.max(upstream.min(pending.unwrap_or(MAX_TIMESTAMP)));
        self.output = self.output.max(self.input.min(hold.unwrap_or(MAX_TIMESTAMP)));
        *self != before
    }

    /// Whether both watermarks reached the end of time.
    pub fn is_done(&self) -> bool {
        self.output >= MAX_TIMESTAMP
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn follows_upstream_and_holds() {
        let mut w = Watermarks::new();
        assert!(w.advance(10, None, None));
        assert_eq!((w.input(), w.output()), (10, 10));
        w.advance(20, None, Some(15));
        assert_eq!((w.input(), w.output()), (20, 15));
        w.advance(30, Some(25), Some(40));
        assert_eq!((w.input(), w.output()), (25, 25));
        // Never backwards.
        assert!(!w.advance(5, Some(1), Some(0)));
        assert_eq!((w.input(), w.output()), (25, 25));
        w.advance(MAX_TIMESTAMP, None, None);
        assert!(w.is_done());
    }

    proptest! {
        #[test]
        fn monotone_and_bounded(steps in proptest::collection::vec((any::<i32>(), proptest::option::of(any::<i32>()), proptest::option::of(any::<i32>())), 1..50)) {
            let mut w = Watermarks::new();
            for (up, pending, hold) in steps {
                let (up, pending, hold) = (up as i64, pending.map(i64::from), hold.map(i64::from));
                let before = w;
                w.advance(up, pending, hold);
                prop_assert!(w.input() >= before.input() && w.output() >= before.output());
                prop_assert!(w.output() <= w.input());
                // The output never passes a live hold unless it had already passed it.
                if let Some(h) = hold {
                    prop_assert!(w.output() <= h.max(before.output()));
                }
                prop_assert!(w.input() <= up.max(before.input()));
            }
        }
    }
}
