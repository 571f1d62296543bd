//! Q8 MONITOR_NEW_USERS: persons joined with the auctions they opened in the same fixed window,
//! through a windowed CoGroupByKey.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use weir_sdk::prelude::*;

use crate::model::{Auction, Event, Person};
use crate::queries::{record, secs, ResultRecord, Side};
use crate::NexmarkConfig;

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

crate::queries::serde_beam_json!(IdNameReserve);

impl crate::queries::KnownSize for IdNameReserve {
    fn size_in_bytes(&self) -> i64 {
        8 + self.name.len() as i64 + 1 + 8
    }
}

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

/// Q8 over `events`.
pub(crate) fn query(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<IdNameReserve> {
    let size = secs(config.window_size_sec);
    // Persons by id and auctions by seller in one pass (Beam filters the events twice).
    let (persons, auctions) = crate::queries::split_events(
        events,
        "PersonsByIdAndAuctionsBySeller",
        ("personsById", "auctionsBySeller"),
        |e| match e {
            Event::Person(p) => Side::First(KV::new(p.id, *p)),
            Event::Auction(a) => Side::Second(KV::new(a.seller, *a)),
            Event::Bid(_) => Side::Neither,
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

/// Q8's model.
pub(crate) fn model(config: &NexmarkConfig, events: &[Event]) -> Vec<ResultRecord> {
    let size = config.window_size_sec * 1000;
    let mut persons: HashMap<(i64, i64), Person> = HashMap::new();
    let mut auctions: HashMap<(i64, i64), Vec<Auction>> = HashMap::new();
    for e in events.iter().cloned() {
        match e {
            Event::Person(p) => {
                persons.insert((p.date_time.div_euclid(size), p.id), *p);
            }
            Event::Auction(a) => auctions.entry((a.date_time.div_euclid(size), a.seller)).or_default().push(*a),
            Event::Bid(_) => {}
        }
    }
    let mut out = Vec::new();
    for (key, p) in &persons {
        for a in auctions.get(key).into_iter().flatten() {
            let end = (key.0 + 1) * size - 1;
            out.push(record(end, &IdNameReserve { id: p.id, name: p.name.clone(), reserve: a.reserve }));
        }
    }
    out
}
