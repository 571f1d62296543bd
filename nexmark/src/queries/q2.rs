//! Q2 SELECTION: the auction and price of bids on every `auctionSkip`-th auction.

use serde::{Deserialize, Serialize};
use weir_sdk::{DoFn, PCollection, ParDo, ProcessContext, UserResult};

use crate::model::Event;
use crate::queries::{bids_of, record, KnownSize, ResultRecord};
use crate::NexmarkConfig;

/// Q2's result (Beam's `AuctionPrice`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AuctionPrice {
    /// Auction id.
    pub auction: i64,
    /// Price in cents.
    pub price: i64,
}

crate::queries::serde_beam_json!(AuctionPrice);

impl KnownSize for AuctionPrice {
    fn size_in_bytes(&self) -> i64 {
        8 + 8
    }
}

/// Q2: the auction and price of bids on every `auctionSkip`-th auction.
#[derive(Clone)]
struct Q2 {
    skip: i64,
}

impl DoFn for Q2 {
    type In = Event;
    type Out = AuctionPrice;

    fn process(&mut self, e: Event, ctx: &mut ProcessContext<'_, AuctionPrice>) -> UserResult {
        if let Event::Bid(bid) = e {
            if bid.auction % self.skip == 0 {
                ctx.output(AuctionPrice { auction: bid.auction, price: bid.price });
            }
        }
        Ok(())
    }
}

/// Q2 over `events`.
pub(crate) fn query(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<AuctionPrice> {
    events.apply("Selection", ParDo::of(Q2 { skip: i64::from(config.auction_skip) }))
}

/// Q2's model.
pub(crate) fn model(config: &NexmarkConfig, events: &[Event]) -> Vec<ResultRecord> {
    bids_of(events)
        .filter(|b| b.auction % i64::from(config.auction_skip) == 0)
        .map(|b| record(b.date_time, &AuctionPrice { auction: b.auction, price: b.price }))
        .collect()
}
