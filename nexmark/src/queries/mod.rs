//! Beam's Nexmark queries as composite transforms over the SDK, with Beam's monitoring wrapper
//! and results in Beam's JSON form.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use weir_sdk::coders::{Coder, ElementCoder};
use weir_sdk::metrics::DistributionResult;
use weir_sdk::{
    Counter, Distribution, DoFn, Element, FinishBundleContext, FlatMap, Metrics, PCollection, ParDo, ProcessContext,
    UserResult,
};

use crate::model::{Bid, Event};

/// Where [`split_events`] sends an event.
pub(crate) enum Side<A, B> {
    /// To the first collection.
    First(A),
    /// To the second.
    Second(B),
    /// To neither.
    Neither,
}

/// Sends each event to one of two outputs, as `side` says.
#[derive(Clone)]
struct SplitEvents<A, B> {
    second: weir_sdk::TupleTag<B>,
    side: fn(Event) -> Side<A, B>,
}

impl<A: Element, B: Element> DoFn for SplitEvents<A, B> {
    type In = Event;
    type Out = A;

    fn process(&mut self, e: Event, ctx: &mut ProcessContext<'_, A>) -> UserResult {
        match (self.side)(e) {
            Side::First(a) => ctx.output(a),
            Side::Second(b) => ctx.output_tagged(&self.second, b)?,
            Side::Neither => {}
        }
        Ok(())
    }
}

/// `events` split in one pass (step `name`) into two collections, tagged `tags`, as `side`
/// says: what Beam's queries do by reading the events twice, without a copy of the events for
/// a second consumer that would drop most of them.
pub(crate) fn split_events<A: Element, B: Element>(
    events: &PCollection<Event>,
    name: &str,
    tags: (&str, &str),
    side: fn(Event) -> Side<A, B>,
) -> (PCollection<A>, PCollection<B>) {
    let (first, second) = (weir_sdk::TupleTag::<A>::new(tags.0), weir_sdk::TupleTag::<B>::new(tags.1));
    let split = events.apply(
        name,
        ParDo::of(SplitEvents { second: second.clone(), side }).with_outputs(&first, vec![(&second).into()]),
    );
    (split.get(&first).expect("declared output"), split.get(&second).expect("declared output"))
}

pub mod q0;
pub mod q1;
pub mod q10;
pub mod q11;
pub mod q12;
pub mod q13;
pub mod q14;
pub mod q15;
pub mod q16;
pub mod q2;
pub mod q3;
pub mod q4;
pub mod q5;
pub mod q6;
pub mod q7;
pub mod q8;
pub mod q9;
pub mod winning_bids;
use crate::{NexmarkConfig, QueryName};
pub use q10::QueryOptions;

/// One query result: the element's timestamp and its value in Beam's JSON form.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ResultRecord {
    /// The result element's timestamp (epoch ms).
    pub timestamp: i64,
    /// The value as Beam's `toString()` JSON.
    pub value: String,
    /// The index of the pane the result was fired in (0 for models): orders the results of one
    /// window, so that "the last reported value" is well defined (Q6's accumulating panes).
    pub pane: i64,
}

/// A result's value in Beam's JSON form (its `toString()`).
pub trait BeamJson {
    /// The JSON text.
    fn to_beam_json(&self) -> String;
}

macro_rules! serde_beam_json {
    ($($t:ty),*) => {$(
        impl $crate::queries::BeamJson for $t {
            fn to_beam_json(&self) -> String {
                serde_json::to_string(self).expect("results are plain data and always serialise")
            }
        }
    )*};
}

pub(crate) use serde_beam_json;

impl BeamJson for Bid {
    fn to_beam_json(&self) -> String {
        crate::json::to_string(|out| crate::json::write_bid(out, self))
    }
}

impl BeamJson for crate::model::Person {
    fn to_beam_json(&self) -> String {
        crate::json::to_string(|out| crate::json::write_person(out, self))
    }
}

impl BeamJson for crate::model::Auction {
    fn to_beam_json(&self) -> String {
        crate::json::to_string(|out| crate::json::write_auction(out, self))
    }
}

impl BeamJson for Event {
    fn to_beam_json(&self) -> String {
        self.to_json()
    }
}

/// Beam's `Monitor` metrics for one prefix (`event` or `result`) in a query's namespace:
/// counters `<prefix>.elements` and `<prefix>.bytes`, and distributions whose minimum or maximum
/// give `<prefix>.startTime` / `.endTime` (processing time, ms) and `.startTimestamp` /
/// `.endTimestamp` (event time). Values are aggregated per bundle and reported when it
/// finishes (the same aggregates as reporting every element, without a metrics update each).
#[derive(Clone)]
struct MonitorMetrics {
    elements: Counter,
    bytes: Counter,
    start_time: Distribution,
    end_time: Distribution,
    start_timestamp: Distribution,
    end_timestamp: Distribution,
    pending: PendingMonitor,
    now: i64,
}

/// How many elements the monitor records per clock read: a few hundred elements take well
/// under the clock's millisecond resolution.
const CLOCK_EVERY: i64 = 256;

/// What a bundle recorded and has not reported yet (`times.count` elements).
#[derive(Clone, Copy)]
struct PendingMonitor {
    bytes: i64,
    times: DistributionResult,
    timestamps: DistributionResult,
}

impl PendingMonitor {
    const EMPTY: PendingMonitor =
        PendingMonitor { bytes: 0, times: DistributionResult::EMPTY, timestamps: DistributionResult::EMPTY };
}

impl MonitorMetrics {
    fn new(namespace: &str, prefix: &str) -> Self {
        let counter = |n: &str| Metrics::counter(namespace, format!("{prefix}.{n}")).expect("non-empty names");
        let dist = |n: &str| Metrics::distribution(namespace, format!("{prefix}.{n}")).expect("non-empty names");
        MonitorMetrics {
            elements: counter("elements"),
            bytes: counter("bytes"),
            start_time: dist("startTime"),
            end_time: dist("endTime"),
            start_timestamp: dist("startTimestamp"),
            end_timestamp: dist("endTimestamp"),
            pending: PendingMonitor::EMPTY,
            now: 0,
        }
    }

    /// Records one element; the processing time is read from the clock every
    /// [`CLOCK_EVERY`] elements (a clock read costs as much as the rest of the monitor).
    fn record(&mut self, bytes: i64, timestamp: i64) {
        if self.pending.times.count % CLOCK_EVERY == 0 {
            self.now = weir_sdk::time::now_millis();
        }
        let now = self.now;
        let p = &mut self.pending;
        p.bytes += bytes;
        p.times = p.times.combine(&DistributionResult::of(now));
        p.timestamps = p.timestamps.combine(&DistributionResult::of(timestamp));
    }

    /// Reports the bundle's aggregates (called from `finish_bundle`).
    fn flush(&mut self) {
        let p = std::mem::replace(&mut self.pending, PendingMonitor::EMPTY);
        if p.times.count == 0 {
            return;
        }
        self.elements.inc_by(p.times.count);
        self.bytes.inc_by(p.bytes);
        self.start_time.update_aggregate(&p.times);
        self.end_time.update_aggregate(&p.times);
        self.start_timestamp.update_aggregate(&p.timestamps);
        self.end_timestamp.update_aggregate(&p.timestamps);
    }
}

/// Beam's event `Monitor`: records [`MonitorMetrics`] and passes events through.
#[derive(Clone)]
struct Monitor {
    metrics: MonitorMetrics,
}

impl DoFn for Monitor {
    type In = Event;
    type Out = Event;

    fn process(&mut self, e: Event, ctx: &mut ProcessContext<'_, Event>) -> UserResult {
        self.metrics.record(e.size_in_bytes(), ctx.timestamp());
        ctx.output(e);
        Ok(())
    }

    fn finish_bundle(&mut self, _: &mut FinishBundleContext<'_, Event>) -> UserResult {
        self.metrics.flush();
        Ok(())
    }
}

/// Applies Beam's event monitor (prefix `event`, namespace = the query name) to `events`.
pub fn monitor_events(namespace: &str, events: &PCollection<Event>) -> PCollection<Event> {
    events.apply("Monitor", ParDo::of(Monitor { metrics: MonitorMetrics::new(namespace, "event") }))
}

/// Beam's `KnownSize`: a result's size in bytes as Beam's model classes report it (what the
/// `result.bytes` counter adds up).
pub trait KnownSize {
    /// Size in bytes.
    fn size_in_bytes(&self) -> i64;
}

impl KnownSize for Event {
    fn size_in_bytes(&self) -> i64 {
        Event::size_in_bytes(self)
    }
}

impl KnownSize for Bid {
    fn size_in_bytes(&self) -> i64 {
        Bid::size_in_bytes(self)
    }
}

/// Counts typed results like Beam's result monitor and, when rendering, turns them into
/// [`ResultRecord`]s (Beam's JSON); otherwise drops them (Beam's DEVNULL sink).
#[derive(Clone)]
struct ResultMonitor<T> {
    metrics: MonitorMetrics,
    _t: std::marker::PhantomData<fn(T)>,
}

impl<T: Element + KnownSize> ResultMonitor<T> {
    fn record(&mut self, value: &T, ctx: &ProcessContext<'_, impl Element>) {
        self.metrics.record(value.size_in_bytes(), ctx.timestamp());
    }
}

/// The rendering form of [`ResultMonitor`].
#[derive(Clone)]
struct ToRecord<T>(ResultMonitor<T>);

impl<T: Element + BeamJson + KnownSize> DoFn for ToRecord<T> {
    type In = T;
    type Out = ResultRecord;

    fn process(&mut self, value: T, ctx: &mut ProcessContext<'_, ResultRecord>) -> UserResult {
        self.0.record(&value, ctx);
        let (timestamp, pane) = (ctx.timestamp(), ctx.pane().index);
        ctx.output(ResultRecord { timestamp, value: value.to_beam_json(), pane });
        Ok(())
    }

    fn finish_bundle(&mut self, _: &mut FinishBundleContext<'_, ResultRecord>) -> UserResult {
        self.0.metrics.flush();
        Ok(())
    }
}

/// The discarding form of [`ResultMonitor`].
#[derive(Clone)]
struct Discard<T>(ResultMonitor<T>);

impl<T: Element + KnownSize> DoFn for Discard<T> {
    type In = T;
    type Out = ();

    fn process(&mut self, value: T, ctx: &mut ProcessContext<'_, ()>) -> UserResult {
        self.0.record(&value, ctx);
        Ok(())
    }

    fn finish_bundle(&mut self, _: &mut FinishBundleContext<'_, ()>) -> UserResult {
        self.0.metrics.flush();
        Ok(())
    }
}

/// How a query's typed results end: rendered, or counted and dropped.
trait FinishResults {
    fn records(self: Box<Self>) -> PCollection<ResultRecord>;
    fn discard(self: Box<Self>);
}

/// A query's typed results with their result monitor.
struct Typed<T> {
    results: PCollection<T>,
    monitor: ResultMonitor<T>,
}

impl<T: Element + BeamJson + KnownSize> FinishResults for Typed<T> {
    fn records(self: Box<Self>) -> PCollection<ResultRecord> {
        self.results.apply("Results", ParDo::of(ToRecord(self.monitor)))
    }
    fn discard(self: Box<Self>) {
        self.results.apply("Results", ParDo::of(Discard(self.monitor)));
    }
}

/// A query's typed results: rendered as [`ResultRecord`]s with [`QueryResults::records`] (to
/// write or check them), or counted and dropped with [`QueryResults::discard`] (a benchmark
/// run, where rendering JSON would be measured too). Either way the result monitor counts them.
pub struct QueryResults(Box<dyn FinishResults>);

impl QueryResults {
    /// The results in Beam's JSON form, with their timestamps and panes.
    pub fn records(self) -> PCollection<ResultRecord> {
        self.0.records()
    }

    /// Counts the results and drops them.
    pub fn discard(self) {
        self.0.discard()
    }
}

fn records<T: Element + BeamJson + KnownSize>(query: QueryName, results: &PCollection<T>) -> QueryResults {
    let metrics = MonitorMetrics::new(query.name(), "result");
    QueryResults(Box::new(Typed {
        results: results.clone(),
        monitor: ResultMonitor { metrics, _t: std::marker::PhantomData },
    }))
}

/// Applies `query` to `events` as Beam's `NexmarkQuery` does: an event monitor, the query, and
/// the results as [`ResultRecord`]s. Counters land in the query's namespace (its name).
/// Options beyond the configuration take their defaults (see [`apply_with`]).
pub fn apply(query: QueryName, config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<ResultRecord> {
    apply_with(query, config, &QueryOptions::default(), events).records()
}

/// [`apply`] with the options beyond the configuration (Q10's output path and shard count).
pub fn apply_with(
    query: QueryName,
    config: &NexmarkConfig,
    options: &QueryOptions,
    events: &PCollection<Event>,
) -> QueryResults {
    let namespace = query.name().to_string();
    let monitored = monitor_events(&namespace, events);
    match query {
        QueryName::Passthrough => records(query, &q0::query(&namespace, &monitored)),
        QueryName::CurrencyConversion => records(query, &q1::query(&monitored)),
        QueryName::Selection => records(query, &q2::query(config, &monitored)),
        QueryName::LocalItemSuggestion => records(query, &q3::query(config, &monitored)),
        QueryName::AveragePriceForCategory => records(query, &q4::query(config, &monitored)),
        QueryName::HotItems => records(query, &q5::query(config, &monitored)),
        QueryName::AverageSellingPriceBySeller => records(query, &q6::query(config, &monitored)),
        QueryName::HighestBid => records(query, &q7::query(config, &monitored)),
        QueryName::MonitorNewUsers => records(query, &q8::query(config, &monitored)),
        QueryName::WinningBids => records(query, &q9::query(config, &monitored)),
        QueryName::LogToShardedFiles => records(query, &q10::query(config, options, &monitored)),
        QueryName::UserSessions => records(query, &q11::query(config, &monitored)),
        QueryName::ProcessingTimeWindows => records(query, &q12::query(config, &monitored)),
        QueryName::BoundedSideInputJoin => records(query, &q13::query(config, &monitored)),
        QueryName::SessionSideInputJoin => records(query, &q14::query(config, &monitored)),
        QueryName::PortabilityBatch => records(query, &q15::query(config, &monitored)),
        QueryName::Reshuffle => records(query, &q16::query(config, &monitored)),
    }
}

/// Encodes an event with the pipeline's event coder and decodes it again (Q0, Q15), reusing one
/// buffer across elements.
#[derive(Clone, Default)]
pub(crate) struct EventRoundTrip {
    buf: Vec<u8>,
}

impl EventRoundTrip {
    /// The decoded copy of `e` and its encoded size in bytes.
    pub(crate) fn round_trip(&mut self, e: &Event) -> Result<(Event, usize), weir_sdk::UserError> {
        let coder = ElementCoder::<Event>::new();
        self.buf.clear();
        coder.encode(e, &mut self.buf)?;
        Ok((coder.decode_outer(&self.buf)?, self.buf.len()))
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

/// A model's result: `value` in Beam's JSON form at `timestamp`.
pub(crate) fn record<T: serde::Serialize>(timestamp: i64, value: &T) -> ResultRecord {
    ResultRecord { timestamp, value: serde_json::to_string(value).expect("results are plain data"), pane: 0 }
}

/// The bids among `events`, for the models.
pub(crate) fn bids_of(events: &[Event]) -> impl Iterator<Item = Bid> + '_ {
    events.iter().filter_map(|e| match e {
        Event::Bid(b) => Some(b.clone()),
        _ => None,
    })
}

/// Start of the sliding windows containing `ts` (size and period in ms, offset 0).
pub(crate) fn sliding_starts(ts: i64, size: i64, period: i64) -> impl Iterator<Item = i64> {
    let last = ts - ts.rem_euclid(period);
    (0..).map(move |i| last - i * period).take_while(move |s| *s > ts - size)
}

/// Session windows of `gap` ms per bidder: (bidder, start, end, bids in time order).
pub(crate) fn sessions(events: &[Event], gap: i64) -> Vec<(i64, i64, i64, Vec<Bid>)> {
    let mut per_bidder: BTreeMap<i64, Vec<Bid>> = BTreeMap::new();
    for b in bids_of(events) {
        per_bidder.entry(b.bidder).or_default().push(b);
    }
    let mut out = Vec::new();
    for (bidder, mut bids) in per_bidder {
        bids.sort_by_key(|b| b.date_time);
        let mut current: Option<(i64, i64, Vec<Bid>)> = None;
        for b in bids {
            match &mut current {
                Some((_, end, members)) if b.date_time < *end => {
                    *end = (*end).max(b.date_time + gap);
                    members.push(b);
                }
                _ => {
                    if let Some((s, e, m)) = current.take() {
                        out.push((bidder, s, e, m));
                    }
                    current = Some((b.date_time, b.date_time + gap, vec![b]));
                }
            }
        }
        if let Some((s, e, m)) = current {
            out.push((bidder, s, e, m));
        }
    }
    out
}
