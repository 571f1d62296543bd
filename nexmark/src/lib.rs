//! Beam's Nexmark benchmark on Weir.
//!
//! - [`config`]: `NexmarkConfiguration` with Beam's fields and defaults, and the suites.
//! - [`generator`]: the event generator, bit-compatible with Beam's Java generator (same
//!   `java.util.Random` draws per event id, same timestamps, same splitting).
//! - [`model`]: the Person / Auction / Bid events with Beam's JSON form and sizes.
//! - [`json`]: reading that JSON form fast.

pub mod config;
pub mod event_files;
pub mod generator;
pub mod java_random;
pub mod json;
pub mod kafka;
pub mod launcher;
pub mod model;
pub mod models;
pub mod perf;
pub mod queries;
pub mod report;
mod signals;
pub mod sources;

/// Whether this launcher was built with `feature` (`built`, the feature's `cfg!`), which brings
/// `what`; else why not and the command that builds a launcher with it.
pub fn require_feature(built: bool, what: &str, feature: &str) -> Result<(), String> {
    match built {
        true => Ok(()),
        false => Err(format!(
            "this nexmark was built without {what}: build it with `cargo build --release -p weir-nexmark --features \
             {feature}`"
        )),
    }
}

pub use config::{NexmarkConfig, Suite};
pub use generator::{Generator, GeneratorConfig, NextEvent};
pub use model::{Auction, Bid, Event, Person};

/// Beam's `NexmarkQueryName`, in enum order (the order of the SMOKE suite).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum QueryName {
    /// Query 0.
    Passthrough,
    /// Query 1.
    CurrencyConversion,
    /// Query 2.
    Selection,
    /// Query 3.
    LocalItemSuggestion,
    /// Query 4.
    AveragePriceForCategory,
    /// Query 5.
    HotItems,
    /// Query 6.
    AverageSellingPriceBySeller,
    /// Query 7.
    HighestBid,
    /// Query 8.
    MonitorNewUsers,
    /// Query 9.
    WinningBids,
    /// Query 10.
    LogToShardedFiles,
    /// Query 11.
    UserSessions,
    /// Query 12.
    ProcessingTimeWindows,
    /// Query 13: the bounded side-input join.
    BoundedSideInputJoin,
    /// Query 14: the session side-input join.
    SessionSideInputJoin,
    /// Query 15 (Beam's class Query13).
    PortabilityBatch,
    /// Query 16 (Beam's class Query14).
    Reshuffle,
}

impl QueryName {
    /// Every query, in Beam's enum order.
    pub const ALL: [QueryName; 17] = [
        QueryName::Passthrough,
        QueryName::CurrencyConversion,
        QueryName::Selection,
        QueryName::LocalItemSuggestion,
        QueryName::AveragePriceForCategory,
        QueryName::HotItems,
        QueryName::AverageSellingPriceBySeller,
        QueryName::HighestBid,
        QueryName::MonitorNewUsers,
        QueryName::WinningBids,
        QueryName::LogToShardedFiles,
        QueryName::UserSessions,
        QueryName::ProcessingTimeWindows,
        QueryName::BoundedSideInputJoin,
        QueryName::SessionSideInputJoin,
        QueryName::PortabilityBatch,
        QueryName::Reshuffle,
    ];

    /// The query's number (its position in Beam's enum).
    pub fn number(self) -> usize {
        QueryName::ALL.iter().position(|&q| q == self).expect("every query is in ALL")
    }

    /// Beam's enum name, e.g. `HIGHEST_BID`.
    pub fn name(self) -> &'static str {
        match self {
            QueryName::Passthrough => "PASSTHROUGH",
            QueryName::CurrencyConversion => "CURRENCY_CONVERSION",
            QueryName::Selection => "SELECTION",
            QueryName::LocalItemSuggestion => "LOCAL_ITEM_SUGGESTION",
            QueryName::AveragePriceForCategory => "AVERAGE_PRICE_FOR_CATEGORY",
            QueryName::HotItems => "HOT_ITEMS",
            QueryName::AverageSellingPriceBySeller => "AVERAGE_SELLING_PRICE_BY_SELLER",
            QueryName::HighestBid => "HIGHEST_BID",
            QueryName::MonitorNewUsers => "MONITOR_NEW_USERS",
            QueryName::WinningBids => "WINNING_BIDS",
            QueryName::LogToShardedFiles => "LOG_TO_SHARDED_FILES",
            QueryName::UserSessions => "USER_SESSIONS",
            QueryName::ProcessingTimeWindows => "PROCESSING_TIME_WINDOWS",
            QueryName::BoundedSideInputJoin => "BOUNDED_SIDE_INPUT_JOIN",
            QueryName::SessionSideInputJoin => "SESSION_SIDE_INPUT_JOIN",
            QueryName::PortabilityBatch => "PORTABILITY_BATCH",
            QueryName::Reshuffle => "RESHUFFLE",
        }
    }

    /// Whether the query is built on Beam's `WinningBids` (queries 4, 6 and 9): Beam's SMOKE
    /// suite gives these fewer events, and in streaming over split timelines their results
    /// depend on where batches end.
    pub fn builds_on_winning_bids(self) -> bool {
        matches!(
            self,
            QueryName::AveragePriceForCategory | QueryName::AverageSellingPriceBySeller | QueryName::WinningBids
        )
    }

    /// Parses a query number (`7`) or name (`HIGHEST_BID`, `highest-bid`).
    pub fn parse(s: &str) -> Option<QueryName> {
        if let Ok(n) = s.trim().parse::<usize>() {
            return QueryName::ALL.get(n).copied();
        }
        let wanted = s.trim().to_ascii_uppercase().replace('-', "_");
        QueryName::ALL.iter().copied().find(|q| q.name() == wanted)
    }
}
