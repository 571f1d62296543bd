//! Nexmark's event sources on every runner: the bounded source (batch), the unbounded source
//! (streaming) and an exported events file all give exactly the generator's events with their
//! event times.

use std::time::Duration;
use weir_nexmark::generator::split_events;
use weir_nexmark::sources::{export_events, BoundedEventSource, ReadEventsFile, UnboundedEventSource};
use weir_nexmark::{Event, NexmarkConfig};
use weir_sdk::io::{Read, ReadUnbounded};
use weir_sdk::prelude::*;
use weir_tests::conformance;

fn config() -> NexmarkConfig {
    NexmarkConfig { num_events: 500, num_event_generators: 5, ..NexmarkConfig::default() }
}

/// Every event paired with its element timestamp, as the generator makes them.
fn expected() -> Vec<(Event, i64)> {
    split_events(&config()).map(|n| (n.event, n.event_timestamp)).collect()
}

#[derive(Clone)]
struct WithTime;

impl DoFn for WithTime {
    type In = Event;
    type Out = (Event, i64);
    fn process(&mut self, e: Event, ctx: &mut ProcessContext<'_, (Event, i64)>) -> UserResult {
        let ts = ctx.timestamp();
        ctx.output((e, ts));
        Ok(())
    }
}

conformance! {
    fn the_bounded_source_reads_every_generated_event(p) {
        let events = p.apply("Events", Read::from(BoundedEventSource::new(&config()))).apply("Time", ParDo::of(WithTime));
        assert_that(&events).contains_in_any_order(expected());
        assert!(!p.graph().is_streaming());
        p.run();
    }

    fn the_unbounded_source_streams_every_generated_event_and_closes_windows(p) {
        let events = p.apply("Events", ReadUnbounded::from(UnboundedEventSource::new(&config())));
        let timed = events.apply("Time", ParDo::of(WithTime));
        assert_that(&timed).contains_in_any_order(expected());
        // 500 events over 5 generators: each has event numbers 0..100, 0.5 ms apart, so all
        // events fall in the first 50 ms and one one-second window holds all of them.
        let counts = events
            .apply("Window", Window::into(FixedWindows::of(Duration::from_secs(1))))
            .apply("Count", Count::globally().without_defaults());
        assert_that(&counts).contains_in_any_order(vec![500]);
        assert!(p.graph().is_streaming());
        p.run();
    }

    fn an_exported_events_file_reads_back_with_event_times(p) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.json");
        assert_eq!(export_events(&config(), &path).unwrap(), 500);
        // One malformed line and one blank line are skipped and counted, not fatal.
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"not\": \"an event\"}\n\n");
        std::fs::write(&path, text).unwrap();
        let events = p
            .apply("Events", ReadEventsFile::from(path.to_string_lossy().to_string()))
            .apply("Time", ParDo::of(WithTime));
        assert_that(&events).contains_in_any_order(expected());
        let result = Pipeline::run(p).unwrap();
        assert_eq!(result.wait_until_finish(None).unwrap(), PipelineState::Done);
        let metrics = result.metrics().query_metrics(&MetricsFilter::all().named("nexmark", "malformedEvents"));
        let total: i64 = metrics.counters.iter().map(|c| c.attempted).sum();
        assert_eq!(total, 1);
    }
}
