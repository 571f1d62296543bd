//! Q12 PROCESSING_TIME_WINDOWS: bids per bidder in panes fired by processing time. Its results
//! depend on processing time, so it has no model.

use std::time::Duration;

use weir_sdk::prelude::*;

use crate::model::Event;
use crate::queries::q11::{bidders, per_session, BidsPerSession};
use crate::queries::secs;
use crate::NexmarkConfig;

/// Q12 over `events`.
pub(crate) fn query(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<BidsPerSession> {
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
