//! Metrics conformance: user metrics in DoFns and sources, per step, attempted and committed.

use weir_sdk::io::source::{BoundedReader, BoundedSource, Read};
use weir_sdk::metrics::{DistributionResult, MetricsFilter};
use weir_sdk::prelude::*;

#[derive(Clone)]
struct Measured {
    fail_on: Option<i64>,
}

impl DoFn for Measured {
    type In = i64;
    type Out = i64;
    fn process(&mut self, e: i64, ctx: &mut ProcessContext<'_, i64>) -> UserResult {
        Metrics::counter("test", "elements")?.inc();
        Metrics::counter("test", "down")?.dec_by(2);
        Metrics::distribution("test", "values")?.update(e);
        Metrics::gauge("test", "last")?.set(e);
        if Some(e) == self.fail_on {
            return Err("planned failure".into());
        }
        ctx.output(e);
        Ok(())
    }
}

struct CountingSource(i64);

impl BoundedSource for CountingSource {
    type Output = i64;
    type Reader = CountingReader;
    fn split(&self, _: u64) -> UserResult<Vec<Self>> {
        Ok(vec![CountingSource(self.0)])
    }
    fn estimated_size_bytes(&self) -> UserResult<u64> {
        Ok(8 * self.0 as u64)
    }
    fn create_reader(&self) -> UserResult<CountingReader> {
        Ok(CountingReader(0, self.0))
    }
}

struct CountingReader(i64, i64);

impl BoundedReader for CountingReader {
    type Output = i64;
    fn next(&mut self) -> UserResult<Option<(i64, Timestamp)>> {
        if self.0 >= self.1 {
            return Ok(None);
        }
        Metrics::counter("source", "read")?.inc();
        self.0 += 1;
        Ok(Some((self.0, 0)))
    }
}

weir_tests::conformance! {
    fn user_metrics_per_step(p) {
        let input = p.apply("Create", Create::of(1..=10i64));
        input.apply("First", ParDo::of(Measured { fail_on: None }));
        input.apply("Outer", Map::new(|x: i64| x)).apply("Second", ParDo::of(Measured { fail_on: None }));
        p.apply("Source", Read::from(CountingSource(4)));
        let result = Pipeline::run(p).unwrap();
        assert_eq!(result.wait_until_finish(None).unwrap(), PipelineState::Done);
        let all = result.metrics().all_metrics();
        for step in ["First", "Second"] {
            let c = all.counter(step, "test", "elements").unwrap();
            assert_eq!((c.attempted, c.committed), (10, Some(10)), "{step}");
            assert_eq!(all.counter(step, "test", "down").unwrap().attempted, -20);
            let d = all.distribution(step, "test", "values").unwrap();
            assert_eq!(d.attempted, DistributionResult { sum: 55, count: 10, min: 1, max: 10 });
            assert_eq!(d.attempted.mean(), 5.5);
            let g = all.gauge(step, "test", "last").unwrap();
            assert!((1..=10).contains(&g.attempted.value) && g.attempted.timestamp > 0);
        }
        assert_eq!(all.counter("Source", "source", "read").unwrap().attempted, 4);
        let only_first = result.metrics().query_metrics(&MetricsFilter::all().add_step("First").in_namespace("test"));
        assert_eq!(only_first.counters.len(), 2);
        let by_name = result.metrics().query_metrics(&MetricsFilter::all().named("test", "elements"));
        assert_eq!(by_name.counters.len(), 2);
        assert!(by_name.distributions.is_empty());
    }

    fn failed_bundles_count_as_attempted_not_committed(p) {
        p.apply("Create", Create::of(vec![1i64])).apply("Fails", ParDo::of(Measured { fail_on: Some(1) }));
        let result = Pipeline::run(p).unwrap();
        assert!(result.wait_until_finish(None).is_err());
        assert_eq!(result.state(), PipelineState::Failed);
        let c = result.metrics().all_metrics().counter("Fails", "test", "elements").cloned().unwrap();
        assert_eq!(c.attempted, 1);
        assert_eq!(c.committed, Some(0));
    }
}

mod system {
    use super::*;

    weir_tests::conformance! {
        fn elements_bytes_and_watermarks_per_step(p) {
            p.apply("Create", Create::of(0..10i64))
                .apply("Double", Map::new(|x: i64| x * 2))
                .apply("Small", Filter::by(|x: &i64| *x < 10))
                .apply("Window", Window::into(FixedWindows::of(std::time::Duration::from_millis(10))))
                .apply("Count", Count::globally().without_defaults());
            let result = Pipeline::run(p).unwrap();
            assert_eq!(result.wait_until_finish(None).unwrap(), PipelineState::Done);
            let m = result.metrics().query_metrics(&MetricsFilter::all().in_namespace("weir"));
            let counter = |step: &str, name: &str| m.counter(step, "weir", name).map(|c| c.attempted).unwrap_or(-1);
            assert_eq!(counter("Double/ParDo", "elementsIn"), 10);
            assert_eq!(counter("Double/ParDo", "elementsOut"), 10);
            assert_eq!(counter("Small/ParDo", "elementsOut"), 5);
            assert!(counter("Double/ParDo", "bytesIn") > 0);
            assert_eq!(counter("Create/Read", "elementsOut"), 10);
            let out_wm = m.gauge("Small/ParDo", "weir", "outputWatermark").unwrap().attempted.value;
            assert_eq!(out_wm, MAX_TIMESTAMP);
            assert!(m.gauge("Count/Combine.perKey", "weir", "inputWatermark").is_some(), "{m:?}");
        }
    }
}
