//! The queries beyond the stateless ones: state and timers (Q3), sliding windows with a global
//! combine (Q5), a side input per window (Q7), a windowed CoGroupByKey (Q8), sessions (Q11),
//! processing-time triggers (Q12), side-input joins (Q13, Q14) and shuffles (Q15, Q16).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use weir_sdk::do_fn::{OnTimerContext, TimerFiring};
use weir_sdk::prelude::*;
use weir_sdk::view::{MapOf, Singleton};

use crate::model::{Auction, Bid, Event, Person};
use crate::NexmarkConfig;

/// Q3's result (Beam's `NameCityStateId`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NameCityStateId {
    /// Seller's name.
    pub name: String,
    /// Seller's city.
    pub city: String,
    /// Seller's state.
    pub state: String,
    /// Auction id.
    pub id: i64,
}

/// Q5's result (Beam's `AuctionCount`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AuctionCount {
    /// Auction id.
    pub auction: i64,
    /// Bids in the window.
    pub num: i64,
}

/// Q8's result (Beam's `IdNameReserve`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct IdNameReserve {
    /// Person id.
    pub id: i64,
    /// Person name.
    pub name: String,
    /// Reserve of one of their auctions.
    pub reserve: i64,
}

/// Q11's and Q12's result (Beam's `BidsPerSession`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BidsPerSession {
    /// Bidder id.
    pub person_id: i64,
    /// Bids in the session (or pane).
    pub bids_per_session: i64,
}

crate::queries::serde_beam_json!(NameCityStateId, AuctionCount, IdNameReserve, BidsPerSession);

impl crate::queries::KnownSize for NameCityStateId {
    fn size_in_bytes(&self) -> i64 {
        (self.name.len() + 1 + self.city.len() + 1 + self.state.len() + 1 + 8) as i64
    }
}

impl crate::queries::KnownSize for AuctionCount {
    fn size_in_bytes(&self) -> i64 {
        8 + 8
    }
}

impl crate::queries::KnownSize for IdNameReserve {
    fn size_in_bytes(&self) -> i64 {
        8 + self.name.len() as i64 + 1 + 8
    }
}

impl crate::queries::KnownSize for BidsPerSession {
    fn size_in_bytes(&self) -> i64 {
        8 + 8
    }
}

/// Beam's `fanout` setting for the combines that use it (Q4, Q5, Q7).
pub(crate) fn fanout(config: &NexmarkConfig) -> u32 {
    config.fanout.max(1) as u32
}

/// A configuration's seconds as a duration (negative: zero).
pub(crate) fn secs(s: i64) -> Duration {
    Duration::from_secs(s.max(0) as u64)
}

/// Bids only.
pub(crate) fn bids(events: &PCollection<Event>) -> PCollection<Bid> {
    events.apply(
        "Bids",
        FlatMap::new(|e: Event| match e {
            Event::Bid(b) => vec![b],
            _ => vec![],
        }),
    )
}

// ---------------------------------------------------------------------------------------------
// Q3 LOCAL_ITEM_SUGGESTION

/// The states Q3 keeps persons from.
pub const Q3_STATES: [&str; 3] = ["OR", "ID", "CA"];

/// Beam's `Query3.JoinDoFn`: per person id, the person (value state) and the auctions waiting
/// for them (bag state), cleared by an event-time timer `maxAuctionsWaitingTime` after the
/// latest element.
#[derive(Clone)]
struct JoinDoFn {
    max_auctions_waiting_time_ms: i64,
    fatal: Counter,
}

impl DoFn for JoinDoFn {
    type In = KV<i64, Event>;
    type Out = NameCityStateId;

    fn process(&mut self, kv: KV<i64, Event>, ctx: &mut ProcessContext<'_, NameCityStateId>) -> UserResult {
        let existing = ctx.value_state::<Person>("person").read()?;
        let event_time = match kv.value {
            Event::Person(person) => {
                if existing.is_some() {
                    self.fatal.inc();
                    return Err(format!("Q3: person {} seen twice", person.id).into());
                }
                ctx.value_state::<Person>("person").write(&person)?;
                let pending = ctx.bag_state::<Auction>("pendingAuctions").read()?;
                for auction in pending {
                    ctx.output(name_city_state_id(&person, &auction));
                }
                ctx.bag_state::<Auction>("pendingAuctions").clear()?;
                person.date_time
            }
            Event::Auction(auction) => {
                match &existing {
                    Some(person) => ctx.output(name_city_state_id(person, &auction)),
                    None => ctx.bag_state::<Auction>("pendingAuctions").add(&auction)?,
                }
                auction.date_time
            }
            Event::Bid(_) => return Err("Q3: a bid reached the person/auction join".into()),
        };
        ctx.timer("cleanup", TimeDomain::EventTime).set(event_time + self.max_auctions_waiting_time_ms)?;
        Ok(())
    }

    fn on_timer(&mut self, _t: &TimerFiring, ctx: &mut OnTimerContext<'_, NameCityStateId>) -> UserResult {
        ctx.value_state::<Person>("person").clear()?;
        ctx.bag_state::<Auction>("pendingAuctions").clear()
    }
}

fn name_city_state_id(person: &Person, auction: &Auction) -> NameCityStateId {
    NameCityStateId {
        name: person.name.clone(),
        city: person.city.clone(),
        state: person.state.clone(),
        id: auction.id,
    }
}

pub(crate) fn q3(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<NameCityStateId> {
    // One pass keys both sides (Beam filters the events twice and flattens): no copy of the
    // events for a second consumer that would drop almost all of them.
    let keyed = events.apply(
        "AuctionsBySellerAndPersonsById",
        FlatMap::new(|e: Event| match e {
            Event::Auction(a) if a.category == 10 => vec![KV::new(a.seller, Event::Auction(a))],
            Event::Person(p) if Q3_STATES.contains(&p.state.as_str()) => vec![KV::new(p.id, Event::Person(p))],
            _ => vec![],
        }),
    );
    keyed.apply(
        "Join",
        ParDo::stateful(JoinDoFn {
            max_auctions_waiting_time_ms: i64::from(config.max_auctions_waiting_time) * 1000,
            fatal: Metrics::counter("LOCAL_ITEM_SUGGESTION", "fatal").expect("non-empty names"),
        }),
    )
}

// ---------------------------------------------------------------------------------------------
// Q5 HOT_ITEMS

/// Keeps every auction tied for the highest bid count.
#[derive(Clone, Default)]
struct TopCounts;

impl CombineFn for TopCounts {
    type In = KV<i64, i64>;
    type Accum = Vec<KV<i64, i64>>;
    type Out = Vec<KV<i64, i64>>;

    fn create_accumulator(&self) -> Self::Accum {
        Vec::new()
    }

    fn add_input(&self, acc: &mut Self::Accum, input: KV<i64, i64>) {
        match acc.first().map(|top| top.value) {
            Some(max) if input.value < max => {}
            Some(max) if input.value == max => acc.push(input),
            _ => *acc = vec![input],
        }
    }

    fn merge_accumulators(&self, accs: Vec<Self::Accum>) -> Self::Accum {
        let mut out = Vec::new();
        for kv in accs.into_iter().flatten() {
            self.add_input(&mut out, kv);
        }
        out
    }

    fn extract_output(&self, acc: Self::Accum) -> Self::Out {
        acc
    }
}

pub(crate) fn q5(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<AuctionCount> {
    bids(events)
        .apply(
            "Window",
            Window::into(SlidingWindows::of(secs(config.window_size_sec)).every(secs(config.window_period_sec))),
        )
        .apply("AuctionIds", Map::new(|b: Bid| b.auction))
        .apply("CountPerAuction", Count::per_element())
        .apply("TopAuctions", Combine::globally(TopCounts).without_defaults().with_fanout(fanout(config)))
        .apply(
            "ToAuctionCount",
            FlatMap::new(|top: Vec<KV<i64, i64>>| {
                top.into_iter().map(|kv| AuctionCount { auction: kv.key, num: kv.value }).collect::<Vec<_>>()
            }),
        )
}

// ---------------------------------------------------------------------------------------------
// Q7 HIGHEST_BID

#[derive(Clone)]
struct SelectMaxBids {
    max: PCollectionView<Singleton<i64>>,
}

impl DoFn for SelectMaxBids {
    type In = Bid;
    type Out = Bid;

    fn process(&mut self, bid: Bid, ctx: &mut ProcessContext<'_, Bid>) -> UserResult {
        let max = ctx.side_input(&self.max)?;
        if bid.price == max {
            ctx.output(bid);
        }
        Ok(())
    }
}

pub(crate) fn q7(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<Bid> {
    let windowed = bids(events).apply("Window", Window::into(FixedWindows::of(secs(config.window_size_sec))));
    let prices = windowed.apply("Prices", Map::new(|b: Bid| b.price));
    let max = Max::globally::<i64>().with_fanout(fanout(config)).as_singleton_view("MaxPrice", &prices);
    windowed.apply(
        "SelectMaxBids",
        ParDo::of(SelectMaxBids { max: max.clone() }).with_side_inputs(vec![max.spec().clone()]),
    )
}

// ---------------------------------------------------------------------------------------------
// Q8 MONITOR_NEW_USERS

#[derive(Clone)]
struct NewUsers {
    persons: TupleTag<Person>,
    auctions: TupleTag<Auction>,
}

impl DoFn for NewUsers {
    type In = KV<i64, CoGbkResult>;
    type Out = IdNameReserve;

    fn process(&mut self, kv: KV<i64, CoGbkResult>, ctx: &mut ProcessContext<'_, IdNameReserve>) -> UserResult {
        let persons = kv.value.get_all(&self.persons)?;
        if persons.len() > 1 {
            return Err(format!("Q8: {} persons with id {} in one window", persons.len(), kv.key).into());
        }
        let Some(person) = persons.into_iter().next() else { return Ok(()) };
        for auction in kv.value.get_all(&self.auctions)? {
            ctx.output(IdNameReserve { id: person.id, name: person.name.clone(), reserve: auction.reserve });
        }
        Ok(())
    }
}

pub(crate) fn q8(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<IdNameReserve> {
    let size = secs(config.window_size_sec);
    // Persons by id and auctions by seller in one pass (Beam filters the events twice).
    let (persons, auctions) = super::split_events(
        events,
        "PersonsByIdAndAuctionsBySeller",
        ("personsById", "auctionsBySeller"),
        |e| match e {
            Event::Person(p) => super::Side::First(KV::new(p.id, *p)),
            Event::Auction(a) => super::Side::Second(KV::new(a.seller, *a)),
            Event::Bid(_) => super::Side::Neither,
        },
    );
    let persons = persons.apply("WindowPersons", Window::into(FixedWindows::of(size)));
    let auctions = auctions.apply("WindowAuctions", Window::into(FixedWindows::of(size)));
    let (pt, at) = (TupleTag::<Person>::new("persons"), TupleTag::<Auction>::new("auctions"));
    KeyedPCollectionTuple::of(&pt, &persons)
        .and(&at, &auctions)
        .apply("CoGroup", CoGroupByKey)
        .apply("NewUsers", ParDo::of(NewUsers { persons: pt, auctions: at }))
}

// ---------------------------------------------------------------------------------------------
// Q13 BOUNDED_SIDE_INPUT_JOIN, Q14 SESSION_SIDE_INPUT_JOIN

fn side_input(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollectionView<MapOf<i64, String>> {
    let rows: Vec<KV<i64, String>> = (0..config.side_input_row_count).map(|i| KV::new(i, i.to_string())).collect();
    let table = events.pipeline().apply("SideInput", Create::of(rows));
    View::as_map(&table)
}

#[derive(Clone)]
struct JoinToFiles {
    table: PCollectionView<MapOf<i64, String>>,
    rows: i64,
}

impl DoFn for JoinToFiles {
    type In = Bid;
    type Out = Bid;

    fn process(&mut self, bid: Bid, ctx: &mut ProcessContext<'_, Bid>) -> UserResult {
        let table = ctx.side_input(&self.table)?;
        let extra = table.get(&(bid.bidder % self.rows)).map_or("", String::as_str);
        ctx.output(Bid { extra: extra.into(), ..bid });
        Ok(())
    }
}

pub(crate) fn q13(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<Bid> {
    let table = side_input(config, events);
    bids(events).apply(
        "JoinToFiles",
        ParDo::of(JoinToFiles { table: table.clone(), rows: config.side_input_row_count })
            .with_side_inputs(vec![table.spec().clone()]),
    )
}

#[derive(Clone)]
struct JoinSessions {
    table: PCollectionView<MapOf<i64, String>>,
    rows: i64,
}

impl DoFn for JoinSessions {
    type In = KV<i64, Vec<Bid>>;
    type Out = Bid;

    fn process(&mut self, kv: KV<i64, Vec<Bid>>, ctx: &mut ProcessContext<'_, Bid>) -> UserResult {
        let table = ctx.side_input(&self.table)?;
        let window = ctx.window().interval().ok_or("Q14: bids are not in session windows")?;
        let base = table.get(&(kv.key % self.rows)).cloned().unwrap_or_default();
        let extra: std::sync::Arc<str> =
            format!("{base}:{}:{}", weir_sdk::time::iso8601(window.start), weir_sdk::time::iso8601(window.end)).into();
        for bid in kv.value {
            ctx.output(Bid { extra: extra.clone(), ..bid });
        }
        Ok(())
    }
}

pub(crate) fn q14(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<Bid> {
    let table = side_input(config, events);
    bids(events)
        .apply("Sessions", Window::into(Sessions::with_gap_duration(secs(config.session_gap_sec))))
        .apply("ByBidder", WithKeys::of(|b: &Bid| b.bidder))
        .apply("GroupByBidder", GroupByKey::create())
        .apply(
            "JoinSessions",
            ParDo::of(JoinSessions { table: table.clone(), rows: config.side_input_row_count })
                .with_side_inputs(vec![table.spec().clone()]),
        )
}

// ---------------------------------------------------------------------------------------------
// Q11 USER_SESSIONS, Q12 PROCESSING_TIME_WINDOWS

fn bidders(events: &PCollection<Event>) -> PCollection<i64> {
    bids(events).apply("Bidders", Map::new(|b: Bid| b.bidder))
}

fn per_session(counts: PCollection<KV<i64, i64>>) -> PCollection<BidsPerSession> {
    counts.apply(
        "ToBidsPerSession",
        Map::new(|kv: KV<i64, i64>| BidsPerSession { person_id: kv.key, bids_per_session: kv.value }),
    )
}

pub(crate) fn q11(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<BidsPerSession> {
    let windowed = bidders(events).apply(
        "Sessions",
        Window::into(Sessions::with_gap_duration(secs(config.window_size_sec)))
            .triggering(Repeatedly::forever(AfterPane::element_count_at_least(config.max_log_events)))
            .discarding_fired_panes()
            .with_allowed_lateness(secs(config.occasional_delay_sec / 2)),
    );
    per_session(windowed.apply("CountPerBidder", Count::per_element()))
}

pub(crate) fn q12(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<BidsPerSession> {
    let windowed = bidders(events).apply(
        "ProcessingTimeWindows",
        Window::into(GlobalWindows)
            .triggering(Repeatedly::forever(
                AfterProcessingTime::past_first_element_in_pane().plus_delay_of(secs(config.window_size_sec)),
            ))
            .discarding_fired_panes()
            .with_allowed_lateness(Duration::ZERO),
    );
    per_session(windowed.apply("CountPerBidder", Count::per_element()))
}

// ---------------------------------------------------------------------------------------------
// Q15 PORTABILITY_BATCH (Beam's Query13), Q16 RESHUFFLE (Beam's Query14)

#[derive(Clone)]
struct AssignShard {
    buckets: i64,
}

impl DoFn for AssignShard {
    type In = Event;
    type Out = KV<i64, Event>;

    fn process(&mut self, e: Event, ctx: &mut ProcessContext<'_, KV<i64, Event>>) -> UserResult {
        let shard = rand::random_range(0..self.buckets);
        ctx.output(KV::new(shard, e));
        Ok(())
    }
}

#[derive(Clone, Default)]
struct Ungroup {
    coder: crate::queries::EventRoundTrip,
}

impl DoFn for Ungroup {
    type In = KV<i64, Vec<Event>>;
    type Out = Event;

    fn process(&mut self, kv: KV<i64, Vec<Event>>, ctx: &mut ProcessContext<'_, Event>) -> UserResult {
        for e in kv.value {
            ctx.output(self.coder.round_trip(&e)?.0);
        }
        Ok(())
    }
}

pub(crate) fn q15(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<Event> {
    events
        .apply("AssignShards", ParDo::of(AssignShard { buckets: i64::from(config.num_key_buckets) }))
        .apply("GroupByShard", GroupByKey::create())
        .apply("Ungroup", ParDo::of(Ungroup::default()))
}

pub(crate) fn q16(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<Event> {
    events.apply("Reshuffle", Reshuffle::via_random_key().with_num_buckets(config.num_key_buckets.max(1) as u32))
}
