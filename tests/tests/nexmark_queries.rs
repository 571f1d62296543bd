//! Every implemented Nexmark query against its model on every runner, in batch and streaming,
//! with the single-timeline configuration Beam's QueryTest uses (numEventGenerators = 1) and a
//! split configuration where the query's results do not depend on timestamps.

use weir_nexmark::models::{compare, comparison, expected, expected_for};
use weir_nexmark::queries::{self, ResultRecord};
use weir_nexmark::sources::{BoundedEventSource, UnboundedEventSource};
use weir_nexmark::{NexmarkConfig, QueryName};
use weir_sdk::io::{Read, ReadUnbounded};
use weir_sdk::prelude::*;

/// Like `weir_tests::conformance!`, but with the micro-batch multi-partition configuration at
/// batches of 500 rows: 5,000 events in batches of 3 would take minutes per query.
macro_rules! nexmark_conformance {
    ($(fn $name:ident($p:ident) $body:block)*) => {$(
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            fn body($p: &TestPipeline) $body
            #[test]
            fn direct() {
                body(&weir_tests::pipeline("direct"))
            }
            #[test]
            fn microbatch_p1() {
                body(&weir_tests::pipeline("microbatch_p1"))
            }
            #[test]
            fn microbatch_p4_batches_of_500() {
                weir_tests::register_runners();
                let mut o = weir_tests::configuration("microbatch_p4_small_batches");
                o.group_mut::<weir::core::streaming::StreamingOptions>().max_batch_size = 500;
                body(&TestPipeline::from_options(o))
            }
        }
    )*};
}

fn single_timeline() -> NexmarkConfig {
    NexmarkConfig { num_events: 5_000, num_event_generators: 1, ..NexmarkConfig::default() }
}

fn check(p: &TestPipeline, query: QueryName, config: &NexmarkConfig, streaming: bool) {
    let events = if streaming {
        p.apply("Events", ReadUnbounded::from(UnboundedEventSource::new(config)))
    } else {
        p.apply("Events", Read::from(BoundedEventSource::new(config)))
    };
    let results = queries::apply(query, config, &events);
    // The model runs over the events as the source produces them (one timeline, or the split
    // timelines of numEventGenerators > 1).
    let events_seen: Vec<weir_nexmark::Event> =
        weir_nexmark::generator::split_events(config).map(|n| n.event).collect();
    let model = expected_for(query, config, &events_seen).expect("the query has a model");
    assert!(!model.is_empty(), "{query:?} yields results on 5,000 events");
    let rule = comparison(query);
    assert_that(&results).satisfies(move |actual: Vec<ResultRecord>| compare(rule, &actual, &model));
    p.run();
}

nexmark_conformance! {
    fn passthrough_batch(p) { check(p, QueryName::Passthrough, &single_timeline(), false) }
    fn passthrough_streaming(p) { check(p, QueryName::Passthrough, &single_timeline(), true) }
    fn currency_conversion_batch(p) { check(p, QueryName::CurrencyConversion, &single_timeline(), false) }
    fn currency_conversion_streaming(p) { check(p, QueryName::CurrencyConversion, &single_timeline(), true) }
    fn selection_batch(p) { check(p, QueryName::Selection, &single_timeline(), false) }
    fn selection_streaming(p) { check(p, QueryName::Selection, &single_timeline(), true) }
    fn local_item_suggestion_batch(p) { check(p, QueryName::LocalItemSuggestion, &single_timeline(), false) }
    fn local_item_suggestion_streaming(p) { check(p, QueryName::LocalItemSuggestion, &single_timeline(), true) }
    fn average_price_for_category_batch(p) { check(p, QueryName::AveragePriceForCategory, &single_timeline(), false) }
    fn average_price_for_category_streaming(p) { check(p, QueryName::AveragePriceForCategory, &single_timeline(), true) }
    fn average_selling_price_by_seller_batch(p) { check(p, QueryName::AverageSellingPriceBySeller, &single_timeline(), false) }
    fn average_selling_price_by_seller_streaming(p) { check(p, QueryName::AverageSellingPriceBySeller, &single_timeline(), true) }
    fn winning_bids_batch(p) { check(p, QueryName::WinningBids, &single_timeline(), false) }
    fn winning_bids_streaming(p) { check(p, QueryName::WinningBids, &single_timeline(), true) }
    fn winning_bids_split(p) { check(p, QueryName::WinningBids, &split(), false) }
    fn log_to_sharded_files_batch(p) { check(p, QueryName::LogToShardedFiles, &five_windows(), false) }
    fn log_to_sharded_files_streaming(p) { check(p, QueryName::LogToShardedFiles, &five_windows(), true) }
    fn log_to_sharded_files_writes_every_event_once(p) {
        // With an output path, the log files of all panes hold every event exactly once, and
        // each window's index lists exactly its log files.
        let config = NexmarkConfig { max_log_events: 300, ..five_windows() };
        let dir = tempfile::tempdir().unwrap();
        let options = queries::QueryOptions { output_path: Some(dir.path().join("logs")), max_num_workers: 2 };
        let events = p.apply("Events", Read::from(BoundedEventSource::new(&config)));
        queries::apply_with(QueryName::LogToShardedFiles, &config, &options, &events);
        p.run();
        let mut logged = Vec::new();
        let (mut logs, mut indexed) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
        for entry in std::fs::read_dir(dir.path().join("logs")).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            if name.starts_with("LOG-") {
                assert!(name.contains("-of-00010-"), "10 shards for 2 workers: {name}");
                logs.insert(path.to_string_lossy().to_string());
                logged.extend(text.lines().map(|l| weir_nexmark::Event::from_json(l).unwrap()));
            } else {
                assert!(name.starts_with("INDEX-"), "only logs and indexes: {name}");
                for line in text.lines() {
                    indexed.insert(line.rsplit(' ').next().unwrap().to_string());
                }
            }
        }
        assert_eq!(logs, indexed, "every log file is indexed");
        let mut want: Vec<String> = weir_nexmark::generator::standard_events(&config).map(|e| e.to_json()).collect();
        let mut got: Vec<String> = logged.iter().map(|e| e.to_json()).collect();
        want.sort();
        got.sort();
        assert_eq!(got.len(), want.len());
        assert!(got == want, "the log files hold every event exactly once");
    }
    fn hot_items_batch(p) { check(p, QueryName::HotItems, &single_timeline(), false) }
    fn hot_items_streaming(p) { check(p, QueryName::HotItems, &single_timeline(), true) }
    fn highest_bid_batch(p) { check(p, QueryName::HighestBid, &single_timeline(), false) }
    fn highest_bid_streaming(p) { check(p, QueryName::HighestBid, &single_timeline(), true) }
    fn monitor_new_users_batch(p) { check(p, QueryName::MonitorNewUsers, &single_timeline(), false) }
    fn monitor_new_users_streaming(p) { check(p, QueryName::MonitorNewUsers, &single_timeline(), true) }
    fn user_sessions_batch(p) { check(p, QueryName::UserSessions, &single_timeline(), false) }
    fn user_sessions_streaming(p) { check(p, QueryName::UserSessions, &single_timeline(), true) }
    fn bounded_side_input_join_batch(p) { check(p, QueryName::BoundedSideInputJoin, &single_timeline(), false) }
    fn bounded_side_input_join_streaming(p) { check(p, QueryName::BoundedSideInputJoin, &single_timeline(), true) }
    fn session_side_input_join_batch(p) { check(p, QueryName::SessionSideInputJoin, &single_timeline(), false) }
    fn session_side_input_join_streaming(p) { check(p, QueryName::SessionSideInputJoin, &single_timeline(), true) }
    fn portability_batch_batch(p) { check(p, QueryName::PortabilityBatch, &single_timeline(), false) }
    fn portability_batch_is_batch_only(p) {
        // As in Beam, its GroupByKey in the global window has no trigger: streaming is refused
        // at translation time, naming the step.
        let config = single_timeline();
        let events = p.apply("Events", ReadUnbounded::from(UnboundedEventSource::new(&config)));
        queries::apply(QueryName::PortabilityBatch, &config, &events);
        let err = Pipeline::run(p).err().expect("refused").to_string();
        assert!(err.contains("GroupByShard") && err.contains("without a trigger"), "{err}");
    }
    fn reshuffle_batch(p) { check(p, QueryName::Reshuffle, &single_timeline(), false) }
    fn reshuffle_streaming(p) { check(p, QueryName::Reshuffle, &single_timeline(), true) }
    // Split timelines (5 generators), the model running over the events as the split source
    // produces them; batch or streaming alternately.
    fn selection_split(p) { check(p, QueryName::Selection, &split(), false) }
    fn local_item_suggestion_split(p) { check(p, QueryName::LocalItemSuggestion, &split(), true) }
    fn bounded_side_input_join_split(p) { check(p, QueryName::BoundedSideInputJoin, &split(), true) }
    fn passthrough_split(p) { check(p, QueryName::Passthrough, &split(), true) }
    fn currency_conversion_split(p) { check(p, QueryName::CurrencyConversion, &split(), false) }
    fn average_price_for_category_split(p) { check(p, QueryName::AveragePriceForCategory, &split(), true) }
    fn hot_items_split(p) { check(p, QueryName::HotItems, &split(), false) }
    fn average_selling_price_by_seller_split(p) { check(p, QueryName::AverageSellingPriceBySeller, &split(), false) }
    fn highest_bid_split(p) { check(p, QueryName::HighestBid, &split(), true) }
    fn monitor_new_users_split(p) { check(p, QueryName::MonitorNewUsers, &split(), false) }
    fn log_to_sharded_files_split(p) { check(p, QueryName::LogToShardedFiles, &split(), true) }
    fn user_sessions_split(p) { check(p, QueryName::UserSessions, &split(), false) }
    fn session_side_input_join_split(p) { check(p, QueryName::SessionSideInputJoin, &split(), true) }
    fn reshuffle_split(p) { check(p, QueryName::Reshuffle, &split(), false) }

    fn processing_time_windows_count_every_bid(p) {
        // Q12's panes depend on processing time; their counts per bidder add up to the bids.
        let config = single_timeline();
        let events = p.apply("Events", Read::from(BoundedEventSource::new(&config)));
        let results = queries::apply(QueryName::ProcessingTimeWindows, &config, &events);
        let mut expected: std::collections::BTreeMap<i64, i64> = Default::default();
        for e in weir_nexmark::generator::standard_events(&config) {
            if let weir_nexmark::Event::Bid(b) = e {
                *expected.entry(b.bidder).or_default() += 1;
            }
        }
        assert_that(&results).satisfies(move |actual: Vec<ResultRecord>| {
            let mut got: std::collections::BTreeMap<i64, i64> = Default::default();
            for r in actual {
                let v: serde_json::Value = serde_json::from_str(&r.value).map_err(|e| e.to_string())?;
                *got.entry(v["personId"].as_i64().unwrap_or(-1)).or_default() += v["bidsPerSession"].as_i64().unwrap_or(0);
            }
            if got == expected { Ok(()) } else { Err(format!("per-bidder totals differ: {got:?} vs {expected:?}")) }
        });
        p.run();
    }
}

/// 5,000 events at 1,000 per second in windows of one second.
fn five_windows() -> NexmarkConfig {
    NexmarkConfig { first_event_rate: 1_000, next_event_rate: 1_000, window_size_sec: 1, ..single_timeline() }
}

fn split() -> NexmarkConfig {
    NexmarkConfig { num_events: 5_000, num_event_generators: 5, ..NexmarkConfig::default() }
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
fn auction_or_bid_windows_need_the_element() {
    use weir_nexmark::queries::winning_bids::AuctionOrBidWindowFn;
    let p = weir_tests::pipeline("direct");
    let config = single_timeline();
    let events = p.apply("Events", Read::from(BoundedEventSource::new(&config)));
    events.apply("Window", Window::into(AuctionOrBidWindowFn::new(&config)));
    let err = Pipeline::run(&p).err().expect("refused").to_string();
    assert!(err.contains("Window") && err.contains("into_by_element"), "{err}");
}

#[test]
fn bid_windows_merge_into_their_open_auction_only() {
    use weir_nexmark::queries::winning_bids::AuctionOrBidWindowFn;
    let f = AuctionOrBidWindowFn::new(&single_timeline());
    let w = |start, end, tag, kind| BoundedWindow::Custom(CustomWindow { start, end, tag, kind });
    let auction = w(100, 200, 7, 1);
    let early_bid = w(50, 50 + f.bid_window_ms(), 7, 0);
    let bid = w(150, 150 + f.bid_window_ms(), 7, 0);
    let too_late = w(200, 200 + f.bid_window_ms(), 7, 0);
    let other_auction_bid = w(150, 150 + f.bid_window_ms(), 8, 0);
    let merges = f.merge_windows(&[bid, auction, too_late, other_auction_bid, early_bid]);
    assert_eq!(merges.len(), 1, "{merges:?}");
    let (mut merged, result) = merges[0].clone();
    merged.sort();
    let mut want = vec![early_bid, bid, auction];
    want.sort();
    assert_eq!((merged, result), (want, auction));
    assert!(f.merge_windows(&[bid, other_auction_bid]).is_empty(), "bids alone never merge");
}
