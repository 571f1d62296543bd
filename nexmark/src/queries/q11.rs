//! Q11 USER_SESSIONS: bids per bidder session, with a pane every `maxLogEvents` bids.

use serde::{Deserialize, Serialize};
use weir_sdk::prelude::*;

use crate::model::{Bid, Event};
use crate::queries::{bids, record, secs, sessions, ResultRecord};
use crate::NexmarkConfig;

/// Q11's and Q12's result (Beam's `BidsPerSession`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BidsPerSession {
    /// Bidder id.
    pub person_id: i64,
    /// Bids in the session (or pane).
    pub bids_per_session: i64,
}

crate::queries::serde_beam_json!(BidsPerSession);

impl crate::queries::KnownSize for BidsPerSession {
    fn size_in_bytes(&self) -> i64 {
        8 + 8
    }
}

/// The bidder of every bid.
pub(crate) fn bidders(events: &PCollection<Event>) -> PCollection<i64> {
    bids(events).apply("Bidders", Map::new(|b: Bid| b.bidder))
}

/// Counts per bidder as `BidsPerSession`.
pub(crate) fn per_session(counts: PCollection<KV<i64, i64>>) -> PCollection<BidsPerSession> {
    counts.apply(
        "ToBidsPerSession",
        Map::new(|kv: KV<i64, i64>| BidsPerSession { person_id: kv.key, bids_per_session: kv.value }),
    )
}

/// Q11 over `events`.
pub(crate) fn query(config: &NexmarkConfig, events: &PCollection<Event>) -> PCollection<BidsPerSession> {
    let windowed = bidders(events).apply(
        "Sessions",
        Window::into(Sessions::with_gap_duration(secs(config.window_size_sec)))
            .triggering(Repeatedly::forever(AfterPane::element_count_at_least(config.max_log_events)))
            .discarding_fired_panes()
            .with_allowed_lateness(secs(config.occasional_delay_sec / 2)),
    );
    per_session(windowed.apply("CountPerBidder", Count::per_element()))
}

/// Q11's model, or `None` where a session reaches `maxLogEvents` bids (the pipeline then fires
/// panes the model does not follow).
pub(crate) fn model(config: &NexmarkConfig, events: &[Event]) -> Option<Vec<ResultRecord>> {
    let sessions = sessions(events, config.window_size_sec * 1000);
    // The pipeline fires a pane every maxLogEvents bids; the model covers sessions below that.
    if sessions.iter().any(|s| s.3.len() as i64 >= config.max_log_events) {
        return None;
    }
    Some(
        sessions
            .into_iter()
            .map(|(bidder, _, end, bids)| {
                record(end - 1, &BidsPerSession { person_id: bidder, bids_per_session: bids.len() as i64 })
            })
            .collect(),
    )
}
