//! The generator against the test vectors and aggregates published with Beam's Java generator.

use std::collections::BTreeMap;

use weir_nexmark::generator::{split_events, standard_events, GeneratorConfig, BASE_TIME};
use weir_nexmark::{Event, NexmarkConfig};

fn single_timeline(n: usize) -> Vec<Event> {
    let config = NexmarkConfig { num_event_generators: 1, ..NexmarkConfig::default() };
    standard_events(&config).take(n).collect()
}

#[test]
fn first_events_match_beams_vectors_with_one_generator() {
    let events = single_timeline(51);
    let Event::Person(p) = &events[0] else { panic!("event 0 is {:?}", events[0]) };
    assert_eq!((p.id, p.name.as_str(), p.email_address.as_str()), (1000, "Peter Jones", "nhd@xcat.com"));
    assert_eq!((p.credit_card.as_str(), p.city.as_str(), p.state.as_str()), ("7241 7320 9143 4888", "Portland", "WY"));
    assert_eq!(p.date_time, 1_436_918_400_000);
    assert!(p.extra.starts_with("WN_HS_bnpkkiwhwana_L^`KZjdgsid`K]MLU[aaOH"), "{}", p.extra);

    let Event::Auction(a) = &events[1] else { panic!("event 1 is {:?}", events[1]) };
    assert_eq!((a.id, a.item_name.as_str(), a.description.as_str()), (1000, "wkx mgee", "eszpqxtdxrvwmmywkmogoahf"));
    assert_eq!(
        (a.initial_bid, a.reserve, a.date_time, a.expires),
        (28873, 29448, 1_436_918_400_000, 1_436_918_400_011)
    );
    assert_eq!((a.seller, a.category), (1000, 13));
    assert!(a.extra.starts_with("zcurskufssowmihzpmZHWQM^"), "{}", a.extra);

    let Event::Auction(a) = &events[2] else { panic!("event 2 is {:?}", events[2]) };
    assert_eq!((a.id, a.item_name.as_str(), a.initial_bid, a.reserve), (1001, "z ck w", 25_626_290, 28_805_847));
    assert_eq!((a.expires - a.date_time, a.seller, a.category), (202, 1000, 12));

    let Event::Auction(a) = &events[3] else { panic!("event 3 is {:?}", events[3]) };
    assert_eq!((a.id, a.item_name.as_str(), a.initial_bid, a.reserve), (1002, "gxycmhtobprpd", 267, 422_398));
    assert_eq!((a.expires - a.date_time, a.seller, a.category), (1, 1000, 10));

    let Event::Bid(b) = &events[4] else { panic!("event 4 is {:?}", events[4]) };
    assert_eq!((b.auction, b.bidder, b.price, b.date_time), (1000, 1001, 32_530_001, 1_436_918_400_000));
    assert!(b.extra.starts_with("fdiysaV^]NLVsbolvyqwgticfdrwdyiyofziYMU"), "{}", b.extra);
    // The spec quotes "length 78" for this string; it has 77 characters (the spec's figure
    // counts one more, as Beam's sizeInBytes does with `extra + 1`). The total extra length over
    // all 92,000 bids, which includes this one, matches Beam exactly (see the aggregates test).
    assert_eq!(b.extra.len(), 77);
    assert_eq!(&*b.extra, "fdiysaV^]NLVsbolvyqwgticfdrwdyiyofziYMU\\Z`UaTQO][NX\\RM]WPYTOuwogvszlxjrcNOORM");

    let Event::Person(p) = &events[50] else { panic!("event 50 is {:?}", events[50]) };
    assert_eq!((p.id, p.name.as_str(), p.email_address.as_str()), (1001, "Sarah Smith", "f  y@yumv.com"));
    assert_eq!(
        (p.credit_card.as_str(), p.city.as_str(), p.state.as_str()),
        ("0892 2755 1923 0591", "Los Angeles", "ID")
    );
    assert_eq!(p.date_time, 1_436_918_400_005);
}

#[test]
fn default_unsplit_timeline_stamps_ten_ms_apart_with_longer_auctions() {
    let events: Vec<Event> = standard_events(&NexmarkConfig::default()).take(4).collect();
    for (e, event) in events.iter().enumerate() {
        assert_eq!(event.date_time(), BASE_TIME + 10 * e as i64);
    }
    let expires: Vec<i64> = events[1..4]
        .iter()
        .map(|e| match e {
            Event::Auction(a) => a.expires,
            other => panic!("expected an auction, got {other:?}"),
        })
        .collect();
    assert_eq!(expires, [1_436_918_409_425, 1_436_918_412_010, 1_436_918_430_159]);
    // Content other than times is the same as with one generator.
    let one = single_timeline(4);
    match (&events[2], &one[2]) {
        (Event::Auction(a), Event::Auction(b)) => assert_eq!((&a.item_name, a.reserve), (&b.item_name, b.reserve)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn default_split_aggregates_match_beam() {
    let config = NexmarkConfig::default();
    let (mut persons, mut auctions, mut bids) = (Vec::new(), Vec::new(), Vec::new());
    let (mut min_ts, mut max_ts) = (i64::MAX, i64::MIN);
    for next in split_events(&config) {
        min_ts = min_ts.min(next.event_timestamp);
        max_ts = max_ts.max(next.event_timestamp);
        assert_eq!(next.event.date_time(), next.event_timestamp);
        match next.event {
            Event::Person(p) => persons.push(p),
            Event::Auction(a) => auctions.push(a),
            Event::Bid(b) => bids.push(b),
        }
    }
    assert_eq!((persons.len(), auctions.len(), bids.len()), (2_000, 6_000, 92_000));
    let person_ids: Vec<i64> = persons.iter().map(|p| p.id).collect();
    assert_eq!((person_ids.iter().min(), person_ids.iter().max()), (Some(&1000), Some(&2999)));
    let auction_ids: Vec<i64> = auctions.iter().map(|a| a.id).collect();
    assert_eq!((auction_ids.iter().min(), auction_ids.iter().max()), (Some(&1000), Some(&6999)));

    assert_eq!(bids.iter().map(|b| b.price).sum::<i64>(), 667_953_890_778);
    assert_eq!(bids.iter().map(|b| b.price).min(), Some(100));
    assert_eq!(bids.iter().map(|b| b.price).max(), Some(99_958_591));
    assert_eq!(auctions.iter().map(|a| a.reserve).sum::<i64>(), 84_210_428_628);
    assert_eq!(auctions.iter().map(|a| a.initial_bid).sum::<i64>(), 42_818_320_499);
    assert_eq!(bids.iter().map(|b| b.extra.len()).sum::<usize>(), 6_211_297);
    assert_eq!(persons.iter().map(|p| p.extra.len()).sum::<usize>(), 278_557);
    assert_eq!(auctions.iter().map(|a| a.extra.len()).sum::<usize>(), 2_341_727);
    assert_eq!((min_ts - BASE_TIME, max_ts - BASE_TIME), (0, 9_990));
    assert_eq!(auctions.iter().map(|a| a.expires).max(), Some(BASE_TIME + 42_807));
    let mut states: BTreeMap<&str, usize> = BTreeMap::new();
    for p in &persons {
        *states.entry(p.state.as_str()).or_default() += 1;
    }
    let expected: BTreeMap<&str, usize> =
        [("WA", 353), ("WY", 348), ("ID", 331), ("CA", 323), ("OR", 323), ("AZ", 322)].into_iter().collect();
    assert_eq!(states, expected);
}

#[test]
fn split_covers_disjoint_ids_sharing_timestamps() {
    let config = NexmarkConfig { num_events: 1_003, num_event_generators: 10, ..NexmarkConfig::default() };
    let splits = GeneratorConfig::standard(&config).split(10);
    assert_eq!(splits.len(), 10);
    let firsts: Vec<i64> = splits.iter().map(|s| s.first_event_id).collect();
    assert_eq!(firsts, [0, 100, 200, 300, 400, 500, 600, 700, 800, 900]);
    assert_eq!(splits.iter().map(|s| s.max_events).sum::<i64>(), 1_003);
    assert_eq!(splits[9].max_events, 103);
    assert!(splits.iter().all(|s| s.first_event_number == 0));
    // Same content as the unsplit timeline, different times.
    let split: Vec<Event> = split_events(&config).map(|n| n.event).collect();
    let unsplit: Vec<Event> = standard_events(&config).collect();
    assert_eq!(split.len(), unsplit.len());
    for (a, b) in split.iter().zip(&unsplit) {
        match (a, b) {
            (Event::Bid(x), Event::Bid(y)) => {
                assert_eq!((x.auction, x.bidder, x.price), (y.auction, y.bidder, y.price))
            }
            (Event::Person(x), Event::Person(y)) => assert_eq!((x.id, &x.name), (y.id, &y.name)),
            (Event::Auction(x), Event::Auction(y)) => assert_eq!((x.id, x.reserve), (y.id, y.reserve)),
            other => panic!("kinds differ: {other:?}"),
        }
    }
    assert_eq!(split[100].date_time(), BASE_TIME, "split 1 starts at the base time too");
}

#[test]
fn rate_shapes_and_out_of_order_groups() {
    let square = NexmarkConfig {
        rate_shape: weir_nexmark::config::RateShape::Square,
        first_event_rate: 10_000,
        next_event_rate: 1_000,
        num_event_generators: 1,
        rate_period_sec: 2,
        ..NexmarkConfig::default()
    };
    let g = GeneratorConfig::standard(&square);
    assert_eq!(g.inter_event_delay_us(), [100, 1000]);
    assert_eq!(g.step_length_sec(), 1);
    // 10,000 events in the first second, then 1,000 in the next, then the cycle repeats.
    assert_eq!(g.timestamp_for_event(9_999), BASE_TIME + 999);
    assert_eq!(g.timestamp_for_event(10_000), BASE_TIME + 1_000);
    assert_eq!(g.timestamp_for_event(10_001), BASE_TIME + 1_001);
    assert_eq!(g.timestamp_for_event(11_000), BASE_TIME + 2_000);

    let sine = NexmarkConfig { rate_shape: weir_nexmark::config::RateShape::Sine, ..square.clone() };
    let g = GeneratorConfig::standard(&sine);
    assert_eq!(g.inter_event_delay_us().len(), 10);
    assert_eq!(g.inter_event_delay_us()[0], 100, "step 0 runs at the first rate");
    assert_eq!(g.inter_event_delay_us()[5], 1000, "step 5 runs at the next rate");

    let shuffled = NexmarkConfig { out_of_order_group_size: 10, num_event_generators: 1, ..NexmarkConfig::default() };
    let g = GeneratorConfig::standard(&shuffled);
    let adjusted: Vec<i64> = (0..10).map(|k| g.next_adjusted_event_number(k)).collect();
    let mut sorted = adjusted.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..10).collect::<Vec<i64>>(), "a permutation within the group");
    assert_ne!(adjusted, sorted);
    assert!((0..10).all(|k| g.next_event_number_for_watermark(k) == 0));
}

#[test]
fn events_round_trip_through_beams_json_form() {
    for event in single_timeline(60) {
        let json = event.to_json();
        assert!(!json.contains("\"Bid\"") && !json.contains("\"Person\""), "no enum tag: {json}");
        assert_eq!(Event::from_json(&json).expect("parses"), event);
    }
    let bid = single_timeline(5).pop().expect("five events");
    let json = bid.to_json();
    assert!(
        json.starts_with("{\"auction\":1000,\"bidder\":1001,\"price\":32530001,\"dateTime\":1436918400000,"),
        "{json}"
    );
    assert!(Event::from_json("{\"auction\":1}").is_err());
}

/// The split generators merged in event-time order (what `--export-events kafka://` publishes)
/// hold exactly the events of split order, with times that never go back, where split order
/// goes back at every split.
#[test]
fn events_merged_in_time_order_are_the_split_events_with_growing_times() {
    let config = NexmarkConfig { num_events: 20_000, num_event_generators: 4, ..NexmarkConfig::default() };
    let merged: Vec<_> = weir_nexmark::generator::events_in_time_order(&config).map(|n| n.event).collect();
    let split: Vec<Event> = split_events(&config).map(|n| n.event).collect();
    assert!(split.windows(2).any(|w| w[1].date_time() < w[0].date_time()), "split order never goes back");
    assert!(merged.windows(2).all(|w| w[0].date_time() <= w[1].date_time()));
    let key = |e: &Event| e.to_json();
    let (mut a, mut b): (Vec<String>, Vec<String>) =
        (merged.iter().map(key).collect(), split.iter().map(key).collect());
    a.sort();
    b.sort();
    assert_eq!(a, b);
}
