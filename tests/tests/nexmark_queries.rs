//! Every implemented Nexmark query against its model on every runner, in batch and streaming,
//! with the single-timeline configuration Beam's QueryTest uses (numEventGenerators = 1) and a
//! split configuration where the query's results do not depend on timestamps.

use weir_nexmark::models::{compare, comparison, expected};
use weir_nexmark::queries::{self, ResultRecord};
use weir_nexmark::sources::{BoundedEventSource, UnboundedEventSource};
use weir_nexmark::{NexmarkConfig, QueryName};
use weir_sdk::io::{Read, ReadUnbounded};
use weir_sdk::prelude::*;
use weir_tests::conformance;

fn single_timeline() -> NexmarkConfig {
    NexmarkConfig { num_events: 5_000, num_event_generators: 1, ..NexmarkConfig::default() }
}

fn check(p: &TestPipeline, query: QueryName, config: &NexmarkConfig, streaming: bool) {
    let events = if streaming {
        p.apply("Events", ReadUnbounded::from(UnboundedEventSource::new(config)))
    } else {
        p.apply("Events", Read::from(BoundedEventSource::new(config)))
    };
    let results = queries::apply(query, config, &events).expect("implemented");
    let model = expected(query, config).expect("the query has a model");
    assert!(!model.is_empty(), "{query:?} yields results on 5,000 events");
    let rule = comparison(query);
    assert_that(&results).satisfies(move |actual: Vec<ResultRecord>| compare(rule, &actual, &model));
    p.run();
}

conformance! {
    fn passthrough_batch(p) { check(p, QueryName::Passthrough, &single_timeline(), false) }
    fn passthrough_streaming(p) { check(p, QueryName::Passthrough, &single_timeline(), true) }
    fn currency_conversion_batch(p) { check(p, QueryName::CurrencyConversion, &single_timeline(), false) }
    fn currency_conversion_streaming(p) { check(p, QueryName::CurrencyConversion, &single_timeline(), true) }
    fn selection_batch(p) { check(p, QueryName::Selection, &single_timeline(), false) }
    fn selection_streaming(p) { check(p, QueryName::Selection, &single_timeline(), true) }
}

#[test]
fn a_wrong_result_fails_the_comparison() {
    let config = single_timeline();
    let model = expected(QueryName::Selection, &config).unwrap();
    let mut wrong = model.clone();
    wrong[0].timestamp += 1;
    let err = compare(comparison(QueryName::Selection), &wrong, &model).unwrap_err();
    assert!(err.contains("unexpected") && err.contains("missing"), "{err}");
    assert!(compare(comparison(QueryName::Selection), &model[1..], &model).is_err());
    assert!(compare(comparison(QueryName::Selection), &model, &model).is_ok());
}

#[test]
fn unimplemented_queries_fail_by_name() {
    let p = weir_tests::pipeline("direct");
    let events = p.apply("Events", Read::from(BoundedEventSource::new(&single_timeline())));
    for q in QueryName::ALL {
        if let Err(e) = queries::apply(q, &single_timeline(), &events) {
            assert!(e.to_string().contains(q.name()), "{e}");
        }
    }
}
