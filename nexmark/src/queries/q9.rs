//! Q9 WINNING_BIDS: the winning bid of every auction that closed (see [`super::winning_bids`]).

use weir_sdk::prelude::*;

use crate::model::Event;
use crate::queries::winning_bids::{self, AuctionBid, WinningBids};
use crate::queries::{record, ResultRecord};
use crate::{NexmarkConfig, QueryName};

/// Q9 WINNING_BIDS.
pub(crate) fn query(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<AuctionBid> {
    events.apply("WinningBids", WinningBids::new(QueryName::WinningBids.name(), config))
}

/// Q9's model.
pub(crate) fn model(events: &[Event]) -> Vec<ResultRecord> {
    winning_bids::model(events).into_iter().map(|(ts, ab)| record(ts, &ab)).collect()
}
