//! PeriodicImpulse: ticks in processing time, Beam's source for slowly changing side inputs.

use crate::io::source::{ReadUnbounded, UnboundedReader, UnboundedSource};
use crate::pipeline::{PBegin, PCollection, PTransform};
use crate::splittable::{
    Claims, OffsetRange, ProcessContinuation, Progress, RestrictionTracker, SdfContext, SplittableDoFn,
    SplittableParDo, WatermarkEstimator,
};
use crate::time::{now_millis, Timestamp, MAX_TIMESTAMP, MIN_TIMESTAMP};
use crate::transforms::window_into::Window;
use crate::window_fn::FixedWindows;
use crate::UserResult;
use std::time::Duration;

/// Beam's `PeriodicImpulse`: the timestamps `start, start + interval, ...` up to `stop`, each
/// emitted once the wall clock reaches it, at that timestamp (ticks already due when the
/// pipeline starts come at once). The watermark is the next tick, so windows close as time
/// passes; after `stop` the source is done. Each tick is emitted exactly once, also across a
/// restart from a checkpoint.
///
/// The pattern it serves is a side input that changes slowly: map each tick to a fresh value
/// (read a file, query a table), window it, and read it as a singleton view in a streaming
/// pipeline.
///
/// ```
/// use std::time::Duration;
/// use weir_sdk::prelude::*;
/// use weir_sdk::io::periodic::PeriodicImpulse;
/// let p = Pipeline::create();
/// let ticks: PCollection<Timestamp> = p.apply(
///     "Ticks",
///     PeriodicImpulse::create().with_interval(Duration::from_secs(60)).apply_windowing(),
/// );
/// assert!(p.validate().is_ok());
/// ```
#[derive(Clone, Debug)]
pub struct PeriodicImpulse {
    start: Option<Timestamp>,
    stop: Timestamp,
    interval: i64,
    windowing: bool,
}

impl PeriodicImpulse {
    /// Ticks every minute from now on, forever (Beam's defaults).
    pub fn create() -> Self {
        PeriodicImpulse { start: None, stop: MAX_TIMESTAMP, interval: 60_000, windowing: false }
    }
    /// The first tick (the default is the time the pipeline is built).
    pub fn start_at(self, start: Timestamp) -> Self {
        PeriodicImpulse { start: Some(start), ..self }
    }
    /// No tick after `stop`.
    pub fn stop_at(self, stop: Timestamp) -> Self {
        PeriodicImpulse { stop, ..self }
    }
    /// The time between ticks (at least 1 ms).
    pub fn with_interval(self, interval: Duration) -> Self {
        PeriodicImpulse { interval: crate::time::duration_millis(interval).max(1), ..self }
    }
    /// Puts each tick in a fixed window of the interval's length (Beam's `applyWindowing`).
    pub fn apply_windowing(self) -> Self {
        PeriodicImpulse { windowing: true, ..self }
    }
}

/// The ticks of a [`PeriodicImpulse`], as an unbounded source.
#[derive(Clone, Debug)]
pub struct Ticks {
    start: Timestamp,
    stop: Timestamp,
    interval: i64,
}

/// Reads [`Ticks`]: the next tick's number is the checkpoint.
pub struct TicksReader {
    ticks: Ticks,
    next: i64,
}

impl TicksReader {
    /// The next tick's time, `None` past the stop.
    fn due(&self) -> Option<Timestamp> {
        let t = self.ticks.start.checked_add(self.next.checked_mul(self.ticks.interval)?)?;
        (t <= self.ticks.stop).then_some(t)
    }
}

impl UnboundedSource for Ticks {
    type Output = Timestamp;
    type Checkpoint = i64;
    type Reader = TicksReader;
    fn split(&self, _desired: usize) -> UserResult<Vec<Self>> {
        Ok(vec![self.clone()])
    }
    fn create_reader(&self, checkpoint: Option<i64>) -> UserResult<TicksReader> {
        Ok(TicksReader { ticks: self.clone(), next: checkpoint.unwrap_or(0) })
    }
    fn describe(&self) -> String {
        format!("PeriodicImpulse from {} to {} every {} ms", self.start, self.stop, self.interval)
    }
}

impl UnboundedReader for TicksReader {
    type Output = Timestamp;
    type Checkpoint = i64;
    fn advance(&mut self) -> UserResult<Option<(Timestamp, Timestamp)>> {
        match self.due() {
            Some(t) if t <= now_millis() => {
                self.next += 1;
                Ok(Some((t, t)))
            }
            _ => Ok(None),
        }
    }
    fn watermark(&self) -> Timestamp {
        self.due().unwrap_or(MAX_TIMESTAMP)
    }
    fn checkpoint(&self) -> i64 {
        self.next
    }
}

impl PTransform<PBegin> for PeriodicImpulse {
    type Output = PCollection<Timestamp>;
    fn expand(self, input: PBegin) -> Self::Output {
        let ticks = Ticks { start: self.start.unwrap_or_else(now_millis), stop: self.stop, interval: self.interval };
        let read = input.apply("Ticks", ReadUnbounded::from(ticks));
        if !self.windowing {
            return read;
        }
        let window = FixedWindows::of(Duration::from_millis(self.interval as u64));
        read.apply("Window", Window::into(window))
    }
}

/// One sequence of [`PeriodicSequence`]: ticks at `first`, `first + interval`, ... up to
/// `last` (Beam's `SequenceDefinition`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct SequenceDefinition {
    /// The first tick.
    pub first: Timestamp,
    /// No tick after this one.
    pub last: Timestamp,
    /// Between ticks, ms (at least 1).
    pub interval_ms: i64,
}

impl SequenceDefinition {
    /// Ticks from `first` to `last` (inclusive) every `interval`.
    pub fn new(first: Timestamp, last: Timestamp, interval: Duration) -> Self {
        SequenceDefinition { first, last, interval_ms: crate::time::duration_millis(interval).max(1) }
    }
}

/// Beam's `PeriodicSequence`: for each [`SequenceDefinition`] of its input, the ticks
/// `first, first + interval, ...` up to `last`, each emitted once the processing time has
/// passed it, at its own timestamp. It is a splittable DoFn over the ticks: the ticks already
/// claimed are part of the checkpoint, so each is emitted once across restarts, and the
/// output watermark follows the last tick of every sequence (each sequence's watermark is set
/// by hand to its last tick), so windows downstream close as ticks pass. Its output is
/// unbounded: a pipeline reading it runs in streaming mode.
///
/// Unlike [`PeriodicImpulse`], the sequences come from data: definitions can be computed, and
/// read from a side input or a file, at run time.
///
/// ```
/// use std::time::Duration;
/// use weir_sdk::prelude::*;
/// use weir_sdk::io::periodic::{PeriodicSequence, SequenceDefinition};
/// let p = Pipeline::create();
/// let ticks: PCollection<Timestamp> = p
///     .apply("Definition", Create::of(vec![SequenceDefinition::new(0, 60_000, Duration::from_secs(10))]))
///     .apply("Ticks", PeriodicSequence::create());
/// assert!(p.graph().is_streaming());
/// assert!(p.validate().is_ok());
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct PeriodicSequence;

impl PeriodicSequence {
    /// The transform.
    pub fn create() -> Self {
        PeriodicSequence
    }
}

/// Claims ticks of a sequence (Beam's `PeriodicSequence.OutputRangeTracker`): the restriction
/// `[from, to]` holds the ticks after `from` up to `to`, and splits only to checkpoint, after
/// the last tick claimed.
#[derive(Clone, Debug)]
pub struct TickTracker {
    range: OffsetRange,
    last_claimed: i64,
    last_attempted: i64,
}

impl TickTracker {
    /// Tracks the ticks of `range` after `range.from`.
    pub fn new(range: OffsetRange) -> Self {
        TickTracker { range, last_claimed: range.from, last_attempted: range.from }
    }
}

impl RestrictionTracker for TickTracker {
    type Restriction = OffsetRange;
    type Position = i64;
    fn try_claim(&mut self, tick: i64) -> bool {
        assert!(
            tick > self.last_attempted,
            "Trying to claim tick {tick} while last attempted was {}",
            self.last_attempted
        );
        self.last_attempted = tick;
        if tick > self.range.to {
            return false;
        }
        self.last_claimed = tick;
        true
    }
    fn current_restriction(&self) -> OffsetRange {
        self.range
    }
    fn try_split(&mut self, fraction_of_remainder: f64) -> Option<OffsetRange> {
        if fraction_of_remainder != 0.0 {
            return None;
        }
        let residual = OffsetRange::new(self.last_claimed, self.range.to);
        self.range = OffsetRange::new(self.range.from, self.last_claimed);
        Some(residual)
    }
    fn check_done(&self) -> Result<(), String> {
        if self.last_attempted >= self.range.to.saturating_sub(1) {
            return Ok(());
        }
        Err(format!(
            "last attempted tick was {} in {:?}: claiming ticks in ({}, {}] was not attempted",
            self.last_attempted, self.range, self.last_attempted, self.range.to
        ))
    }
    fn progress(&self) -> Progress {
        let left = (self.range.to as f64 - self.last_attempted as f64).max(0.0);
        Progress { work_completed: (self.range.to as f64 - self.range.from as f64) - left, work_remaining: left }
    }
}

/// The DoFn of [`PeriodicSequence`].
#[derive(Clone, Copy, Debug)]
struct PeriodicSequenceFn;

impl SplittableDoFn for PeriodicSequenceFn {
    type In = SequenceDefinition;
    type Out = Timestamp;
    type Restriction = OffsetRange;
    type Tracker = TickTracker;
    fn initial_restriction(&self, d: &SequenceDefinition) -> UserResult<OffsetRange> {
        Ok(OffsetRange::new(d.first.saturating_sub(d.interval_ms.max(1)), d.last))
    }
    fn new_tracker(&self, _: &SequenceDefinition, r: OffsetRange) -> TickTracker {
        TickTracker::new(r)
    }
    fn initial_watermark_estimator(&self, _: &SequenceDefinition, _: Timestamp) -> WatermarkEstimator {
        WatermarkEstimator::Manual(MIN_TIMESTAMP)
    }
    fn unbounded_per_element(&self) -> bool {
        true
    }
    fn process(
        &mut self,
        d: &SequenceDefinition,
        tracker: &mut Claims<'_, TickTracker>,
        ctx: &mut SdfContext<'_, Timestamp>,
    ) -> UserResult<ProcessContinuation> {
        let interval = d.interval_ms.max(1);
        let from = tracker.current_restriction().from;
        ctx.set_watermark(from)?;
        let mut next = from.saturating_add(interval);
        let mut claimed = true;
        while claimed && next < ctx.processing_time() {
            claimed = tracker.try_claim(next);
            if claimed {
                ctx.output_with_timestamp(next, next)?;
                ctx.set_watermark(next)?;
                next = next.saturating_add(interval);
            }
        }
        if !claimed {
            return Ok(ProcessContinuation::stop());
        }
        let wait = (next - ctx.processing_time()).max(1);
        Ok(ProcessContinuation::resume().with_resume_delay(Duration::from_millis(wait as u64)))
    }
}

impl PTransform<PCollection<SequenceDefinition>> for PeriodicSequence {
    type Output = PCollection<Timestamp>;
    fn expand(self, input: PCollection<SequenceDefinition>) -> Self::Output {
        input.apply("Sequence", SplittableParDo::of(PeriodicSequenceFn))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_resume_after_their_checkpoint_and_end_after_the_stop() {
        let ticks = Ticks { start: 1_000, stop: 1_030, interval: 10 };
        let mut reader = ticks.create_reader(None).unwrap();
        assert_eq!(reader.advance().unwrap(), Some((1_000, 1_000)));
        assert_eq!(reader.watermark(), 1_010);
        let mut resumed = ticks.create_reader(Some(reader.checkpoint())).unwrap();
        let rest: Vec<_> = std::iter::from_fn(|| resumed.advance().unwrap()).collect();
        assert_eq!(rest, vec![(1_010, 1_010), (1_020, 1_020), (1_030, 1_030)]);
        assert_eq!(resumed.watermark(), MAX_TIMESTAMP);
        // A tick in the future is not emitted before its time.
        let future = now_millis() + 60_000;
        let mut later = Ticks { start: future, stop: MAX_TIMESTAMP, interval: 10 }.create_reader(None).unwrap();
        assert_eq!(later.advance().unwrap(), None);
        assert_eq!(later.watermark(), future);
    }
}
