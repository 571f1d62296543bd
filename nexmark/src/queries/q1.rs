//! Q1 CURRENCY_CONVERSION: bids with the price converted from dollars to euros.

use weir_sdk::{DoFn, PCollection, ParDo, ProcessContext, UserResult};

use crate::model::{Bid, Event};
use crate::queries::{bids_of, record, ResultRecord};

/// Q1: bids with the price converted from dollars to euros (`price * 89 / 100`).
#[derive(Clone)]
struct Q1;

impl DoFn for Q1 {
    type In = Event;
    type Out = Bid;

    fn process(&mut self, e: Event, ctx: &mut ProcessContext<'_, Bid>) -> UserResult {
        if let Event::Bid(bid) = e {
            ctx.output(Bid { price: bid.price * 89 / 100, ..bid });
        }
        Ok(())
    }
}

/// Q1 over `events`.
pub(crate) fn query(events: &PCollection<Event>) -> PCollection<Bid> {
    events.apply("CurrencyConversion", ParDo::of(Q1))
}

/// Q1's model.
pub(crate) fn model(events: &[Event]) -> Vec<ResultRecord> {
    bids_of(events).map(|b| record(b.date_time, &Bid { price: b.price * 89 / 100, ..b })).collect()
}
