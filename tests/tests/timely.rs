//! Timely runner specifics: the progress of each epoch, with a row per worker.

use std::time::Duration;
use weir::timely::TimelyRunner;
use weir_sdk::prelude::*;

#[test]
fn every_epoch_is_reported_with_a_row_per_worker() {
    weir_tests::register_runners();
    let options =
        PipelineOptions::from_args(["--runner", "timely", "--workers", "3", "--max-batch-size", "12"]).unwrap();
    let p = Pipeline::new(options);
    p.apply("Create", Create::timestamped((0..100i64).map(|i| TimestampedValue::new(i, i * 10))))
        .apply("Window", Window::into(FixedWindows::of(Duration::from_millis(100))))
        .apply("Key", Map::new(|i: i64| KV::new(i % 5, i)))
        .apply("Count", Count::per_key());
    let query = TimelyRunner.start(p.graph(), &p.options()).unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(0u64));
    let s = seen.clone();
    query.add_listener(move |e| *s.lock().unwrap() += e.num_input_rows);
    assert_eq!(query.wait_until_finish(None).unwrap(), PipelineState::Done);
    let recent = query.recent_progress();
    // 100 elements read 4 at a time per worker (12 shared among 3): at least 9 epochs.
    assert!(recent.len() >= 9, "{} epochs", recent.len());
    assert_eq!(recent.iter().map(|e| e.num_input_rows).sum::<u64>(), 100);
    assert_eq!(*seen.lock().unwrap(), 100, "the listener saw every epoch");
    for (i, e) in recent.iter().enumerate() {
        assert_eq!(e.epoch, i as u64);
        assert_eq!(e.workers.iter().map(|w| w.worker).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(e.num_input_rows, e.workers.iter().map(|w| w.input_rows).sum::<u64>());
    }
    // Until the end of input, the counts are state.
    assert!(recent.iter().any(|e| e.state_rows > 0), "{recent:?}");
    assert_eq!(query.last_progress().unwrap().epoch, recent.len() as u64 - 1);
}
