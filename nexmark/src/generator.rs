//! Beam's Nexmark event generator, bit for bit: `GeneratorConfig` (timestamps, event numbers,
//! ids, splitting) and `Generator.nextEvent` with `java.util.Random` seeded per event id.

use crate::config::{NexmarkConfig, RateShape};
use crate::java_random::JavaRandom;
use crate::model::{Auction, Bid, Event, Person};
use std::sync::Arc;

/// Beam's fixed base time, 2015-07-15T00:00:00.000Z, in epoch milliseconds.
pub const BASE_TIME: i64 = 1_436_918_400_000;

/// Share of persons, auctions and bids in every 50 events.
pub const PERSON_PROPORTION: i64 = 1;
/// See [`PERSON_PROPORTION`].
pub const AUCTION_PROPORTION: i64 = 3;
/// See [`PERSON_PROPORTION`].
pub const BID_PROPORTION: i64 = 46;
/// `PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION`.
pub const PROPORTION_DENOMINATOR: i64 = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION;

const FIRST_PERSON_ID: i64 = 1000;
const FIRST_AUCTION_ID: i64 = 1000;
const FIRST_CATEGORY_ID: i64 = 10;
const NUM_CATEGORIES: i32 = 5;
const PERSON_ID_LEAD: i64 = 10;
const AUCTION_ID_LEAD: i64 = 10;
const HOT_SELLER_RATIO: i64 = 100;
const HOT_AUCTION_RATIO: i64 = 100;
const HOT_BIDDER_RATIO: i64 = 100;

const US_STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];
const US_CITIES: [&str; 10] =
    ["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"];
const FIRST_NAMES: [&str; 11] =
    ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"];
const LAST_NAMES: [&str; 9] = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"];

/// The part of the configuration the generator uses, with the derived rate schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneratorConfig {
    /// The full Nexmark configuration.
    pub config: NexmarkConfig,
    /// Timestamp of event number 0.
    pub base_time: i64,
    /// Id of the first event of this generator.
    pub first_event_id: i64,
    /// Events this generator emits.
    pub max_events: i64,
    /// Event number of the first event (shared by the splits of one generator).
    pub first_event_number: i64,
    inter_event_delay_us: Vec<i64>,
    step_length_sec: i64,
    events_per_epoch: i64,
    epoch_period_ms: i64,
}

impl GeneratorConfig {
    /// `GeneratorConfig(configuration, baseTime, firstEventId, maxEventsOrZero, firstEventNumber)`.
    pub fn new(
        config: NexmarkConfig,
        base_time: i64,
        first_event_id: i64,
        max_events_or_zero: i64,
        first_event_number: i64,
    ) -> Self {
        let unit = config.rate_unit;
        let generators = i64::from(config.num_event_generators);
        let inter_event_delay_us: Vec<i64> = if config.first_event_rate == config.next_event_rate {
            vec![unit.rate_to_period_us(config.first_event_rate) * generators]
        } else {
            match config.rate_shape {
                RateShape::Square => vec![
                    unit.rate_to_period_us(config.first_event_rate) * generators,
                    unit.rate_to_period_us(config.next_event_rate) * generators,
                ],
                RateShape::Sine => {
                    let mid = (config.first_event_rate + config.next_event_rate) as f64 / 2.0;
                    let amp = (config.first_event_rate - config.next_event_rate) as f64 / 2.0;
                    let n = RateShape::Sine.steps();
                    (0..n)
                        .map(|i| {
                            let r = 2.0 * std::f64::consts::PI * i as f64 / n as f64;
                            let rate = java_round(mid + amp * r.cos());
                            unit.rate_to_period_us(rate) * generators
                        })
                        .collect()
                }
            }
        };
        let steps = config.rate_shape.steps();
        let step_length_sec = (config.rate_period_sec + steps - 1) / steps;
        let (mut events_per_epoch, mut epoch_period_ms) = (0, 0);
        if inter_event_delay_us.len() > 1 {
            for &d in &inter_event_delay_us {
                let events_in_cycle = (step_length_sec * 1_000_000) / d;
                events_per_epoch += events_in_cycle;
                epoch_period_ms += (events_in_cycle * d) / 1000;
            }
        }
        let max_events = if max_events_or_zero == 0 {
            let largest = config.avg_person_byte_size.max(config.avg_auction_byte_size).max(config.avg_bid_byte_size);
            i64::MAX / (PROPORTION_DENOMINATOR * i64::from(largest))
        } else {
            max_events_or_zero
        };
        Self {
            config,
            base_time,
            first_event_id,
            max_events,
            first_event_number,
            inter_event_delay_us,
            step_length_sec,
            events_per_epoch,
            epoch_period_ms,
        }
    }

    /// The configuration every Beam source starts from: base time (fixed, or now with
    /// `useWallclockEventTime`), first id 0, `numEvents` events, first event number 0.
    pub fn standard(config: &NexmarkConfig) -> Self {
        let base_time = if config.use_wallclock_event_time { weir_sdk::time::now_millis() } else { BASE_TIME };
        Self::new(config.clone(), base_time, 0, config.num_events, 0)
    }

    /// `split(n)`: `n` generators over disjoint id ranges that share event numbers (and so
    /// timestamps); the last takes the remainder.
    pub fn split(&self, n: i64) -> Vec<GeneratorConfig> {
        if n <= 1 {
            return vec![self.clone()];
        }
        let mut sub_max_events = self.max_events / n;
        let mut sub_first_event_id = self.first_event_id;
        (0..n)
            .map(|i| {
                if i == n - 1 {
                    sub_max_events = self.max_events - sub_max_events * (n - 1);
                }
                let sub = self.copy_with(sub_first_event_id, sub_max_events, self.first_event_number);
                sub_first_event_id += sub_max_events;
                sub
            })
            .collect()
    }

    fn copy_with(&self, first_event_id: i64, max_events: i64, first_event_number: i64) -> GeneratorConfig {
        GeneratorConfig { first_event_id, max_events, first_event_number, ..self.clone() }
    }

    /// The generator's delay schedule, microseconds between events per step of the rate shape.
    pub fn inter_event_delay_us(&self) -> &[i64] {
        &self.inter_event_delay_us
    }

    /// Length of one step of the rate shape, in seconds.
    pub fn step_length_sec(&self) -> i64 {
        self.step_length_sec
    }

    /// `estimatedBytesForEvents(n)`: backlog estimate for `n` events.
    pub fn estimated_bytes_for_events(&self, n: i64) -> i64 {
        let c = &self.config;
        let persons = n * PERSON_PROPORTION / PROPORTION_DENOMINATOR;
        let auctions = n * AUCTION_PROPORTION / PROPORTION_DENOMINATOR;
        let bids = n * BID_PROPORTION / PROPORTION_DENOMINATOR;
        persons * i64::from(c.avg_person_byte_size)
            + auctions * i64::from(c.avg_auction_byte_size)
            + bids * i64::from(c.avg_bid_byte_size)
    }

    /// `timestampAndInterEventDelayUsForEvent(eventNumber)`: the event time of an event number
    /// and the inter-event delay in force then.
    pub fn timestamp_and_delay_for_event(&self, event_number: i64) -> (i64, i64) {
        if let [d] = self.inter_event_delay_us[..] {
            return (self.base_time + (event_number * d) / 1000, d);
        }
        let epoch = event_number / self.events_per_epoch;
        let mut event_i = event_number % self.events_per_epoch;
        let mut offset_in_epoch_ms = 0;
        for &d in &self.inter_event_delay_us {
            let events_in_cycle = (self.step_length_sec * 1_000_000) / d;
            if event_i < events_in_cycle {
                let t = self.base_time + epoch * self.epoch_period_ms + offset_in_epoch_ms + (event_i * d) / 1000;
                return (t, d);
            }
            event_i -= events_in_cycle;
            offset_in_epoch_ms += (events_in_cycle * d) / 1000;
        }
        unreachable!("event {event_number} beyond an epoch of {} events", self.events_per_epoch)
    }

    /// When (ms after the first) a rate-limited source emits event `event_number`, whose event
    /// time is `event_timestamp`. Event times space events in whole microseconds, as Beam's
    /// generator does, which makes a rate that does not divide a second run slower (400,000/s
    /// becomes one event per 3 µs: 333,333/s); a constant rate is paced at exactly the rate
    /// asked instead. A rate that changes follows the event times.
    pub fn wallclock_offset_ms(&self, event_number: i64, event_timestamp: i64) -> i64 {
        let c = &self.config;
        if c.first_event_rate != c.next_event_rate {
            return event_timestamp - self.base_time;
        }
        let us_per_event =
            c.rate_unit.us_per_unit() as f64 * f64::from(c.num_event_generators) / c.first_event_rate as f64;
        (event_number as f64 * us_per_event / 1000.0) as i64
    }

    /// The event time of an event number.
    pub fn timestamp_for_event(&self, event_number: i64) -> i64 {
        self.timestamp_and_delay_for_event(event_number).0
    }

    /// `nextEventNumber(k)`.
    pub fn next_event_number(&self, events_so_far: i64) -> i64 {
        self.first_event_number + events_so_far
    }

    /// `nextAdjustedEventNumber(k)`: the event number after the out-of-order permutation.
    pub fn next_adjusted_event_number(&self, events_so_far: i64) -> i64 {
        let g = self.config.out_of_order_group_size;
        let m = self.next_event_number(events_so_far);
        if g == 1 {
            return m; // the default: no reordering, and no 64-bit divisions per event
        }
        (m / g) * g + (m * 953) % g
    }

    /// `nextEventNumberForWatermark(k)`.
    pub fn next_event_number_for_watermark(&self, events_so_far: i64) -> i64 {
        let g = self.config.out_of_order_group_size;
        if g == 1 {
            return self.next_event_number(events_so_far);
        }
        (self.next_event_number(events_so_far) / g) * g
    }

    /// `expectedAuctionDurationMs` of WinningBids' window function.
    pub fn expected_auction_duration_ms(&self) -> i64 {
        let d = self.inter_event_delay_us.iter().copied().max().unwrap_or(0);
        ((d * PROPORTION_DENOMINATOR) / AUCTION_PROPORTION * i64::from(self.config.num_in_flight_auctions) + 999) / 1000
    }
}

/// Java's `Math.round(double)` for the finite values the generator rounds.
pub(crate) fn java_round(x: f64) -> i64 {
    (x + 0.5).floor() as i64
}

/// One generated event with its times (Beam's `NextEvent`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextEvent {
    /// When a rate-limited source should emit it.
    pub wallclock_timestamp: i64,
    /// Its event time (the adjusted timestamp, also its `dateTime`).
    pub event_timestamp: i64,
    /// The event.
    pub event: Event,
    /// The source watermark after it.
    pub watermark: i64,
}

/// Beam's `Generator`: emits the events of one [`GeneratorConfig`] in order.
#[derive(Debug, Clone)]
pub struct Generator {
    config: GeneratorConfig,
    events_so_far: i64,
    wallclock_base_time: Option<i64>,
}

impl Generator {
    /// A generator at the start of `config`.
    pub fn new(config: GeneratorConfig) -> Self {
        Self::resume(config, 0)
    }

    /// A generator that has already emitted `events_so_far` events (restart from an offset).
    pub fn resume(config: GeneratorConfig, events_so_far: i64) -> Self {
        Self { config, events_so_far, wallclock_base_time: None }
    }

    /// The generator's configuration.
    pub fn config(&self) -> &GeneratorConfig {
        &self.config
    }

    /// Events emitted so far (the source offset).
    pub fn events_so_far(&self) -> i64 {
        self.events_so_far
    }

    /// Wall-clock time of the first event, once one was generated.
    pub fn wallclock_base_time(&self) -> Option<i64> {
        self.wallclock_base_time
    }

    /// Restores the wall-clock base after a restart, so a rate-limited schedule continues.
    pub fn set_wallclock_base_time(&mut self, base: i64) {
        self.wallclock_base_time = Some(base);
    }

    /// Whether another event remains.
    pub fn has_next(&self) -> bool {
        self.events_so_far < self.config.max_events
    }

    /// `nextEvent()`, or `None` when the generator is exhausted.
    pub fn next_event(&mut self) -> Option<NextEvent> {
        if !self.has_next() {
            return None;
        }
        let wallclock_base = *self.wallclock_base_time.get_or_insert_with(weir_sdk::time::now_millis);
        let k = self.events_so_far;
        let c = &self.config;
        let number = c.next_event_number(k);
        let event_timestamp = c.timestamp_for_event(number);
        // Without reordering (the default) the three event numbers are one, and so their times.
        let time_of = |n: i64| if n == number { event_timestamp } else { c.timestamp_for_event(n) };
        let adjusted = c.next_adjusted_event_number(k);
        let adjusted_timestamp = time_of(adjusted);
        let watermark = time_of(c.next_event_number_for_watermark(k));
        let wallclock_timestamp = wallclock_base + c.wallclock_offset_ms(number, event_timestamp);
        let event_id = c.first_event_id + adjusted;
        let event = generate_event(c, k, event_id, adjusted_timestamp);
        self.events_so_far += 1;
        Some(NextEvent { wallclock_timestamp, event_timestamp: adjusted_timestamp, event, watermark })
    }
}

impl Iterator for Generator {
    type Item = NextEvent;

    fn next(&mut self) -> Option<NextEvent> {
        self.next_event()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.config.max_events - self.events_so_far).unwrap_or(0);
        (left, Some(left))
    }
}

/// The single unsplit timeline Beam's models iterate (`NexmarkUtils.standardEventIterator`):
/// event id `e` at event number `e`, stamped with the configuration's delay schedule.
pub fn standard_events(config: &NexmarkConfig) -> impl Iterator<Item = Event> {
    Generator::new(GeneratorConfig::standard(config)).map(|n| n.event)
}

/// The events Beam's pipelines see: `numEventGenerators` split timelines, concatenated in split
/// order (a bounded source's full content).
pub fn split_events(config: &NexmarkConfig) -> impl Iterator<Item = NextEvent> {
    GeneratorConfig::standard(config).split(i64::from(config.num_event_generators)).into_iter().flat_map(Generator::new)
}

/// The events of the split generators merged into one stream in event-time order (ties in
/// split order): the parallel timelines as an unbounded source delivers them, and as a topic
/// must hold them for a reader whose watermark follows each partition's latest event time
/// (split order goes back in time at every split).
pub fn events_in_time_order(config: &NexmarkConfig) -> impl Iterator<Item = NextEvent> {
    use std::cmp::Reverse;
    let mut splits: Vec<Generator> = GeneratorConfig::standard(config)
        .split(i64::from(config.num_event_generators))
        .into_iter()
        .map(Generator::new)
        .collect();
    let mut heads = std::collections::BinaryHeap::new();
    let mut next: Vec<Option<NextEvent>> = splits.iter_mut().map(Iterator::next).collect();
    for (i, n) in next.iter().enumerate() {
        if let Some(n) = n {
            heads.push(Reverse((n.event_timestamp, i)));
        }
    }
    std::iter::from_fn(move || {
        let Reverse((_, i)) = heads.pop()?;
        let out = next[i].take();
        next[i] = splits[i].next();
        if let Some(n) = &next[i] {
            heads.push(Reverse((n.event_timestamp, i)));
        }
        out
    })
}

fn generate_event(c: &GeneratorConfig, events_so_far: i64, event_id: i64, timestamp: i64) -> Event {
    let mut random = JavaRandom::new(event_id);
    let rem = event_id % PROPORTION_DENOMINATOR;
    if rem < PERSON_PROPORTION {
        Event::Person(Box::new(next_person(event_id, &mut random, timestamp, &c.config)))
    } else if rem < PERSON_PROPORTION + AUCTION_PROPORTION {
        Event::Auction(Box::new(next_auction(c, events_so_far, event_id, &mut random, timestamp)))
    } else {
        Event::Bid(next_bid(event_id, &mut random, timestamp, &c.config))
    }
}

fn last_base0_person_id(event_id: i64) -> i64 {
    let epoch = event_id / PROPORTION_DENOMINATOR;
    let mut offset = event_id % PROPORTION_DENOMINATOR;
    if PERSON_PROPORTION <= offset {
        offset = PERSON_PROPORTION - 1;
    }
    epoch * PERSON_PROPORTION + offset
}

fn last_base0_auction_id(event_id: i64) -> i64 {
    let mut epoch = event_id / PROPORTION_DENOMINATOR;
    let mut offset = event_id % PROPORTION_DENOMINATOR;
    if offset < PERSON_PROPORTION {
        epoch -= 1;
        offset = AUCTION_PROPORTION - 1;
    } else if PERSON_PROPORTION + AUCTION_PROPORTION <= offset {
        offset = AUCTION_PROPORTION - 1;
    } else {
        offset -= PERSON_PROPORTION;
    }
    epoch * AUCTION_PROPORTION + offset
}

/// `nextLong(random, n)`: a draw in `[0, n)`.
fn next_long(random: &mut JavaRandom, n: i64) -> i64 {
    if n < i64::from(i32::MAX) {
        i64::from(random.next_int_bounded(n as i32))
    } else {
        (random.next_long() % n).abs()
    }
}

fn next_base0_person_id(event_id: i64, random: &mut JavaRandom, config: &NexmarkConfig) -> i64 {
    let num_people = last_base0_person_id(event_id) + 1;
    let active = num_people.min(i64::from(config.num_active_people));
    let n = next_long(random, active + PERSON_ID_LEAD);
    num_people - active + n
}

fn next_base0_auction_id(event_id: i64, random: &mut JavaRandom, config: &NexmarkConfig) -> i64 {
    let max_auction = last_base0_auction_id(event_id);
    let min_auction = (max_auction - i64::from(config.num_in_flight_auctions)).max(0);
    min_auction + next_long(random, max_auction - min_auction + 1 + AUCTION_ID_LEAD)
}

/// Runs `fill` on `len` bytes of scratch space: on the stack when they fit (every default size
/// does), so that a string is drawn with no buffer to look up, grow or check per draw, then
/// copied once into what it becomes.
fn with_scratch<R>(len: usize, fill: impl FnOnce(&mut [u8]) -> R) -> R {
    let mut stack = [0u8; 192];
    if len <= stack.len() {
        fill(&mut stack[..len])
    } else {
        fill(&mut vec![0u8; len])
    }
}

/// The scratch bytes as text: every character drawn is ASCII.
fn ascii(bytes: &[u8]) -> &str {
    simdutf8::basic::from_utf8(bytes).expect("the characters are ASCII")
}

fn next_string(random: &mut JavaRandom, max_length: i32) -> String {
    let len = (3 + random.next_int_bounded(max_length - 3)) as usize;
    with_scratch(len, |bytes| {
        for b in bytes.iter_mut() {
            *b = if random.next_int_bounded(13) == 0 { b' ' } else { b'a' + random.next_int_bounded(26) as u8 };
        }
        ascii(bytes).trim_matches(' ').to_string()
    })
}

fn next_exact_string(random: &mut JavaRandom, length: i32) -> Arc<str> {
    with_scratch(length.max(0) as usize, |bytes| {
        let mut chunks = bytes.chunks_exact_mut(6);
        for chunk in &mut chunks {
            chunk.copy_from_slice(&six_chars(random.next_int()));
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let six = six_chars(random.next_int());
            for (to, from) in rest.iter_mut().zip(six) {
                *to = from;
            }
        }
        Arc::from(ascii(bytes))
    })
}

/// Beam's six characters of one draw: `'a' + rnd % 26`, then `rnd /= 26`, six times, in Java's
/// arithmetic (`%` and `/` truncate toward zero, so a negative draw gives characters below 'a',
/// all ASCII from 'H'). Truncating division composes and is odd in its dividend, so character
/// `k` is `'a' ± (|rnd| / 26^k) % 26`, and two characters at a time come from one of 676
/// pairs: three independent unsigned divisions by constants instead of a chain of six signed.
#[inline]
fn six_chars(rnd: i32) -> [u8; 6] {
    const fn pairs(sign: i32) -> [[u8; 2]; 676] {
        let mut t = [[0u8; 2]; 676];
        let mut i = 0;
        while i < 676 {
            t[i] = [(b'a' as i32 + sign * (i as i32 % 26)) as u8, (b'a' as i32 + sign * (i as i32 / 26)) as u8];
            i += 1;
        }
        t
    }
    static POSITIVE: [[u8; 2]; 676] = pairs(1);
    static NEGATIVE: [[u8; 2]; 676] = pairs(-1);
    let table = if rnd < 0 { &NEGATIVE } else { &POSITIVE };
    let a = rnd.unsigned_abs();
    let [p, q, r] = [a % 676, (a / 676) % 676, (a / (676 * 676)) % 676].map(|i| table[i as usize]);
    [p[0], p[1], q[0], q[1], r[0], r[1]]
}

fn next_extra(random: &mut JavaRandom, current_size: i64, desired_average_size: i32) -> Arc<str> {
    let desired = i64::from(desired_average_size);
    if current_size > desired {
        return Arc::from("");
    }
    let desired = (desired - current_size) as i32;
    let delta = java_round(f64::from(desired) * 0.2) as i32;
    let min_size = desired - delta;
    let size = min_size + if delta == 0 { 0 } else { random.next_int_bounded(2 * delta) };
    next_exact_string(random, size)
}

fn next_price(random: &mut JavaRandom) -> i64 {
    java_round(10.0_f64.powf(random.next_double() * 6.0) * 100.0)
}

fn next_person(event_id: i64, random: &mut JavaRandom, timestamp: i64, config: &NexmarkConfig) -> Person {
    let id = last_base0_person_id(event_id) + FIRST_PERSON_ID;
    let first = FIRST_NAMES[random.next_int_bounded(FIRST_NAMES.len() as i32) as usize];
    let last = LAST_NAMES[random.next_int_bounded(LAST_NAMES.len() as i32) as usize];
    let name = format!("{first} {last}");
    let email_address = format!("{}@{}.com", next_string(random, 7), next_string(random, 5));
    let credit_card = (0..4).map(|_| format!("{:04}", random.next_int_bounded(10_000))).collect::<Vec<_>>().join(" ");
    let city = US_CITIES[random.next_int_bounded(US_CITIES.len() as i32) as usize].to_string();
    let state = US_STATES[random.next_int_bounded(US_STATES.len() as i32) as usize].to_string();
    let current_size = 8 + (name.len() + email_address.len() + credit_card.len() + city.len() + state.len()) as i64;
    let extra = next_extra(random, current_size, config.avg_person_byte_size);
    Person { id, name, email_address, credit_card, city, state, date_time: timestamp, extra }
}

fn next_auction(
    c: &GeneratorConfig,
    events_so_far: i64,
    event_id: i64,
    random: &mut JavaRandom,
    timestamp: i64,
) -> Auction {
    let config = &c.config;
    let id = last_base0_auction_id(event_id) + FIRST_AUCTION_ID;
    let seller = if random.next_int_bounded(config.hot_sellers_ratio) > 0 {
        (last_base0_person_id(event_id) / HOT_SELLER_RATIO) * HOT_SELLER_RATIO
    } else {
        next_base0_person_id(event_id, random, config)
    } + FIRST_PERSON_ID;
    let category = FIRST_CATEGORY_ID + i64::from(random.next_int_bounded(NUM_CATEGORIES));
    let initial_bid = next_price(random);
    let expires = timestamp + next_auction_length_ms(c, events_so_far, random, timestamp);
    let item_name = next_string(random, 20);
    let description = next_string(random, 100);
    let reserve = initial_bid + next_price(random);
    let current_size = 8 + (item_name.len() + description.len()) as i64 + 40;
    let extra = next_extra(random, current_size, config.avg_auction_byte_size);
    Auction { id, item_name, description, initial_bid, reserve, date_time: timestamp, expires, seller, category, extra }
}

fn next_auction_length_ms(c: &GeneratorConfig, events_so_far: i64, random: &mut JavaRandom, timestamp: i64) -> i64 {
    let current_event_number = c.next_adjusted_event_number(events_so_far);
    let num_events_for_auctions =
        (i64::from(c.config.num_in_flight_auctions) * PROPORTION_DENOMINATOR) / AUCTION_PROPORTION;
    let future_auction = c.timestamp_for_event(current_event_number + num_events_for_auctions);
    let horizon_ms = future_auction - timestamp;
    1 + next_long(random, (horizon_ms * 2).max(1))
}

fn next_bid(event_id: i64, random: &mut JavaRandom, timestamp: i64, config: &NexmarkConfig) -> Bid {
    let auction = if random.next_int_bounded(config.hot_auction_ratio) > 0 {
        (last_base0_auction_id(event_id) / HOT_AUCTION_RATIO) * HOT_AUCTION_RATIO
    } else {
        next_base0_auction_id(event_id, random, config)
    } + FIRST_AUCTION_ID;
    let bidder = if random.next_int_bounded(config.hot_bidders_ratio) > 0 {
        (last_base0_person_id(event_id) / HOT_BIDDER_RATIO) * HOT_BIDDER_RATIO + 1
    } else {
        next_base0_person_id(event_id, random, config)
    } + FIRST_PERSON_ID;
    let price = next_price(random);
    let extra = next_extra(random, 32, config.avg_bid_byte_size);
    Bid { auction, bidder, price, date_time: timestamp, extra }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_constant_rate_is_paced_exactly_while_event_times_stay_beams() {
        // 400,000/s spaces event times 3 µs apart (Beam's rounding), but a second of events is
        // due after a second.
        let config = NexmarkConfig {
            first_event_rate: 400_000,
            next_event_rate: 400_000,
            num_event_generators: 4,
            ..NexmarkConfig::default()
        };
        let g = GeneratorConfig::standard(&config);
        assert_eq!(g.inter_event_delay_us(), [3 * 4]);
        // Event numbers count per generator: each of the 4 does 100,000 a second.
        let n = 100_000;
        assert_eq!(g.timestamp_for_event(n) - g.base_time, 1_200);
        assert_eq!(g.wallclock_offset_ms(n, g.timestamp_for_event(n)), 1_000);
        // A changing rate follows the event times.
        let sine = GeneratorConfig::standard(&NexmarkConfig { next_event_rate: 200_000, ..config });
        let t = sine.timestamp_for_event(n);
        assert_eq!(sine.wallclock_offset_ms(n, t), t - sine.base_time);
    }

    /// Beam's loop, character by character.
    fn beams_six(mut rnd: i32) -> [u8; 6] {
        let mut out = [0u8; 6];
        for c in &mut out {
            *c = (i32::from(b'a') + rnd % 26) as u8;
            rnd /= 26;
        }
        out
    }

    #[test]
    fn six_chars_are_beams_for_every_kind_of_draw() {
        let mut random = JavaRandom::new(42);
        let edges = [0, 1, -1, 25, 26, -26, 675, 676, -676, 456_975, 456_976, i32::MAX, i32::MIN, i32::MIN + 1];
        for rnd in edges.into_iter().chain((0..200_000).map(|_| random.next_int())) {
            assert_eq!(six_chars(rnd), beams_six(rnd), "draw {rnd}");
        }
    }
}
