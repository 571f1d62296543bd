//! PeriodicImpulse: ticks in processing time, Beam's source for slowly changing side inputs.

use crate::io::source::{ReadUnbounded, UnboundedReader, UnboundedSource};
use crate::pipeline::{PBegin, PCollection, PTransform};
use crate::time::{now_millis, Timestamp, MAX_TIMESTAMP};
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
