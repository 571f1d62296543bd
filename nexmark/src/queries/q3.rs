//! Q3 LOCAL_ITEM_SUGGESTION: persons in some states joined with their auctions in one category,
//! through per-person state and an event-time cleanup timer.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use weir_sdk::do_fn::{OnTimerContext, TimerFiring};
use weir_sdk::prelude::*;

use crate::model::{Auction, Event, Person};
use crate::queries::{record, ResultRecord};
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

crate::queries::serde_beam_json!(NameCityStateId);

impl crate::queries::KnownSize for NameCityStateId {
    fn size_in_bytes(&self) -> i64 {
        (self.name.len() + 1 + self.city.len() + 1 + self.state.len() + 1 + 8) as i64
    }
}

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

pub(crate) fn query(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<NameCityStateId> {
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

/// Q3's model.
pub(crate) fn model(events: &[Event]) -> Vec<ResultRecord> {
    let mut persons: HashMap<i64, Person> = HashMap::new();
    let mut waiting: HashMap<i64, Vec<Auction>> = HashMap::new();
    let mut out = Vec::new();
    let emit = |p: &Person, a: &Auction, out: &mut Vec<ResultRecord>, ts: i64| {
        let v = NameCityStateId { name: p.name.clone(), city: p.city.clone(), state: p.state.clone(), id: a.id };
        out.push(record(ts, &v));
    };
    for e in events.iter().cloned() {
        match e {
            Event::Person(p) if Q3_STATES.contains(&p.state.as_str()) => {
                for a in waiting.remove(&p.id).unwrap_or_default() {
                    emit(&p, &a, &mut out, p.date_time);
                }
                persons.insert(p.id, *p);
            }
            Event::Auction(a) if a.category == 10 => match persons.get(&a.seller) {
                Some(p) => emit(p, &a, &mut out, a.date_time),
                None => waiting.entry(a.seller).or_default().push(*a),
            },
            _ => {}
        }
    }
    out
}
