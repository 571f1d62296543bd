//! Tests of the engine's parts together.

use super::*;
use std::hash::BuildHasher;
use weir_sdk::windowed_value::WindowedValue;
use weir_sdk::KV;

type Grouped = WindowedValue<KV<i64, Vec<i64>>>;

fn grouped(batch: Batch) -> Vec<(i64, Vec<i64>, Timestamp, Timing)> {
    let groups = batch.downcast::<Vec<Grouped>>().expect("grouped batch");
    groups.into_iter().map(|g| (g.value.key, g.value.value, g.timestamp, g.pane.timing)).collect()
}

/// Fixed 10 ms windows, 5 ms allowed lateness, output at the earliest element.
fn engine() -> GroupAlsoByWindow {
    let mut strategy =
        WindowingStrategy::of(Arc::new(weir_sdk::window_fn::FixedWindows::of(std::time::Duration::from_millis(10))));
    strategy.allowed_lateness_ms = 5;
    strategy.timestamp_combiner = TimestampCombiner::Earliest;
    GroupAlsoByWindow::new("G", strategy, Values::Buffer(weir_sdk::runner_api::group_kernel::<i64, i64>()))
}

fn input(rows: &[(i64, i64, Timestamp)]) -> Batch {
    let window = |t: i64| Window::Interval(weir_sdk::window::IntervalWindow::new(t / 10 * 10, t / 10 * 10 + 10));
    let rows: Vec<WindowedValue<KV<i64, i64>>> = rows
        .iter()
        .map(|&(k, v, t)| WindowedValue {
            value: KV::new(k, v),
            timestamp: t,
            window: window(t),
            pane: PaneInfo::NO_FIRING,
        })
        .collect();
    Batch::new(rows)
}

#[test]
fn state_grouped_before_the_watermark_moves_gets_its_timers_and_holds_when_it_does() {
    // Input while the input watermark is at its minimum (a bounded input), then the
    // watermark moves for the first time, from a restored checkpoint or not.
    for restored in [false, true] {
        let mut gaw = engine();
        let out = gaw.process(input(&[(1, 10, 3), (1, 11, 12), (2, 20, 4)]), 0).unwrap();
        assert!(grouped(out).is_empty());
        assert_eq!(gaw.hold(), Some(MIN_TIMESTAMP), "nothing can pass the input watermark yet");
        if restored {
            let entries = gaw.state_entries().unwrap();
            gaw = engine();
            gaw.restore_entries(entries).unwrap();
        }
        // Both windows' holds are in place: the earliest element of each.
        assert!(grouped(gaw.advance(5, 0).unwrap()).is_empty());
        assert_eq!(gaw.hold(), Some(3));
        assert_eq!(gaw.watermarks().output(), 3);
        // The end-of-window timers of [0, 10) fire; [10, 20) still holds at 12.
        let mut fired = grouped(gaw.advance(10, 0).unwrap());
        fired.sort_by_key(|f| f.0);
        assert_eq!(fired, vec![(1, vec![10], 3, Timing::OnTime), (2, vec![20], 4, Timing::OnTime)]);
        assert_eq!(gaw.hold(), Some(12));
        // Late data within the allowed lateness fires a late pane at once; past the
        // garbage-collection timer of [0, 10) it is dropped.
        let late = grouped(gaw.process(input(&[(1, 13, 5)]), 0).unwrap());
        assert_eq!(late, vec![(1, vec![13], 9, Timing::Late)]);
        assert!(grouped(gaw.advance(15, 0).unwrap()).is_empty());
        assert!(grouped(gaw.process(input(&[(1, 14, 6)]), 0).unwrap()).is_empty());
        assert_eq!(gaw.dropped().late, 1);
        assert_eq!(grouped(gaw.advance(20, 0).unwrap()), vec![(1, vec![11], 12, Timing::OnTime)]);
        assert_eq!(gaw.hold(), None);
        assert_eq!(grouped(gaw.advance(MAX_TIMESTAMP, 0).unwrap()), vec![]);
        assert!(gaw.is_empty());
    }
}

#[test]
fn window_sets_find_every_window_below_and_above_the_linear_limit() {
    let window = |i: i64| Window::Interval(weir_sdk::window::IntervalWindow::new(i * 10, i * 10 + 5));
    let mut set = WindowSet::default();
    for round in 0..2 {
        set.clear();
        for i in 0..40 {
            assert_eq!(set.add(window(i)), (i as usize, true), "round {round}");
            // Adding again finds it where it is.
            assert_eq!(set.add(window(i)), (i as usize, false));
            for j in 0..=i {
                assert_eq!(set.position(&window(j)), Some(j as usize), "{j} of {i}");
            }
            assert_eq!(set.position(&window(i + 1)), None);
        }
        assert_eq!((set.len(), set.windows()), (40, &(0..40).map(window).collect::<Vec<_>>()[..]));
    }
}

#[test]
fn keys_hash_compare_and_order_as_their_bytes_inline_or_shared() {
    let short: &[u8] = b"k";
    let edge = [7u8; INLINE_KEY];
    let long = [7u8; INLINE_KEY + 1];
    let keys: Vec<Key> = [short, &edge[..], &long[..], b""].iter().map(|k| Key::from(*k)).collect();
    assert!(matches!(keys[0], Key::Inline { .. }) && matches!(keys[1], Key::Inline { .. }));
    assert!(matches!(keys[2], Key::Shared(_)));
    let hasher = hashbrown::DefaultHashBuilder::default();
    for (k, bytes) in keys.iter().zip([short, &edge[..], &long[..], b""]) {
        assert_eq!(&**k, bytes);
        assert_eq!(hasher.hash_one(k), hasher.hash_one(bytes));
    }
    // Found in a map by their bytes, whichever form they take.
    let map: hashbrown::HashMap<Key, usize> = keys.iter().cloned().zip(0..).collect();
    assert_eq!(map.get(&long[..]), Some(&2));
    assert_eq!(map.get(&edge[..]), Some(&1));
    assert_eq!(map.get(&b"x"[..]), None);
    // Ordered as byte strings: a prefix first, across the two forms.
    let mut sorted = keys.clone();
    sorted.sort();
    let order: Vec<&[u8]> = sorted.iter().map(|k| &**k).collect();
    assert_eq!(order, vec![&b""[..], &edge[..], &long[..], short]);
}

/// Merges [0, 10) and [20, 30) into [0, 30), which merges on with [40, 50) into [0, 50).
#[derive(Debug)]
struct ChainedMerges;

impl weir_sdk::window_fn::WindowFn for ChainedMerges {
    fn assign_windows(&self, _: Timestamp, window: &Window, out: &mut Vec<Window>) {
        out.push(*window);
    }
    fn is_merging(&self) -> bool {
        true
    }
    fn is_compatible(&self, other: &dyn weir_sdk::window_fn::WindowFn) -> bool {
        other.as_any().is::<ChainedMerges>()
    }
    fn merge_windows(&self, windows: &[Window]) -> Vec<(Vec<Window>, Window)> {
        let w = |a, b| Window::Interval(weir_sdk::window::IntervalWindow::new(a, b));
        if !windows.contains(&w(0, 10)) {
            return Vec::new();
        }
        vec![(vec![w(0, 10), w(20, 30)], w(0, 30)), (vec![w(0, 30), w(40, 50)], w(0, 50))]
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[test]
fn a_window_merged_into_one_that_merges_on_ends_in_the_last() {
    let strategy = WindowingStrategy::of(Arc::new(ChainedMerges));
    let kernel = weir_sdk::runner_api::group_kernel::<i64, i64>();
    let mut gaw = GroupAlsoByWindow::new("G", strategy, Values::Buffer(kernel));
    assert!(grouped(gaw.process(input(&[(1, 1, 5), (1, 2, 25), (1, 3, 45)]), 0).unwrap()).is_empty());
    // One state: the intermediate [0, 30) keeps none.
    assert_eq!(gaw.state_size(), 1);
    let mut fired = grouped(gaw.advance(60, 0).unwrap());
    fired[0].1.sort();
    assert_eq!(fired, vec![(1, vec![1, 2, 3], 49, Timing::OnTime)]);
    assert!(gaw.is_empty());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

    /// Issue 16: restoring state entries of any bytes, or real entries with bytes changed,
    /// gives an error naming the step or a state the engine goes on with; never a panic.
    #[test]
    fn restoring_damaged_state_never_panics(
        junk in proptest::collection::vec((proptest::collection::vec(proptest::prelude::any::<u8>(), 0..24), proptest::collection::vec(proptest::prelude::any::<u8>(), 0..48)), 0..6),
        flips in proptest::collection::vec((proptest::prelude::any::<usize>(), proptest::prelude::any::<usize>(), proptest::prelude::any::<u8>()), 1..6),
    ) {
        if let Err(e) = engine().restore_entries(junk) {
            proptest::prop_assert!(e.to_string().contains("'G'") || e.to_string().contains(" G"), "{}", e);
        }
        let mut real = engine();
        let _ = real.process(input(&[(1, 10, 3), (1, 11, 12), (2, 20, 4)]), 0).unwrap();
        let _ = real.advance(5, 0).unwrap();
        let mut entries = real.state_entries().unwrap();
        for (e, at, x) in flips {
            let n = entries.len();
            let (k, v) = &mut entries[e % n];
            let target = if at % 2 == 0 || k.is_empty() { v } else { k };
            if !target.is_empty() {
                let len = target.len();
                target[at % len] ^= x | 1;
            }
        }
        let mut restored = engine();
        if restored.restore_entries(entries).is_ok() {
            // Whatever was read back runs on to the end of time.
            let _ = restored.advance(MAX_TIMESTAMP, 0);
        }
    }
}

/// Rows (key, value, timestamp) of `KV<i64, i64>` windowed by `strategy`.
fn windowed_input(strategy: &WindowingStrategy, rows: &[(i64, i64, Timestamp)]) -> Batch {
    let mut windows = Vec::new();
    let rows: Vec<WindowedValue<KV<i64, i64>>> = rows
        .iter()
        .flat_map(|&(k, v, t)| {
            windows.clear();
            strategy.window_fn.assign_windows(t, &Window::Global, &mut windows);
            windows
                .iter()
                .map(|&window| WindowedValue { value: KV::new(k, v), timestamp: t, window, pane: PaneInfo::NO_FIRING })
                .collect::<Vec<_>>()
        })
        .collect();
    Batch::new(rows)
}

fn sessions(gap_ms: u64) -> WindowingStrategy {
    WindowingStrategy::of(Arc::new(weir_sdk::window_fn::Sessions::with_gap_duration(std::time::Duration::from_millis(
        gap_ms,
    ))))
}

/// Every group a run fired, canonically sorted: key, sorted values, window, pane timing.
type Fired = Vec<(i64, Vec<i64>, Window, Timing)>;

fn fired_of(batches: Vec<Batch>) -> Fired {
    let mut out = Vec::new();
    for b in batches {
        let groups = b.downcast::<Vec<Grouped>>().expect("grouped batch");
        for g in groups.into_iter() {
            let mut values = g.value.value;
            values.sort();
            out.push((g.value.key, values, g.window, g.pane.timing));
        }
    }
    out.sort_by(|a, b| (a.0, a.2.max_timestamp(), &a.1).cmp(&(b.0, b.2.max_timestamp(), &b.1)));
    out
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

    /// The holds kept incrementally always equal a full recount from the window states, and the
    /// engine's hold is their earliest, through input, merges, firings and expiry.
    #[test]
    fn holds_equal_a_full_recount(
        merging in proptest::prelude::any::<bool>(),
        steps in proptest::collection::vec(
            (proptest::collection::vec((0i64..4, 0i64..100, 0i64..200), 0..12), 0i64..60),
            1..8,
        ),
    ) {
        let mut strategy = if merging { sessions(7) } else { engine().strategy.clone() };
        strategy.allowed_lateness_ms = 20;
        strategy.timestamp_combiner = TimestampCombiner::Earliest;
        let mut gaw = GroupAlsoByWindow::new("G", strategy.clone(), Values::Buffer(weir_sdk::runner_api::group_kernel::<i64, i64>()));
        let mut watermark = MIN_TIMESTAMP;
        for (rows, advance) in steps {
            gaw.process(windowed_input(&strategy, &rows), 0).unwrap();
            if gaw.timers.tracked {
                proptest::prop_assert!(gaw.timers.holds.equal(&gaw.counted_holds().unwrap()));
            }
            watermark = watermark.max(0) + advance;
            gaw.advance(watermark, 0).unwrap();
            proptest::prop_assert!(gaw.timers.tracked);
            proptest::prop_assert!(gaw.timers.holds.equal(&gaw.counted_holds().unwrap()));
            proptest::prop_assert_eq!(gaw.hold(), gaw.counted_holds().unwrap().earliest());
        }
        gaw.advance(MAX_TIMESTAMP, 0).unwrap();
        proptest::prop_assert!(gaw.is_empty());
        proptest::prop_assert_eq!(gaw.hold(), None);
    }

    /// Merging windows gives the same panes whatever the order and the batches the elements
    /// come in: sessions merge to the same windows with the same values.
    #[test]
    fn merge_order_does_not_change_the_result(
        rows in proptest::collection::vec((0i64..3, 0i64..1000, 0i64..300), 1..40),
        cuts in proptest::collection::vec(0usize..40, 0..5),
        seed in proptest::prelude::any::<u64>(),
    ) {
        let strategy = sessions(10);
        let kernel = || Values::Buffer(weir_sdk::runner_api::group_kernel::<i64, i64>());
        let run = |order: &[(i64, i64, Timestamp)], cuts: &[usize]| -> Fired {
            let mut gaw = GroupAlsoByWindow::new("G", strategy.clone(), kernel());
            let mut out = Vec::new();
            let mut start = 0;
            let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (order.len() + 1)).collect();
            cuts.sort();
            for end in cuts.into_iter().chain([order.len()]) {
                if end > start {
                    out.push(gaw.process(windowed_input(&strategy, &order[start..end]), 0).unwrap());
                    start = end;
                }
            }
            out.push(gaw.advance(MAX_TIMESTAMP, 0).unwrap());
            fired_of(out)
        };
        let whole = run(&rows, &[]);
        let mut shuffled = rows.clone();
        use rand::seq::SliceRandom;
        shuffled.shuffle(&mut <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(seed));
        proptest::prop_assert_eq!(&whole, &run(&shuffled, &cuts));
        // One on-time pane per session, and every value in exactly one of them.
        let values: usize = whole.iter().map(|f| f.1.len()).sum();
        proptest::prop_assert_eq!(values, rows.len());
        proptest::prop_assert!(whole.iter().all(|f| f.3 == Timing::OnTime));
    }
}

#[test]
fn a_window_that_has_not_fired_keeps_no_pane_state_of_its_own() {
    // The layout the key map's ring holds per window: values, count, hold, epoch, closed and
    // a pointer, not the trigger and pane state.
    assert!(std::mem::size_of::<WindowState>() <= 64, "{}", std::mem::size_of::<WindowState>());
    let mut gaw = engine();
    gaw.process(input(&[(1, 10, 3), (1, 11, 4), (2, 20, 12)]), 0).unwrap();
    gaw.advance(5, 0).unwrap();
    let own = |gaw: &GroupAlsoByWindow| -> Vec<(i64, bool)> {
        let mut v: Vec<(i64, bool)> =
            gaw.keys.values().flat_map(|w| w.iter().map(|(w, s)| (w.max_timestamp(), s.has_own_panes()))).collect();
        v.sort();
        v
    };
    assert_eq!(own(&gaw), vec![(9, false), (19, false)]);
    // [0, 10) fires on time and, within its allowed lateness, stays with its pane index.
    gaw.advance(10, 0).unwrap();
    assert_eq!(own(&gaw), vec![(9, true), (19, false)]);
    // Its late pane is the second: the index kept is the one used.
    let late = gaw.process(input(&[(1, 13, 5)]), 0).unwrap();
    let late = late.downcast::<Vec<Grouped>>().unwrap();
    assert_eq!((late[0].pane.index, late[0].pane.timing), (1, Timing::Late));
}

#[test]
fn checkpoints_hold_window_states_in_their_full_layout() {
    // The layout every checkpoint written so far holds, field after field (postcard writes a
    // struct as the tuple of its fields): values, count, added since the last firing, hold,
    // trigger, pane index, non-speculative index, whether a non-early pane was emitted,
    // closed, processing-time timer. A restored state reads it whole.
    type Full = (Vec<u8>, usize, usize, Option<Timestamp>, TriggerState, i64, i64, bool, bool, Option<Timestamp>);
    let mut gaw = engine();
    gaw.process(input(&[(1, 10, 3), (2, 20, 12)]), 0).unwrap();
    gaw.advance(10, 0).unwrap();
    let fresh = gaw.machine.new_state();
    let mut fired = fresh.clone();
    gaw.machine.on_fire(&mut fired, &TriggerContext { input_watermark: 10, processing_time: 0, window_max: 9 });
    let expected = |values: Vec<u8>, count, added, hold, trigger, pane_index, nsi, non_early| -> Full {
        (values, count, added, hold, trigger, pane_index, nsi, non_early, false, None)
    };
    let twenty = postcard::to_stdvec(&20i64).unwrap();
    let mut entries = gaw.state_entries().unwrap();
    entries.sort();
    let states: Vec<Vec<u8>> = entries.iter().filter(|(k, _)| !k.is_empty()).map(|(_, v)| v.clone()).collect();
    let mut want = vec![
        postcard::to_stdvec(&expected(Vec::new(), 0, 0, None, fired, 1, 0, true)).unwrap(),
        postcard::to_stdvec(&expected(twenty, 1, 1, Some(12), fresh, 0, -1, false)).unwrap(),
    ];
    let mut got = states.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    // And back: the restored engine writes the same entries.
    let mut restored = engine();
    restored.restore_entries(entries.clone()).unwrap();
    let mut again = restored.state_entries().unwrap();
    again.sort();
    assert_eq!(again, entries);
}

/// Sessions, but showing `merge_windows` every active window of a key (as any other merging
/// function is shown them), for comparing with the sessions' own path.
#[derive(Debug)]
struct SessionsShownAll(weir_sdk::window_fn::Sessions);

impl weir_sdk::window_fn::WindowFn for SessionsShownAll {
    fn assign_windows(&self, t: Timestamp, window: &Window, out: &mut Vec<Window>) {
        self.0.assign_windows(t, window, out)
    }
    fn is_merging(&self) -> bool {
        true
    }
    fn is_compatible(&self, other: &dyn weir_sdk::window_fn::WindowFn) -> bool {
        other.as_any().is::<SessionsShownAll>()
    }
    fn merge_windows(&self, windows: &[Window]) -> Vec<(Vec<Window>, Window)> {
        self.0.merge_windows(windows)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// Sessions merge new windows with only the active windows they may overlap: the same
    /// panes, timings and drops as merging with every active window, through triggers that
    /// close windows, firings, late data and expiry.
    #[test]
    fn sessions_merged_with_the_windows_they_overlap_fire_as_if_merged_with_all(
        steps in proptest::collection::vec(
            (proptest::collection::vec((0i64..3, 0i64..100, 0i64..400), 0..16), 0i64..50),
            1..10,
        ),
        trigger in 0usize..3,
    ) {
        use weir_sdk::trigger::Trigger;
        let gap = std::time::Duration::from_millis(10);
        let run = |window_fn: Arc<dyn weir_sdk::window_fn::WindowFn>| -> (Fired, DropCounts) {
            let mut strategy = WindowingStrategy::of(window_fn);
            strategy.allowed_lateness_ms = 30;
            strategy.trigger = match trigger {
                0 => Trigger::Default,
                // Closes each session at its second element: later ones are dropped.
                1 => Trigger::AfterCount(2),
                _ => Trigger::Repeatedly(Box::new(Trigger::AfterCount(3))),
            };
            strategy.accumulation_mode = AccumulationMode::Discarding;
            let mut gaw = GroupAlsoByWindow::new("G", strategy.clone(), Values::Buffer(weir_sdk::runner_api::group_kernel::<i64, i64>()));
            let (mut out, mut watermark) = (Vec::new(), MIN_TIMESTAMP);
            for (rows, advance) in &steps {
                out.push(gaw.process(windowed_input(&strategy, rows), 0).unwrap());
                watermark = watermark.max(0) + advance;
                out.push(gaw.advance(watermark, 0).unwrap());
            }
            out.push(gaw.advance(MAX_TIMESTAMP, 0).unwrap());
            (fired_of(out), gaw.dropped())
        };
        let sessions = weir_sdk::window_fn::Sessions::with_gap_duration(gap);
        let (own, own_dropped) = run(Arc::new(sessions));
        let (all, all_dropped) = run(Arc::new(SessionsShownAll(sessions)));
        proptest::prop_assert_eq!(own, all);
        proptest::prop_assert_eq!(own_dropped, all_dropped);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

    /// Issue 52: the changes the engine reports after each unit of work, applied to what it
    /// reported before, are its whole state: through sessions and fixed windows, triggers that
    /// fire early by count and by processing time, close windows and fire late panes, merges,
    /// expiry and a restore in between.
    #[test]
    fn reported_changes_replay_to_the_whole_state(
        steps in proptest::collection::vec(
            (proptest::collection::vec((0i64..4, 0i64..100, 0i64..300), 0..12), 0i64..40, 0i64..30),
            1..12,
        ),
        trigger in 0usize..4,
        merging in proptest::prelude::any::<bool>(),
        restore_at in 0usize..12,
    ) {
        use weir_sdk::trigger::Trigger;
        let mut strategy = if merging {
            sessions(10)
        } else {
            WindowingStrategy::of(Arc::new(weir_sdk::window_fn::FixedWindows::of(std::time::Duration::from_millis(20))))
        };
        strategy.allowed_lateness_ms = 25;
        strategy.trigger = match trigger {
            0 => Trigger::Default,
            1 => Trigger::AfterCount(2),
            2 => Trigger::AfterWatermark {
                early: Some(Box::new(Trigger::AfterProcessingTime { delay_ms: 5, align: None })),
                late: Some(Box::new(Trigger::AfterCount(1))),
            },
            _ => Trigger::Repeatedly(Box::new(Trigger::AfterCount(3))),
        };
        strategy.accumulation_mode = if trigger % 2 == 0 { AccumulationMode::Accumulating } else { AccumulationMode::Discarding };
        let new = || GroupAlsoByWindow::new("G", strategy.clone(), Values::Buffer(weir_sdk::runner_api::group_kernel::<i64, i64>()));
        let mut gaw = new();
        // The first call starts tracking; what was committed is the whole state then.
        proptest::prop_assert!(gaw.take_changed_entries().unwrap().is_none());
        let mut committed: std::collections::HashMap<Vec<u8>, Vec<u8>> = gaw.state_entries().unwrap().into_iter().collect();
        let (mut watermark, mut now) = (MIN_TIMESTAMP, 0);
        for (i, (rows, advance, tick)) in steps.iter().enumerate() {
            now += tick;
            gaw.process(windowed_input(&strategy, rows), now).unwrap();
            watermark = watermark.max(0) + advance;
            gaw.advance(watermark, now).unwrap();
            let (written, removed) = gaw.take_changed_entries().unwrap().expect("changes are kept");
            committed.extend(written);
            removed.iter().for_each(|k| { committed.remove(k); });
            let whole: std::collections::HashMap<Vec<u8>, Vec<u8>> = gaw.state_entries().unwrap().into_iter().collect();
            proptest::prop_assert_eq!(&committed, &whole, "after step {}", i);
            if i == restore_at {
                // A restart from the committed state goes on reporting from there.
                // Changes are kept from the restore on: the next call reports what changed since.
                gaw = new();
                gaw.restore_entries(committed.clone().into_iter().collect()).unwrap();
            }
        }
    }
}

/// A disk backend keeping about `budget` bytes of state in memory, in `dir`.
fn disk_backend(dir: &std::path::Path, budget: u64) -> crate::state_backend::StateBackend {
    crate::state_backend::StateBackend::of(&weir_sdk::options::StateOptions {
        backend: weir_sdk::options::StateBackendKind::Disk,
        memory_budget: budget,
        local_dir: Some(dir.display().to_string()),
    })
}

fn sorted(batch: Batch) -> Vec<(i64, Vec<i64>, Timestamp, Timing)> {
    let mut g = grouped(batch);
    g.sort_by(|a, b| (a.0, a.2, &a.1).cmp(&(b.0, b.2, &b.1)));
    g
}

#[test]
fn state_on_disk_past_the_budget_gives_the_same_panes_state_and_deltas_as_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    // Streaming (the watermark moves every call, some input late) and bounded (it stays at
    // its minimum until the end).
    for bounded in [false, true] {
        let mut memory = engine();
        let mut disk = engine().with_state(&disk_backend(dir.path(), 600));
        assert_eq!(memory.take_changed_entries().unwrap(), None);
        assert_eq!(disk.take_changed_entries().unwrap(), None);
        let mut seed = 7u64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as i64
        };
        for call in 0..60i64 {
            let rows: Vec<(i64, i64, Timestamp)> = (0..40)
                .map(|_| (next() % 300, next() % 1000, call * 5 + next() % 30 - 10))
                .map(|(k, v, t)| (k, v, t.max(0)))
                .collect();
            assert_eq!(
                sorted(memory.process(input(&rows), call).unwrap()),
                sorted(disk.process(input(&rows), call).unwrap())
            );
            if !bounded {
                let wm = call * 5 - 5;
                assert_eq!(
                    sorted(memory.advance(wm, call).unwrap()),
                    sorted(disk.advance(wm, call).unwrap()),
                    "call {call}"
                );
                assert_eq!(memory.hold(), disk.hold());
            }
            assert_eq!(memory.state_size(), disk.state_size());
            assert_eq!(memory.dropped(), disk.dropped());
            if call % 7 == 0 {
                let (mut a, mut b) =
                    (memory.take_changed_entries().unwrap().unwrap(), disk.take_changed_entries().unwrap().unwrap());
                a.0.sort();
                b.0.sort();
                a.1.sort();
                b.1.sort();
                assert_eq!(a, b, "the deltas of call {call}");
            }
        }
        assert!(disk.spilled_windows() > 0, "the state passed its budget");
        assert!(disk.state_bytes() < memory.state_bytes() / 2, "{} in memory", disk.state_bytes());
        let (mut a, mut b) = (memory.state_entries().unwrap(), disk.state_entries().unwrap());
        a.sort();
        b.sort();
        assert_eq!(a, b);
        // A restore onto the disk backend, then the end of the input.
        let mut restored = engine().with_state(&disk_backend(dir.path(), 600));
        restored.restore_entries(b).unwrap();
        let want = sorted(memory.advance(MAX_TIMESTAMP, 1000).unwrap());
        assert!(!want.is_empty());
        assert_eq!(memory.watermarks().output(), MAX_TIMESTAMP);
        // On disk, the end of time fires a budget's worth a call, holding the output
        // watermark and asking for the next call at once until the last.
        for engine in [&mut disk, &mut restored] {
            let held = engine.watermarks().output();
            let (mut got, mut calls) = (Vec::new(), 0);
            loop {
                got.extend(grouped(engine.advance(MAX_TIMESTAMP, 1000).unwrap()));
                calls += 1;
                if engine.is_empty() {
                    break;
                }
                assert_eq!(engine.hold(), Some(held));
                assert_eq!(engine.watermarks().output(), held);
                assert_eq!(engine.next_processing_timer(), Some(MIN_TIMESTAMP));
                assert!(calls < 1000);
            }
            assert!(!bounded || calls > 1, "{calls} calls");
            assert_eq!(engine.watermarks().output(), MAX_TIMESTAMP);
            assert_eq!(engine.next_processing_timer(), None);
            got.sort_by(|a, b| (a.0, a.2, &a.1).cmp(&(b.0, b.2, &b.1)));
            assert_eq!(want, got);
        }
        assert!(disk.is_empty() && restored.is_empty());
        assert_eq!(disk.spilled_windows(), 0);
    }
    // Every store folder is gone with its engines.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// A bounded input on the disk backend (the watermark at its start, windows fired by the
/// watermark): rows for keys on disk leave as new fragments beside the old instead of reading
/// them back, and the end of the input merges them (the same window's values, and windows that
/// merge) into the groups the memory backend fires.
#[test]
fn a_bounded_input_adds_fragments_to_keys_on_disk_and_merges_them_at_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let fixed = || engine().strategy.clone();
    for strategy in [fixed(), sessions(7)] {
        let make = || {
            GroupAlsoByWindow::new(
                "G",
                strategy.clone(),
                Values::Buffer(weir_sdk::runner_api::group_kernel::<i64, i64>()),
            )
        };
        let (mut memory, mut disk) = (make(), make().with_state(&disk_backend(dir.path(), 600)));
        let mut seed = 11u64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as i64
        };
        let mut read_back = 0;
        for call in 0..60i64 {
            let rows: Vec<(i64, i64, Timestamp)> =
                (0..40).map(|_| (next() % 50, next() % 1000, call * 3 + next() % 20)).collect();
            assert!(fired_of(vec![memory.process(windowed_input(&strategy, &rows), call).unwrap()]).is_empty());
            let before = disk.state_backend_metrics();
            assert!(fired_of(vec![disk.process(windowed_input(&strategy, &rows), call).unwrap()]).is_empty());
            let misses = |m: &[(&str, u64)]| m.iter().find(|(n, _)| *n == "cacheMissCount").map_or(0, |x| x.1);
            read_back += misses(&disk.state_backend_metrics()) - misses(&before);
            // Between calls, what a checkpoint would take reads the fragments merged.
            if call % 20 == 19 {
                let (mut a, mut b) = (memory.state_entries().unwrap(), disk.state_entries().unwrap());
                a.sort();
                b.sort();
                // The same keys and windows (values may lie in another order).
                let keys = |e: &[(Vec<u8>, Vec<u8>)]| e.iter().map(|(k, v)| (k.clone(), v.len())).collect::<Vec<_>>();
                assert_eq!(keys(&a), keys(&b), "call {call}");
            }
        }
        assert!(disk.spilled_windows() > 0, "the state passed its budget");
        assert_eq!(read_back, 0, "no key was read back before the end of the input");
        let want = fired_of(vec![memory.advance(MAX_TIMESTAMP, 1000).unwrap()]);
        let mut got = Vec::new();
        while !disk.is_empty() || got.is_empty() {
            got.push(disk.advance(MAX_TIMESTAMP, 1000).unwrap());
        }
        let got = fired_of(got);
        assert!(!want.is_empty());
        assert_eq!(want, got);
    }
}

#[test]
fn window_values_encode_as_bytes_exactly_as_they_did_as_a_sequence() {
    // Checkpoints written before the values were encoded as bytes still read.
    let values: Vec<u8> = (0..=255).chain(0..40).collect();
    assert_eq!(postcard::to_stdvec(&values).unwrap(), postcard::to_stdvec(&serde_bytes::Bytes::new(&values)).unwrap());
}

/// Issue 52: the end-of-window and garbage-collection timers of every window, including those
/// on disk, are an index that keeps its latest entries on disk past its cap, and the holds a
/// counted multiset that does the same. The panes fire
/// exactly as in memory, call by call, and the index's entries on disk show in the figures.
#[test]
fn timers_past_the_index_cap_wait_on_disk_and_fire_as_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut memory = engine();
    let mut disk = engine().with_state(&disk_backend(dir.path(), 600));
    // 4,000 windows of 10 ms, one element each (two timers a window: its end and, with the
    // allowed lateness, its garbage collection).
    let rows: Vec<(i64, i64, Timestamp)> = (0..4_000).map(|i| (i % 97, i, i * 10 + 3)).collect();
    for chunk in rows.chunks(500) {
        assert_eq!(sorted(memory.process(input(chunk), 0).unwrap()), sorted(disk.process(input(chunk), 0).unwrap()));
    }
    let on_disk = |e: &GroupAlsoByWindow| {
        e.state_backend_metrics().iter().find(|(n, _)| *n == "indexEntriesOnDisk").map_or(0, |(_, v)| *v)
    };
    let (mut most, mut fired, mut holds_most) = (0, 0, 0);
    let mut wm = 0;
    while wm < 41_000 {
        wm += 777;
        let (a, b) = (sorted(memory.advance(wm, 1).unwrap()), sorted(disk.advance(wm, 1).unwrap()));
        assert_eq!(a, b, "watermark {wm}");
        assert_eq!(memory.hold(), disk.hold(), "watermark {wm}");
        assert_eq!(memory.watermarks(), disk.watermarks(), "watermark {wm}");
        fired += b.len();
        most = most.max(on_disk(&disk));
        holds_most = holds_most.max(disk.timers.holds.on_disk());
    }
    assert!(holds_most > 100, "the holds never went to disk: {holds_most}");
    assert_eq!(fired, 4_000);
    assert!(most > 1_000, "the index never went to disk: {most}");
    assert_eq!(on_disk(&disk), 0);
    assert!(disk.is_empty());
}
