//! Windowing conformance: fixed, sliding, session and custom merging windows, timestamp
//! combiners, Combine in windows, and window-assignment properties.

use std::time::Duration;
use weir_sdk::prelude::*;
use weir_sdk::window::Window as W;
use weir_sdk::window_fn::merge_overlapping_interval_windows;
use weir_tests::conformance;

fn iw(a: i64, b: i64) -> W {
    W::Interval(IntervalWindow::new(a, b))
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn tv<T>(v: T, t: i64) -> TimestampedValue<T> {
    TimestampedValue::new(v, t)
}

fn kv(k: &str, v: i64) -> KV<String, i64> {
    KV::new(k.to_string(), v)
}

/// Emits each element with its timestamp, so assertions can check output timestamps.
#[derive(Clone)]
struct WithTimestamp<T>(std::marker::PhantomData<fn(T)>);

impl<T: Element> DoFn for WithTimestamp<T> {
    type In = T;
    type Out = (T, i64);
    fn process(&mut self, v: T, ctx: &mut ProcessContext<'_, (T, i64)>) -> UserResult {
        let ts = ctx.timestamp();
        ctx.output((v, ts));
        Ok(())
    }
}

fn with_ts<T: Element>(pc: &PCollection<T>, name: &str) -> PCollection<(T, i64)> {
    pc.apply(name, ParDo::of(WithTimestamp(std::marker::PhantomData)))
}

fn sorted_values(pc: &PCollection<KV<String, Vec<i64>>>, name: &str) -> PCollection<KV<String, Vec<i64>>> {
    pc.apply(
        name,
        Map::new(|mut kv: KV<String, Vec<i64>>| {
            kv.value.sort();
            kv
        }),
    )
}

/// Nexmark-style custom windows: an auction window `[t, expires)` tagged with the auction id and
/// kind 1 absorbs every bid window (kind 0) of the same auction that starts before it ends.
#[derive(Clone, Debug)]
struct AuctionOrBid;

impl WindowFn for AuctionOrBid {
    fn assign_windows(&self, ts: Timestamp, _: &W, out: &mut Vec<W>) {
        // Not used: elements arrive with their custom windows already set.
        out.push(W::Interval(IntervalWindow::new(ts, ts + 1)));
    }
    fn is_merging(&self) -> bool {
        true
    }
    fn merge_windows(&self, windows: &[W]) -> Vec<(Vec<W>, W)> {
        let mut out = Vec::new();
        for a in windows {
            let W::Custom(auction) = a else { continue };
            if auction.kind != 1 {
                continue;
            }
            let mut merged = vec![*a];
            for b in windows {
                if let W::Custom(bid) = b {
                    if bid.kind == 0 && bid.tag == auction.tag && bid.start < auction.end {
                        merged.push(*b);
                    }
                }
            }
            if merged.len() > 1 {
                out.push((merged, *a));
            }
        }
        out
    }
    fn is_compatible(&self, other: &dyn WindowFn) -> bool {
        other.as_any().is::<AuctionOrBid>()
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Assigns custom windows from (auction id, is auction, end) triples.
#[derive(Clone, Debug)]
struct AssignAuctionOrBid;

impl WindowFn for AssignAuctionOrBid {
    fn assign_windows(&self, ts: Timestamp, _: &W, out: &mut Vec<W>) {
        // Encoded in the timestamp for the test: auctions at even seconds, bids at odd ones.
        let id = ts / 1000;
        let is_auction = ts % 1000 == 0;
        let (start, end) = if is_auction { (ts, ts + 10_000) } else { (ts, ts + 100) };
        out.push(W::Custom(CustomWindow { start, end, tag: id / 100, kind: u8::from(is_auction) }));
    }
    fn is_merging(&self) -> bool {
        true
    }
    fn merge_windows(&self, windows: &[W]) -> Vec<(Vec<W>, W)> {
        AuctionOrBid.merge_windows(windows)
    }
    fn is_compatible(&self, other: &dyn WindowFn) -> bool {
        other.as_any().is::<AssignAuctionOrBid>()
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

conformance! {
    fn fixed_windows_with_each_timestamp_combiner(p) {
        let input = p.apply("Create", Create::timestamped(vec![tv(kv("k", 1), 0), tv(kv("k", 2), 4), tv(kv("k", 3), 10)]));
        for (name, tc, expected) in [
            ("Earliest", TimestampCombiner::Earliest, vec![(kv("k", 3), 0), (kv("k", 3), 10)]),
            ("Latest", TimestampCombiner::Latest, vec![(kv("k", 3), 4), (kv("k", 3), 10)]),
            ("EndOfWindow", TimestampCombiner::EndOfWindow, vec![(kv("k", 3), 9), (kv("k", 3), 19)]),
        ] {
            let summed = input
                .apply(&format!("{name}Window"), Window::into(FixedWindows::of(ms(10))).with_timestamp_combiner(tc))
                .apply(&format!("{name}Sum"), Sum::per_key());
            assert_that(&with_ts(&summed, &format!("{name}Ts"))).contains_in_any_order(expected);
        }
        p.run();
    }

    fn group_by_key_timestamps_from_holds(p) {
        let input = p.apply("Create", Create::timestamped(vec![tv(kv("k", 1), 0), tv(kv("k", 2), 10)]));
        let early = input
            .apply("WE", Window::into(FixedWindows::of(Duration::from_secs(600))).with_timestamp_combiner(TimestampCombiner::Earliest))
            .apply("GE", GroupByKey::create())
            .apply("KE", Keys::create());
        assert_that(&with_ts(&early, "TE")).contains_in_any_order(vec![("k".to_string(), 0)]);
        let late = input
            .apply("WL", Window::into(FixedWindows::of(Duration::from_secs(600))).with_timestamp_combiner(TimestampCombiner::Latest))
            .apply("GL", GroupByKey::create())
            .apply("KL", Keys::create());
        assert_that(&with_ts(&late, "TL")).contains_in_any_order(vec![("k".to_string(), 10)]);
        p.run();
    }

    fn sliding_windows(p) {
        let input = p.apply("Create", Create::timestamped(vec![tv(kv("k", 1), 1), tv(kv("k", 2), 7), tv(kv("k", 4), 12)]));
        let sums = input
            .apply("Window", Window::into(SlidingWindows::of(ms(10)).every(ms(5))))
            .apply("Sum", Sum::per_key());
        assert_that(&sums).in_window(iw(-5, 5)).contains_in_any_order(vec![kv("k", 1)]);
        assert_that(&sums).in_window(iw(0, 10)).contains_in_any_order(vec![kv("k", 3)]);
        assert_that(&sums).in_window(iw(5, 15)).contains_in_any_order(vec![kv("k", 6)]);
        assert_that(&sums).in_window(iw(10, 20)).contains_in_any_order(vec![kv("k", 4)]);
        assert_that(&sums).contains_in_any_order(vec![kv("k", 1), kv("k", 3), kv("k", 6), kv("k", 4)]);
        p.run();
    }

    fn sliding_windows_keep_earliest_output_times(p) {
        // Beam's WindowingTest#testNonPartitioningWindowing: each window's output is at the
        // earliest of its elements' own timestamps (Beam no longer shifts them past earlier
        // windows).
        let input = p.apply("Create", Create::timestamped(vec![tv(kv("k", 1), 1), tv(kv("k", 2), 7)]));
        let grouped = input
            .apply("Window", Window::into(SlidingWindows::of(ms(10)).every(ms(5))).with_timestamp_combiner(TimestampCombiner::Earliest))
            .apply("Group", GroupByKey::create())
            .apply("Keys", Keys::create());
        // [-5,5): {1} -> 1. [0,10): {1,7} -> 1. [5,15): {7} -> 7.
        assert_that(&with_ts(&grouped, "Ts")).contains_in_any_order(vec![("k".to_string(), 1), ("k".to_string(), 1), ("k".to_string(), 7)]);
        p.run();
    }

    fn session_windows_merge(p) {
        let input = p.apply("Create", Create::timestamped(vec![
            tv(kv("a", 1), 1), tv(kv("a", 2), 5), tv(kv("a", 3), 20), tv(kv("b", 4), 5), tv(kv("a", 5), 30),
        ]));
        let grouped = sorted_values(
            &input.apply("Sessions", Window::into(Sessions::with_gap_duration(ms(10)))).apply("Group", GroupByKey::create()),
            "Sort",
        );
        assert_that(&grouped).in_window(iw(1, 15)).contains_in_any_order(vec![KV::new("a".to_string(), vec![1, 2])]);
        assert_that(&grouped).in_window(iw(5, 15)).contains_in_any_order(vec![KV::new("b".to_string(), vec![4])]);
        // [20,30) and [30,40) only touch: they do not merge.
        assert_that(&grouped).in_window(iw(20, 30)).contains_in_any_order(vec![KV::new("a".to_string(), vec![3])]);
        assert_that(&grouped).in_window(iw(30, 40)).contains_in_any_order(vec![KV::new("a".to_string(), vec![5])]);
        let counts = input
            .apply("Sessions2", Window::into(Sessions::with_gap_duration(ms(10))))
            .apply("Count", Count::per_key());
        assert_that(&counts).contains_in_any_order(vec![kv("a", 2), kv("b", 1), kv("a", 1), kv("a", 1)]);
        p.run();
    }

    fn sessions_merge_across_every_element_of_a_batch(p) {
        // 300 elements of one key out of time order, each 50 ms session overlapping the next:
        // a later element of a batch merges the window an earlier one went to. One session.
        let input: Vec<TimestampedValue<KV<String, i64>>> = (0..300i64).map(|i| tv(kv("k", 1), (i * 37) % 300 * 10)).collect();
        let counts = p
            .apply("Create", Create::timestamped(input))
            .apply("Sessions", Window::into(Sessions::with_gap_duration(ms(50))))
            .apply("Sum", Sum::per_key());
        assert_that(&counts).contains_in_any_order(vec![kv("k", 300)]);
        assert_that(&counts).in_window(iw(0, 3040)).contains_in_any_order(vec![kv("k", 300)]);
        p.run();
    }

    fn session_merging_in_streaming_bridges_gaps(p) {
        // Two sessions that a later element bridges into one.
        let stream = TestStream::create()
            .add_elements(vec![tv(kv("a", 1), 0), tv(kv("a", 2), 20)])
            .add_elements(vec![tv(kv("a", 3), 10)])
            .advance_watermark_to_infinity();
        let sums = p
            .apply("Stream", stream)
            .apply("Sessions", Window::into(Sessions::with_gap_duration(ms(11))))
            .apply("Sum", Sum::per_key());
        assert_that(&sums).in_window(iw(0, 31)).contains_in_any_order(vec![kv("a", 6)]);
        assert_that(&sums).contains_in_any_order(vec![kv("a", 6)]);
        p.run();
    }

    fn custom_merging_windows(p) {
        // Auction 1 at t=100000 (window [100000,110000) tag 1); bids of auction 1 at 100001 and
        // 109999 merge into it; a bid starting at 110001 does not and stays alone.
        let input = p.apply("Create", Create::timestamped(vec![
            tv(kv("x", 100), 100_000), tv(kv("x", 1), 100_001), tv(kv("x", 2), 109_999), tv(kv("x", 7), 110_001),
        ]));
        let sums = input.apply("Window", Window::into(AssignAuctionOrBid)).apply("Sum", Sum::per_key());
        let auction = W::Custom(CustomWindow { start: 100_000, end: 110_000, tag: 1, kind: 1 });
        assert_that(&sums).in_window(auction).contains_in_any_order(vec![kv("x", 103)]);
        assert_that(&sums).contains_in_any_order(vec![kv("x", 103), kv("x", 7)]);
        p.run();
    }

    fn test_stream_elements_at_almost_positive_infinity(p) {
        // Beam's TestStreamTest.testElementsAtAlmostPositiveInfinity: elements at the end of the
        // global window, and one a millisecond before the maximum timestamp, are valid input.
        use weir_sdk::time::{GLOBAL_WINDOW_MAX_TIMESTAMP as END, MAX_TIMESTAMP};
        let stream = TestStream::create()
            .add_elements(vec![tv("foo".to_string(), END), tv("bar".to_string(), END)])
            .add_elements(vec![tv("last".to_string(), MAX_TIMESTAMP - 1)])
            .advance_watermark_to_infinity();
        let input = p.apply("Stream", stream);
        let windows = FixedWindows::of(Duration::from_secs(6 * 3600));
        let grouped = input
            .apply("Filter", Filter::by(|s: &String| s != "last"))
            .apply("Window", Window::into(windows))
            .apply("WithKeys", WithKeys::of(|_: &String| 1i64))
            .apply("Group", GroupByKey::create())
            .apply("Values", FlatMap::new(|kv: KV<i64, Vec<String>>| kv.value));
        let six_hours = 6 * 3600 * 1000;
        let start = END - END.rem_euclid(six_hours);
        assert_that(&grouped).in_window(iw(start, start + six_hours)).contains_in_any_order(vec!["foo".to_string(), "bar".to_string()]);
        let stamps = input.apply("Stamps", Reify::timestamps()).apply("Render", Map::new(|t: TimestampedValue<String>| (t.value, t.timestamp)));
        assert_that(&stamps).contains_in_any_order(vec![("foo".to_string(), END), ("bar".to_string(), END), ("last".to_string(), MAX_TIMESTAMP - 1)]);
        p.run();
    }

    fn combine_globally_and_per_key_in_windows(p) {
        let input = p
            .apply("Create", Create::timestamped(vec![tv(kv("a", 1), 1), tv(kv("a", 2), 11), tv(kv("b", 3), 12)]))
            .apply("Window", Window::into(FixedWindows::of(ms(10))));
        let totals = input.apply("Values", Values::create()).apply("Sum", Sum::globally().without_defaults());
        assert_that(&totals).in_window(iw(0, 10)).contains_in_any_order(vec![1]);
        assert_that(&totals).in_window(iw(10, 20)).contains_in_any_order(vec![5]);
        let per_key = input.apply("PerKey", Count::per_key());
        assert_that(&per_key).in_window(iw(10, 20)).contains_in_any_order(vec![kv("a", 1), kv("b", 1)]);
        p.run();
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn an_element_is_in_exactly_the_windows_containing_it(ts in -100_000i64..100_000, size in 1u64..50, period in 1u64..50, offset in 0u64..50) {
            let f = FixedWindows::of(ms(size)).with_offset(ms(offset));
            let mut out = Vec::new();
            f.assign_windows(ts, &W::Global, &mut out);
            prop_assert_eq!(out.len(), 1);
            let w = out[0].interval().unwrap();
            prop_assert!(w.contains(ts) && w.end - w.start == size as i64 && (w.start - offset as i64).rem_euclid(size as i64) == 0);

            let s = SlidingWindows::of(ms(size)).every(ms(period));
            let mut out = Vec::new();
            s.assign_windows(ts, &W::Global, &mut out);
            let starts: Vec<i64> = out.iter().map(|w| w.interval().unwrap().start).collect();
            // Every window contains ts, and every window start aligned to the period with
            // start <= ts < start + size is present.
            for w in &out {
                prop_assert!(w.interval().unwrap().contains(ts));
            }
            let period = s.period_millis();
            let mut expected = Vec::new();
            let mut start = ts - ts.rem_euclid(period);
            while start > ts - size as i64 {
                expected.push(start);
                start -= period;
            }
            prop_assert_eq!(starts, expected);
        }

        #[test]
        fn session_merging_is_independent_of_arrival_order(mut ts in proptest::collection::vec(0i64..200, 1..30), gap in 1i64..30, seed in any::<u64>()) {
            let windows = |ts: &[i64]| {
                // Incremental merging, as the engine does it: add one window, merge, repeat.
                let mut active: Vec<W> = Vec::new();
                for &t in ts {
                    let w = iw(t, t + gap);
                    if !active.contains(&w) {
                        active.push(w);
                    }
                    for (sources, merged) in merge_overlapping_interval_windows(&active) {
                        active.retain(|a| !sources.contains(a));
                        if !active.contains(&merged) {
                            active.push(merged);
                        }
                    }
                }
                active.sort();
                active
            };
            let first = windows(&ts);
            let mut state = seed;
            for i in (1..ts.len()).rev() {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ts.swap(i, (state >> 33) as usize % (i + 1));
            }
            prop_assert_eq!(first, windows(&ts));
        }
    }
}

mod reify {
    use super::*;
    use weir_sdk::pane::PaneInfo;

    conformance! {
        fn reify_turns_timestamps_windows_and_panes_into_values(p) {
            let words = p.apply("Create", Create::timestamped(vec![tv("a".to_string(), 5), tv("b".to_string(), 12)]));
            assert_that(&words.apply("Stamps", Reify::timestamps())).contains_in_any_order(vec![tv("a".to_string(), 5), tv("b".to_string(), 12)]);
            let windowed = words.apply("Fixed", Window::into(FixedWindows::of(ms(10))));
            // Elements no trigger produced are in no firing (Beam's PaneInfo.NO_FIRING).
            let in_windows = windowed.apply("Windows", Reify::windows());
            assert_that(&in_windows).contains_in_any_order(vec![
                ValueInSingleWindow { value: "a".to_string(), timestamp: 5, window: iw(0, 10), pane: PaneInfo::NO_FIRING },
                ValueInSingleWindow { value: "b".to_string(), timestamp: 12, window: iw(10, 20), pane: PaneInfo::NO_FIRING },
            ]);
            // After a GroupByKey: the end of the window, and the one on-time pane.
            let grouped = windowed
                .apply("Key", WithKeys::of(|_: &String| 1i64))
                .apply("Group", GroupByKey::create())
                .apply("InValue", Reify::windows_in_value());
            assert_that(&grouped).contains_in_any_order(vec![
                KV::new(1i64, ValueInSingleWindow { value: vec!["a".to_string()], timestamp: 9, window: iw(0, 10), pane: PaneInfo::ON_TIME_AND_ONLY_FIRING }),
                KV::new(1i64, ValueInSingleWindow { value: vec!["b".to_string()], timestamp: 19, window: iw(10, 20), pane: PaneInfo::ON_TIME_AND_ONLY_FIRING }),
            ]);
            let keyed = words.apply("KeyByLen", WithKeys::of(|w: &String| w.len())).apply("StampsInValue", Reify::timestamps_in_value());
            assert_that(&keyed).contains_in_any_order(vec![KV::new(1usize, tv("a".to_string(), 5)), KV::new(1, tv("b".to_string(), 12))]);
            // Timestamps from values, then read back.
            let moved = p
                .apply("Stamped", Create::of(vec![tv(7i64, 40), tv(8, 3)]))
                .apply("Extract", Reify::extract_timestamps_from_values())
                .apply("Back", Reify::timestamps());
            assert_that(&moved).contains_in_any_order(vec![tv(7i64, 40), tv(8, 3)]);
            p.run();
        }

        fn with_timestamps_moves_elements_to_new_timestamps(p) {
            let logs = p.apply("Logs", Create::of(vec![(1_000i64, "x".to_string()), (15, "y".to_string())]));
            let counts = logs
                .apply("Stamp", WithTimestamps::of(|l: &(i64, String)| l.0))
                .apply("Fixed", Window::into(FixedWindows::of(ms(100))))
                .apply("Count", Count::per_element())
                .apply("Windows", Reify::windows());
            let got = counts.apply("Render", Map::new(|v: ValueInSingleWindow<KV<(i64, String), i64>>| (v.value.key.1, v.window)));
            assert_that(&got).contains_in_any_order(vec![("x".to_string(), iw(1000, 1100)), ("y".to_string(), iw(0, 100))]);
            // Earlier than the element, within the allowed skew.
            let skewed = p
                .apply("Late", Create::timestamped(vec![tv(100i64, 100)]))
                .apply("Back", WithTimestamps::of(|t: &i64| t - 60).with_allowed_timestamp_skew(ms(60)))
                .apply("Stamps", Reify::timestamps());
            assert_that(&skewed).contains_in_any_order(vec![tv(100i64, 40)]);
            p.run();
        }
    }

    #[test]
    fn with_timestamps_refuses_a_timestamp_before_the_element_beyond_the_skew() {
        let p = weir_tests::pipeline("direct");
        p.apply("Late", Create::timestamped(vec![tv(100i64, 100)]))
            .apply("Back", WithTimestamps::of(|t: &i64| t - 61).with_allowed_timestamp_skew(ms(60)));
        let err = p.try_run().unwrap_err().to_string();
        assert!(
            err.contains("Back") && err.contains("Cannot output with timestamp 39") && err.contains("skew"),
            "{err}"
        );
    }
}
