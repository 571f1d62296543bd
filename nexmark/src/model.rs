//! Beam's Nexmark model objects: events (Person, Auction, Bid) with Beam's JSON form and sizes.

use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A new person (Beam's `Person`). Field order and JSON names as Beam's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Person {
    /// Person id, from 1000.
    pub id: i64,
    /// "First Last".
    pub name: String,
    /// Email address.
    pub email_address: String,
    /// Four groups of four digits.
    pub credit_card: String,
    /// City.
    pub city: String,
    /// US state code.
    pub state: String,
    /// Event time, epoch milliseconds.
    pub date_time: i64,
    /// Padding to the configured average size. Shared, not copied, when the event is cloned
    /// (an event read by two transforms is cloned once per extra reader).
    pub extra: Arc<str>,
}

/// A new auction (Beam's `Auction`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Auction {
    /// Auction id, from 1000.
    pub id: i64,
    /// Item name.
    pub item_name: String,
    /// Description.
    pub description: String,
    /// Initial bid, in cents.
    pub initial_bid: i64,
    /// Reserve price, in cents.
    pub reserve: i64,
    /// Event time, epoch milliseconds.
    pub date_time: i64,
    /// Bids at or after this instant are ignored.
    pub expires: i64,
    /// Seller's person id.
    pub seller: i64,
    /// Category id, from 10.
    pub category: i64,
    /// Padding to the configured average size. Shared, not copied, when the event is cloned
    /// (an event read by two transforms is cloned once per extra reader).
    pub extra: Arc<str>,
}

/// A bid (Beam's `Bid`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bid {
    /// Auction id.
    pub auction: i64,
    /// Bidder's person id.
    pub bidder: i64,
    /// Price in cents.
    pub price: i64,
    /// Event time, epoch milliseconds.
    pub date_time: i64,
    /// Padding to the configured average size. Shared, not copied, when the event is cloned
    /// (an event read by two transforms is cloned once per extra reader).
    pub extra: Arc<str>,
}

/// One Nexmark event: exactly one of a new person, a new auction or a bid.
///
/// The derived serde form (externally tagged) is what pipelines encode; [`Event::to_json`] and
/// [`Event::from_json`] give Beam's JSON form, which is the inner object alone.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Event {
    /// A new person (boxed, as the rarer and larger kinds are, so that an event, mostly a bid,
    /// moves between pipeline steps as 64 bytes).
    Person(Box<Person>),
    /// A new auction.
    Auction(Box<Auction>),
    /// A bid.
    Bid(Bid),
}

/// Beam's JSON form of an event, used to read an events file back.
#[derive(Deserialize)]
#[serde(untagged)]
enum BeamJsonEvent {
    Person(Person),
    Auction(Auction),
    Bid(Bid),
}

impl Event {
    /// Beam's `toString()`: the inner object's JSON, instants as epoch milliseconds.
    pub fn to_json(&self) -> String {
        crate::json::to_string(|out| crate::json::write_event(out, self))
    }

    /// Parses one line of Beam's JSON form (a Person, Auction or Bid object).
    pub fn from_json(line: &str) -> Result<Event, serde_json::Error> {
        Ok(match serde_json::from_str::<BeamJsonEvent>(line)? {
            BeamJsonEvent::Person(p) => Event::Person(Box::new(p)),
            BeamJsonEvent::Auction(a) => Event::Auction(Box::new(a)),
            BeamJsonEvent::Bid(b) => Event::Bid(b),
        })
    }

    /// The event's time (its `dateTime`), epoch milliseconds.
    pub fn date_time(&self) -> i64 {
        match self {
            Event::Person(p) => p.date_time,
            Event::Auction(a) => a.date_time,
            Event::Bid(b) => b.date_time,
        }
    }

    /// Beam's `sizeInBytes` (`KnownSize`), used for the bytes counters and rates.
    pub fn size_in_bytes(&self) -> i64 {
        1 + match self {
            Event::Person(p) => p.size_in_bytes(),
            Event::Auction(a) => a.size_in_bytes(),
            Event::Bid(b) => b.size_in_bytes(),
        }
    }

    /// Beam's `hasAnnotation`: whether `extra` starts with `annotation: `.
    pub fn has_annotation(&self, annotation: &str) -> bool {
        let extra = match self {
            Event::Person(p) => &p.extra,
            Event::Auction(a) => &a.extra,
            Event::Bid(b) => &b.extra,
        };
        extra.strip_prefix(annotation).is_some_and(|rest| rest.starts_with(": "))
    }

    /// Beam's `withAnnotation`: prefixes `extra` with `annotation: `.
    pub fn with_annotation(mut self, annotation: &str) -> Event {
        let extra = match &mut self {
            Event::Person(p) => &mut p.extra,
            Event::Auction(a) => &mut a.extra,
            Event::Bid(b) => &mut b.extra,
        };
        *extra = format!("{annotation}: {extra}").into();
        self
    }
}

fn len(s: &str) -> i64 {
    s.len() as i64
}

impl Person {
    /// Beam's `Person.sizeInBytes`.
    pub fn size_in_bytes(&self) -> i64 {
        8 + len(&self.name)
            + 1
            + len(&self.email_address)
            + 1
            + len(&self.credit_card)
            + 1
            + len(&self.city)
            + 1
            + len(&self.state)
            + 8
            + 1
            + len(&self.extra)
            + 1
    }
}

impl Auction {
    /// Beam's `Auction.sizeInBytes`.
    pub fn size_in_bytes(&self) -> i64 {
        8 + len(&self.item_name) + 1 + len(&self.description) + 1 + 8 + 8 + 8 + 8 + 8 + 8 + len(&self.extra) + 1
    }
}

impl Bid {
    /// Beam's `Bid.sizeInBytes`.
    pub fn size_in_bytes(&self) -> i64 {
        8 + 8 + 8 + 8 + len(&self.extra) + 1
    }
}
