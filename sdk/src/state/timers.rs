//! Timers: set, cleared and read back through the call's scope, and a timer as it fires.

use super::*;
use crate::error::UserResult;
use crate::time::{duration_millis, Timestamp};
use std::time::Duration;

/// Handle on a timer (Beam's `Timer`): `ctx.timer("id", TimeDomain::EventTime).set(ts)`.
pub struct Timer<'s, 'a> {
    pub(crate) scope: &'s mut StateScope<'a>,
    pub(crate) family: String,
    pub(crate) id: String,
    pub(crate) domain: TimeDomain,
    pub(crate) offset: i64,
    pub(crate) period: i64,
    pub(crate) output: Option<Option<Timestamp>>,
}

impl Timer<'_, '_> {
    /// Adds `d` to the relative target.
    pub fn offset(mut self, d: Duration) -> Self {
        self.offset = duration_millis(d);
        self
    }
    /// Rounds the relative target up to a multiple of `period`.
    pub fn align(mut self, period: Duration) -> Self {
        self.period = duration_millis(period);
        self
    }
    /// Sets the timestamp of what the callback outputs (and the watermark hold). As in Beam, a
    /// timestamp set here must not be before the element's (or firing timer's) timestamp; one
    /// left unset defaults to the firing time (event time) or the element's timestamp
    /// (processing time) and is not checked against the element.
    pub fn with_output_timestamp(mut self, ts: Timestamp) -> Self {
        self.output = Some(Some(ts));
        self
    }
    /// Sets no output timestamp: no watermark hold, and the callback cannot output.
    pub fn with_no_output_timestamp(mut self) -> Self {
        self.output = Some(None);
        self
    }

    /// Sets an event-time timer to fire at `target` (absolute; processing-time timers must use
    /// [`Timer::set_relative`]).
    pub fn set(self, target: Timestamp) -> UserResult {
        // Outside a stateful ParDo there is no window to check against: say what is missing.
        self.scope.state()?;
        if self.domain == TimeDomain::ProcessingTime {
            return Err(format!(
                "Can't set an absolute processing-time timer '{}'; use offset(..).set_relative()",
                self.id
            )
            .into());
        }
        if target > self.scope.time.gc_time {
            return Err(format!(
                "Attempted to set event time timer '{}' for {target} but that is after the expiration of window \
                 (end of window plus allowed lateness is {})",
                self.id, self.scope.time.gc_time
            )
            .into());
        }
        self.store(target)
    }

    /// Sets the timer relative to now (input watermark or processing time) plus the offset,
    /// aligned to the period (Java's truncating `%`, as Beam's).
    pub fn set_relative(self) -> UserResult {
        self.scope.state()?;
        let now = match self.domain {
            TimeDomain::EventTime => self.scope.time.input_watermark,
            TimeDomain::ProcessingTime => self.scope.time.processing_time,
        };
        let mut target = if self.period == 0 {
            now.saturating_add(self.offset)
        } else {
            let r = now.saturating_add(self.offset) % self.period;
            if r == 0 {
                now
            } else {
                now + self.period - r
            }
        };
        if self.domain == TimeDomain::EventTime {
            target = target.min(self.scope.time.gc_time);
        }
        self.store(target)
    }

    fn store(self, target: Timestamp) -> UserResult {
        let time = self.scope.time;
        // As Beam: only an output timestamp the user set is checked against the element's; a
        // defaulted one is the firing time (event time) or the element's timestamp (processing
        // time), even when the firing time is before the element (a relative timer set while the
        // input watermark is behind it, as after a GroupByKey in the global window).
        let (output, explicit) = match self.output {
            None => (
                Some(match self.domain {
                    TimeDomain::EventTime => target,
                    TimeDomain::ProcessingTime => time.element_timestamp,
                }),
                false,
            ),
            Some(o) => (o, true),
        };
        if let Some(o) = output {
            if explicit && o < time.element_timestamp.saturating_sub(self.scope.skew) {
                return Err(format!(
                    "Cannot set timer '{}' with output timestamp {o} before the element timestamp {} (minus the \
                     DoFn's allowed timestamp skew of {} ms)",
                    self.id, time.element_timestamp, self.scope.skew
                )
                .into());
            }
            let limit = if self.domain == TimeDomain::EventTime { target } else { time.gc_time };
            if o > limit {
                return Err(format!(
                    "Cannot set timer '{}' with output timestamp {o} after {} ({})",
                    self.id,
                    if self.domain == TimeDomain::EventTime { "its firing time" } else { "the window's expiration" },
                    limit
                )
                .into());
            }
        }
        let domain = self.domain;
        self.scope.state_mut()?.timers.insert((self.family, self.id), TimerData { domain, fire: target, output });
        Ok(())
    }

    /// Sets an event-time timer at `target`, clamped to the window's expiry instead of failing
    /// when beyond it (for timers whose purpose is cleanup).
    pub fn set_relative_to(self, target: Timestamp) -> UserResult {
        let gc = self.scope.time.gc_time;
        self.set(target.min(gc))
    }

    /// Deletes the timer.
    pub fn clear(self) -> UserResult {
        let state = self.scope.state()?;
        if state.timers.remove(&(self.family, self.id)).is_some() {
            state.changed.0 = true;
        }
        Ok(())
    }
}
