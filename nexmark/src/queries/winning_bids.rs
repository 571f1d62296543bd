//! Beam's `WinningBids` (the core of Q4, Q6 and Q9) and the three queries built on it.
//!
//! Auctions and bids are windowed by a custom merging window function: an auction's window is
//! `[auction time, expires)`, a bid's window is `[bid time, bid time + 2 × expected auction
//! duration)`, both tagged with the auction id. Per auction id, every bid window starting
//! before the auction window ends merges into the auction window, so the CoGroupByKey that
//! follows sees, per auction, exactly the bids placed before it expired, and fires when the
//! watermark passes `expires`. Bid windows that never merge expire without output.

use std::any::Any;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use weir_sdk::prelude::*;

use crate::generator::GeneratorConfig;
use crate::model::{Auction, Bid, Event};
use crate::NexmarkConfig;

/// Kind of a window holding an auction.
const AUCTION_WINDOW: u8 = 1;
/// Kind of a window holding a bid.
const BID_WINDOW: u8 = 0;

/// Beam's `AuctionOrBidWindowFn`: windows from the element (auction or bid), merged per auction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuctionOrBidWindowFn {
    expected_auction_duration_ms: i64,
}

impl AuctionOrBidWindowFn {
    /// The window function for a configuration: bid windows last twice the expected auction
    /// duration at the slowest event rate.
    pub fn new(config: &NexmarkConfig) -> Self {
        AuctionOrBidWindowFn {
            expected_auction_duration_ms: GeneratorConfig::standard(config).expected_auction_duration_ms(),
        }
    }

    /// How long a bid window lasts.
    pub fn bid_window_ms(&self) -> i64 {
        self.expected_auction_duration_ms.saturating_mul(2)
    }
}

impl WindowFn for AuctionOrBidWindowFn {
    /// Without the element the window cannot be chosen: keeps the current one. Only reachable
    /// through code that bypasses [`Window::into_by_element`], which `Window::into` refuses.
    fn assign_windows(&self, _: Timestamp, window: &BoundedWindow, out: &mut Vec<BoundedWindow>) {
        out.push(*window);
    }

    fn is_merging(&self) -> bool {
        true
    }

    fn is_compatible(&self, other: &dyn WindowFn) -> bool {
        other.as_any().downcast_ref::<AuctionOrBidWindowFn>() == Some(self)
    }

    fn merge_windows(&self, windows: &[BoundedWindow]) -> Vec<(Vec<BoundedWindow>, BoundedWindow)> {
        // Runners merge one key's windows at a time (one auction id), so plain scans over the
        // few windows beat building maps by id.
        let custom = |w: &BoundedWindow| match w {
            BoundedWindow::Custom(c) => Some(*c),
            _ => None,
        };
        let mut merges = Vec::new();
        let mut seen: Vec<i64> = Vec::new();
        // The same auction twice (duplicated input): the last one takes the bids.
        for auction in windows.iter().rev().filter_map(custom).filter(|c| c.kind == AUCTION_WINDOW) {
            if seen.contains(&auction.tag) {
                continue;
            }
            seen.push(auction.tag);
            // Bid windows starting at or after the auction's end stay apart and expire unused.
            let mut merged: Vec<BoundedWindow> = Vec::with_capacity(windows.len());
            merged.extend(
                windows
                    .iter()
                    .filter_map(custom)
                    .filter(|b| b.kind == BID_WINDOW && b.tag == auction.tag && b.start < auction.end)
                    .map(BoundedWindow::Custom),
            );
            if !merged.is_empty() {
                merged.push(BoundedWindow::Custom(auction));
                merges.push((merged, BoundedWindow::Custom(auction)));
            }
        }
        merges
    }

    fn assigns_by_element(&self) -> bool {
        true
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl ElementWindowFn<Event> for AuctionOrBidWindowFn {
    fn assign_element_windows(
        &self,
        event: &Event,
        timestamp: Timestamp,
        _: &BoundedWindow,
        out: &mut Vec<BoundedWindow>,
    ) -> Result<(), String> {
        let window = match event {
            Event::Auction(a) => CustomWindow { start: timestamp, end: a.expires, tag: a.id, kind: AUCTION_WINDOW },
            Event::Bid(b) => CustomWindow {
                start: timestamp,
                end: timestamp.saturating_add(self.bid_window_ms()),
                tag: b.auction,
                kind: BID_WINDOW,
            },
            Event::Person(p) => return Err(format!("only auctions and bids have windows, not person {}", p.id)),
        };
        if window.end <= window.start {
            return Err(format!("auction {} expires at {}, not after its time {}", window.tag, window.end, timestamp));
        }
        out.push(BoundedWindow::Custom(window));
        Ok(())
    }
}

/// WinningBids' result (Beam's `AuctionBid`): a closed auction and its winning bid.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AuctionBid {
    /// The auction.
    pub auction: Auction,
    /// Its winning bid.
    pub bid: Bid,
}

crate::queries::serde_beam_json!(AuctionBid);

impl crate::queries::KnownSize for AuctionBid {
    fn size_in_bytes(&self) -> i64 {
        self.auction.size_in_bytes() + self.bid.size_in_bytes()
    }
}

/// Whether bid `a` beats bid `b` for an auction: Beam's `PRICE_THEN_DESCENDING_TIME` (higher
/// price, then earlier time), then — where Beam keeps whichever came first — the lower bidder
/// and the smaller `extra`, so that the winner does not depend on arrival order.
pub fn beats<B: Ranked>(a: &B, b: &B) -> bool {
    let (a, b) = (a.rank(), b.rank());
    a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(b.2.cmp(&a.2)).then(b.3.cmp(a.3)) == Ordering::Greater
}

/// What ranks a bid: price, time, bidder and `extra` (its UTF-8 bytes, which order as the
/// string does).
pub trait Ranked {
    /// (price, date_time, bidder, extra).
    fn rank(&self) -> (i64, i64, i64, &[u8]);
}

impl Ranked for Bid {
    fn rank(&self) -> (i64, i64, i64, &[u8]) {
        (self.price, self.date_time, self.bidder, self.extra.as_bytes())
    }
}

/// A bid read in place from a CoGroupByKey result ([`CoGbkResult::get_all_borrowed`]): its
/// fields in [`Bid`]'s order, `extra` borrowed as the bytes of the string (encoded alike), so
/// only the winner's is checked to be UTF-8.
#[derive(Deserialize)]
struct BidRef<'a> {
    auction: i64,
    bidder: i64,
    price: i64,
    date_time: i64,
    #[serde(borrow)]
    extra: &'a [u8],
}

impl Ranked for BidRef<'_> {
    fn rank(&self) -> (i64, i64, i64, &[u8]) {
        (self.price, self.date_time, self.bidder, self.extra)
    }
}

impl BidRef<'_> {
    fn to_bid(&self) -> Result<Bid, std::str::Utf8Error> {
        Ok(Bid {
            auction: self.auction,
            bidder: self.bidder,
            price: self.price,
            date_time: self.date_time,
            extra: std::str::from_utf8(self.extra)?.into(),
        })
    }
}

/// The winning bid of `auction` among `bids` (all placed before it expired): the best bid at or
/// above the reserve, if any.
pub fn winner<'a, B: Ranked>(auction: &Auction, bids: impl IntoIterator<Item = &'a B>) -> Option<&'a B> {
    let mut best: Option<&B> = None;
    for bid in bids {
        if bid.rank().0 >= auction.reserve && best.is_none_or(|b| beats(bid, b)) {
            best = Some(bid);
        }
    }
    best
}

/// The join after the CoGroupByKey: one `AuctionBid` per auction with a valid bid.
#[derive(Clone)]
struct Join {
    auctions: TupleTag<Auction>,
    bids: TupleTag<Bid>,
    no_auction: Counter,
    under_reserve: Counter,
    no_valid_bids: Counter,
}

impl DoFn for Join {
    type In = KV<i64, CoGbkResult>;
    type Out = AuctionBid;

    fn process(&mut self, kv: KV<i64, CoGbkResult>, ctx: &mut ProcessContext<'_, AuctionBid>) -> UserResult {
        let Some(auction) = kv.value.get_only(&self.auctions)? else {
            // Bids without their auction (or placed after it expired): nothing to win.
            self.no_auction.inc();
            return Ok(());
        };
        // Bids are looked at in place; only the winner is built.
        let bids: Vec<BidRef<'_>> = kv.value.get_all_borrowed(&self.bids)?;
        if let Some(late) = bids.iter().find(|b| b.date_time >= auction.expires) {
            return Err(format!(
                "bid at {} merged into auction {} which expired at {}",
                late.date_time, auction.id, auction.expires
            )
            .into());
        }
        self.under_reserve.inc_by(bids.iter().filter(|b| b.price < auction.reserve).count() as i64);
        match winner(&auction, &bids) {
            Some(best) => {
                let bid = best.to_bid().map_err(|e| format!("the winning bid of auction {}: {e}", auction.id))?;
                ctx.output(AuctionBid { auction, bid });
            }
            None => self.no_valid_bids.inc(),
        }
        Ok(())
    }
}

/// Beam's `WinningBids`: the winning bid of every auction that closed, timestamped at
/// `expires - 1` (the end of the merged auction window). Counters `noAuction`, `underReserve`
/// and `noValidBids` land in the namespace given.
pub struct WinningBids {
    namespace: String,
    window_fn: AuctionOrBidWindowFn,
}

impl WinningBids {
    /// WinningBids for `config`, counting in `namespace`.
    pub fn new(namespace: &str, config: &NexmarkConfig) -> Self {
        WinningBids { namespace: namespace.to_string(), window_fn: AuctionOrBidWindowFn::new(config) }
    }
}

impl PTransform<PCollection<Event>> for WinningBids {
    type Output = PCollection<AuctionBid>;

    fn expand(self, events: PCollection<Event>) -> PCollection<AuctionBid> {
        let counter = |n: &str| Metrics::counter(&self.namespace, n).expect("non-empty names");
        let windowed = events
            .apply("AuctionsAndBids", Filter::by(|e: &Event| matches!(e, Event::Auction(_) | Event::Bid(_))))
            .apply("Window", Window::into_by_element(self.window_fn));
        // One pass splits auctions (by id) from bids (by auction): no copy of the events.
        let (auctions, bids) = super::split_events(
            &windowed,
            "AuctionsAndBidsByAuction",
            ("auctionsById", "bidsByAuction"),
            |e| match e {
                Event::Auction(a) => super::Side::First(KV::new(a.id, *a)),
                Event::Bid(b) => super::Side::Second(KV::new(b.auction, b)),
                Event::Person(_) => super::Side::Neither,
            },
        );
        let (at, bt) = (TupleTag::<Auction>::new("auctions"), TupleTag::<Bid>::new("bids"));
        KeyedPCollectionTuple::of(&at, &auctions).and(&bt, &bids).apply("CoGroup", CoGroupByKey).apply(
            "Join",
            ParDo::of(Join {
                auctions: at,
                bids: bt,
                no_auction: counter("noAuction"),
                under_reserve: counter("underReserve"),
                no_valid_bids: counter("noValidBids"),
            }),
        )
    }
}

/// Beam's `WinningBids` over a whole run: per auction, the best bid at or above the reserve
/// among the bids placed before it expired (also before the auction itself appeared), stamped
/// `expires - 1`; in auction-id order.
pub(crate) fn model(events: &[Event]) -> Vec<(i64, AuctionBid)> {
    let mut auctions: BTreeMap<i64, Auction> = BTreeMap::new();
    let mut bids: HashMap<i64, Vec<Bid>> = HashMap::new();
    for e in events {
        match e {
            Event::Auction(a) => {
                auctions.insert(a.id, (**a).clone());
            }
            Event::Bid(b) => bids.entry(b.auction).or_default().push(b.clone()),
            Event::Person(_) => {}
        }
    }
    let mut out = Vec::new();
    for (id, auction) in auctions {
        let placed = bids.get(&id).into_iter().flatten().filter(|b| b.date_time < auction.expires);
        if let Some(bid) = winner(&auction, placed).cloned() {
            out.push((auction.expires - 1, AuctionBid { auction, bid }));
        }
    }
    out
}
