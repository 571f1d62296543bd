//! Triggers: when the panes of a window are emitted (Beam's trigger catalogue).
//!
//! A [`Trigger`] is a description; runner-core executes it as a state machine per key and
//! window. Builders mirror Beam's names: `AfterWatermark::past_end_of_window()`,
//! `AfterProcessingTime::past_first_element_in_pane()`, `AfterPane::element_count_at_least(n)`,
//! `Repeatedly::forever(t)`, `AfterEach::in_order(..)`, `AfterFirst::of(..)`,
//! `AfterAll::of(..)`, `t.or_finally(u)`, `Never::ever()`, `Trigger::Default`.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A trigger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Trigger {
    /// Fires when the watermark passes the end of the window, and again for every late arrival.
    Default,
    /// Fires once the watermark passes the end of the window, with optional early firings before
    /// and late firings after (both implicitly repeated).
    AfterWatermark {
        /// Fires before the end of the window, repeatedly.
        early: Option<Box<Trigger>>,
        /// Fires after the on-time pane, repeatedly.
        late: Option<Box<Trigger>>,
    },
    /// Fires once processing time passes the arrival of the pane's first element plus a delay,
    /// optionally rounded up to an alignment.
    AfterProcessingTime {
        /// Delay after the first element, ms.
        delay_ms: i64,
        /// Round the target up to the next `offset + k * period` (ms): `(period, offset)`.
        align: Option<(i64, i64)>,
    },
    /// The continuation of processing-time triggers after a GroupByKey: fires once processing
    /// time passes the pane's first element's arrival.
    AfterSynchronizedProcessingTime,
    /// Fires once the pane holds at least this many elements.
    AfterCount(i64),
    /// Fires whenever the inner trigger fires; resets it when it finishes; never finishes.
    Repeatedly(Box<Trigger>),
    /// Fires each sub-trigger in turn; finishes after the last.
    AfterEach(Vec<Trigger>),
    /// Fires when any sub-trigger fires, once.
    AfterFirst(Vec<Trigger>),
    /// Fires when every sub-trigger has fired, once.
    AfterAll(Vec<Trigger>),
    /// Fires when the first fires; finishes when the second (the "until") fires.
    OrFinally(Box<Trigger>, Box<Trigger>),
    /// Never fires; the window's contents are emitted only when it expires.
    Never,
}

impl Trigger {
    /// `self.orFinally(until)`.
    pub fn or_finally(self, until: impl Into<Trigger>) -> Trigger {
        Trigger::OrFinally(Box::new(self), Box::new(until.into()))
    }

    /// Whether the trigger can ever finish (close the window while it may still get data).
    pub fn may_finish(&self) -> bool {
        match self {
            Trigger::Default | Trigger::Never | Trigger::Repeatedly(_) => false,
            Trigger::AfterWatermark { late: Some(_), .. } => false,
            Trigger::AfterWatermark { late: None, .. } => true,
            Trigger::AfterProcessingTime { .. } | Trigger::AfterSynchronizedProcessingTime | Trigger::AfterCount(_) => {
                true
            }
            Trigger::AfterEach(ts) => ts.iter().all(Trigger::may_finish),
            Trigger::AfterFirst(ts) => ts.iter().any(Trigger::may_finish),
            Trigger::AfterAll(ts) => ts.iter().all(Trigger::may_finish),
            Trigger::OrFinally(..) => true,
        }
    }

    /// Whether a GroupByKey may use this trigger with `allowed_lateness_ms` without dropping data
    /// after the trigger finishes (Beam's `GroupByKey.applicableTo` safety check): triggers that
    /// cannot finish are safe, and so is `AfterWatermark.pastEndOfWindow()` (with or without early
    /// firings) when there is no allowed lateness.
    pub fn is_safe(&self, allowed_lateness_ms: i64) -> bool {
        match self {
            Trigger::AfterWatermark { late: None, .. } => allowed_lateness_ms == 0,
            t => !t.may_finish(),
        }
    }

    /// The trigger a GroupByKey's output carries (Beam's `getContinuationTrigger`).
    pub fn continuation(&self) -> Trigger {
        match self {
            Trigger::Default => Trigger::Default,
            Trigger::Never => Trigger::Never,
            Trigger::AfterWatermark { early, late } => Trigger::AfterWatermark {
                early: early.as_ref().map(|t| Box::new(t.continuation())),
                late: late.as_ref().map(|t| Box::new(t.continuation())),
            },
            Trigger::AfterProcessingTime { .. } | Trigger::AfterSynchronizedProcessingTime => {
                Trigger::AfterSynchronizedProcessingTime
            }
            Trigger::AfterCount(_) => Trigger::AfterCount(1),
            Trigger::Repeatedly(t) => Trigger::Repeatedly(Box::new(t.continuation())),
            Trigger::AfterEach(ts) => {
                Trigger::Repeatedly(Box::new(Trigger::AfterFirst(ts.iter().map(Trigger::continuation).collect())))
            }
            Trigger::AfterFirst(ts) => Trigger::AfterFirst(ts.iter().map(Trigger::continuation).collect()),
            Trigger::AfterAll(ts) => Trigger::AfterAll(ts.iter().map(Trigger::continuation).collect()),
            Trigger::OrFinally(t, u) => Trigger::OrFinally(Box::new(t.continuation()), Box::new(u.continuation())),
        }
    }
}

/// `AfterWatermark.pastEndOfWindow()`.
pub struct AfterWatermark;

impl AfterWatermark {
    /// Fires once the watermark passes the end of the window.
    pub fn past_end_of_window() -> AfterWatermarkBuilder {
        AfterWatermarkBuilder { early: None, late: None }
    }
}

/// Adds early and late firings to [`AfterWatermark::past_end_of_window`].
#[derive(Clone, Debug)]
pub struct AfterWatermarkBuilder {
    early: Option<Box<Trigger>>,
    late: Option<Box<Trigger>>,
}

impl AfterWatermarkBuilder {
    /// Fires `t` (repeatedly) before the end of the window.
    pub fn with_early_firings(mut self, t: impl Into<Trigger>) -> Self {
        self.early = Some(Box::new(t.into()));
        self
    }
    /// Fires `t` (repeatedly) after the on-time pane.
    pub fn with_late_firings(mut self, t: impl Into<Trigger>) -> Self {
        self.late = Some(Box::new(t.into()));
        self
    }
    /// See [`Trigger::or_finally`].
    pub fn or_finally(self, until: impl Into<Trigger>) -> Trigger {
        Trigger::from(self).or_finally(until)
    }
}

impl From<AfterWatermarkBuilder> for Trigger {
    fn from(b: AfterWatermarkBuilder) -> Trigger {
        Trigger::AfterWatermark { early: b.early, late: b.late }
    }
}

/// `AfterProcessingTime.pastFirstElementInPane()`.
pub struct AfterProcessingTime;

impl AfterProcessingTime {
    /// Fires once processing time reaches the arrival of the pane's first element.
    pub fn past_first_element_in_pane() -> AfterProcessingTimeBuilder {
        AfterProcessingTimeBuilder { delay_ms: 0, align: None }
    }
}

/// Adds a delay and an alignment to [`AfterProcessingTime::past_first_element_in_pane`].
#[derive(Clone, Copy, Debug)]
pub struct AfterProcessingTimeBuilder {
    delay_ms: i64,
    align: Option<(i64, i64)>,
}

impl AfterProcessingTimeBuilder {
    /// Adds `d` to the target.
    pub fn plus_delay_of(mut self, d: Duration) -> Self {
        self.delay_ms += crate::time::duration_millis(d);
        self
    }
    /// Rounds the target up to the next `offset + k * period`.
    pub fn aligned_to(mut self, period: Duration, offset: i64) -> Self {
        self.align = Some((crate::time::duration_millis(period).max(1), offset));
        self
    }
    /// See [`Trigger::or_finally`].
    pub fn or_finally(self, until: impl Into<Trigger>) -> Trigger {
        Trigger::from(self).or_finally(until)
    }
}

impl From<AfterProcessingTimeBuilder> for Trigger {
    fn from(b: AfterProcessingTimeBuilder) -> Trigger {
        Trigger::AfterProcessingTime { delay_ms: b.delay_ms, align: b.align }
    }
}

/// `AfterPane`.
pub struct AfterPane;

impl AfterPane {
    /// Fires once the pane holds at least `n` elements.
    pub fn element_count_at_least(n: i64) -> Trigger {
        Trigger::AfterCount(n.max(1))
    }
}

/// `Repeatedly`.
pub struct Repeatedly;

impl Repeatedly {
    /// Fires whenever `t` fires, forever.
    pub fn forever(t: impl Into<Trigger>) -> Trigger {
        Trigger::Repeatedly(Box::new(t.into()))
    }
}

/// `AfterEach`.
pub struct AfterEach;

impl AfterEach {
    /// Runs the triggers one after the other.
    pub fn in_order(ts: Vec<Trigger>) -> Trigger {
        Trigger::AfterEach(ts)
    }
}

/// `AfterFirst`.
pub struct AfterFirst;

impl AfterFirst {
    /// Fires when any of `ts` fires.
    pub fn of(ts: Vec<Trigger>) -> Trigger {
        Trigger::AfterFirst(ts)
    }
}

/// `AfterAll`.
pub struct AfterAll;

impl AfterAll {
    /// Fires when all of `ts` have fired.
    pub fn of(ts: Vec<Trigger>) -> Trigger {
        Trigger::AfterAll(ts)
    }
}

/// `Never`.
pub struct Never;

impl Never {
    /// A trigger that never fires.
    pub fn ever() -> Trigger {
        Trigger::Never
    }
}

/// Whether fired panes are kept (Beam's `AccumulationMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AccumulationMode {
    /// Each pane holds only what arrived since the previous one.
    Discarding,
    /// Each pane holds everything so far.
    Accumulating,
}

/// How the timestamps of grouped elements combine into the output's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimestampCombiner {
    /// The earliest input timestamp.
    Earliest,
    /// The latest input timestamp.
    Latest,
    /// The end of the window.
    EndOfWindow,
}

/// Whether the final pane at window expiry is emitted when empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClosingBehavior {
    /// Always emit a final pane.
    FireAlways,
    /// Only when it has data.
    FireIfNonEmpty,
}

/// Whether the on-time pane is emitted when empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OnTimeBehavior {
    /// Always emit the on-time pane.
    FireAlways,
    /// Only when it has data.
    FireIfNonEmpty,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safety_follows_beam() {
        let wm: Trigger = AfterWatermark::past_end_of_window().into();
        assert!(wm.is_safe(0));
        assert!(!wm.is_safe(1000));
        let late: Trigger =
            AfterWatermark::past_end_of_window().with_late_firings(AfterPane::element_count_at_least(1)).into();
        assert!(late.is_safe(1000));
        assert!(!AfterPane::element_count_at_least(2).is_safe(0));
        assert!(Repeatedly::forever(AfterPane::element_count_at_least(2)).is_safe(0));
        assert!(Never::ever().is_safe(5));
        assert!(Trigger::Default.is_safe(5));
        assert!(!Repeatedly::forever(AfterPane::element_count_at_least(2)).or_finally(wm.clone()).is_safe(0));
    }

    #[test]
    fn continuations() {
        assert_eq!(AfterPane::element_count_at_least(5).continuation(), Trigger::AfterCount(1));
        let pt: Trigger =
            AfterProcessingTime::past_first_element_in_pane().plus_delay_of(Duration::from_secs(1)).into();
        assert_eq!(pt.continuation(), Trigger::AfterSynchronizedProcessingTime);
        assert_eq!(
            AfterEach::in_order(vec![Trigger::AfterCount(2), Trigger::AfterCount(3)]).continuation(),
            Repeatedly::forever(AfterFirst::of(vec![Trigger::AfterCount(1), Trigger::AfterCount(1)]))
        );
    }
}
