//! Sinks of an external system that commit each batch of output exactly once: a Kafka topic
//! written in one transaction per batch, a table that takes an upsert per batch.
//!
//! A [`CommitSink`] is opened once per run, under the run's *owner*: the checkpointed query's
//! name, the same across restarts from its checkpoint, or a name of its own for a run without
//! one. The runner hands the writer each batch's whole output with the batch's id when it
//! commits the batch, before it records the commit in its checkpoint. A batch replayed after a
//! crash comes again with the same id and the same output, so a writer that records which ids
//! it committed (in the same transaction as the output, as Beam's `KafkaExactlyOnceSink` does)
//! skips the replay, and the output is exactly once. Runners without batches (and runners that
//! do not translate the sink) call it once per bundle, numbered from 0 within the run.

use crate::coders::Element;
use crate::do_fn::{DoFn, FinishBundleContext, ProcessContext};
use crate::error::UserResult;
use crate::kernel::Batch;
use crate::pipeline::{PCollection, PDone, PTransform};
use crate::transforms::par_do::ParDo;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A sink that commits batches (implemented by an IO; see the module's documentation).
pub trait CommitSink: Send + Sync {
    /// What and where it writes, for plans and errors.
    fn describe(&self) -> String;
    /// Opens the sink for a run owned by `owner`: connects, and fails, naming the place, if it
    /// cannot.
    fn open(&self, owner: &str) -> UserResult<Box<dyn CommitSinkWriter>>;
}

/// An open [`CommitSink`].
pub trait CommitSinkWriter: Send {
    /// Writes batch `batch_id`, made of `batches` (of the sink's element type), exactly once:
    /// an id committed before (a replay) writes nothing more.
    fn commit(&mut self, batch_id: u64, batches: Vec<Batch>) -> UserResult;

    /// Whether the writer is handed every batch, with no output too (an empty list), rather
    /// than only those with output. A writer that records each batch id it committed where it
    /// may be lost (a broker that acknowledges writes before it keeps them) can then tell a
    /// gap in that record from batches that wrote nothing, and fail rather than go on.
    fn every_batch(&self) -> bool {
        false
    }
}

/// The runner-visible payload of [`WriteCommitted`].
#[derive(Clone)]
pub struct CommitSinkPayload {
    /// The sink.
    pub sink: Arc<dyn CommitSink>,
}

/// Writes a collection to a [`CommitSink`] (an IO's write transform applies it).
pub struct WriteCommitted {
    sink: Arc<dyn CommitSink>,
}

impl WriteCommitted {
    /// A write to `sink`.
    pub fn to(sink: Arc<dyn CommitSink>) -> Self {
        WriteCommitted { sink }
    }
}

impl<T: Element> PTransform<PCollection<T>> for WriteCommitted {
    type Output = PDone;
    /// Runners with batches translate the composite whole; the others run this expansion,
    /// which commits each bundle as a batch of its own.
    fn expand(self, input: PCollection<T>) -> PDone {
        input.pipeline().set_composite_payload(Arc::new(CommitSinkPayload { sink: self.sink.clone() }));
        let run = Arc::new(RunWriter { writer: OnceLock::new(), next: AtomicU64::new(0) });
        input.apply("PerBundle", ParDo::of(PerBundle::<T> { sink: self.sink, run, buffer: Vec::new() }));
        PDone
    }
    fn composite_urn() -> Option<&'static str> {
        Some(crate::urns::COMMIT_SINK)
    }
}

/// The writer of a run of the expansion, shared by its DoFn instances, and the next bundle id.
struct RunWriter {
    writer: OnceLock<Result<Mutex<Box<dyn CommitSinkWriter>>, String>>,
    next: AtomicU64,
}

struct PerBundle<T> {
    sink: Arc<dyn CommitSink>,
    run: Arc<RunWriter>,
    buffer: Vec<crate::windowed_value::WindowedValue<T>>,
}

impl<T> Clone for PerBundle<T> {
    fn clone(&self) -> Self {
        PerBundle { sink: self.sink.clone(), run: self.run.clone(), buffer: Vec::new() }
    }
}

impl<T: Element> DoFn for PerBundle<T> {
    type In = T;
    type Out = ();
    fn setup(&mut self) -> UserResult {
        let sink = &self.sink;
        let owner = format!("run {:016x}", rand::random::<u64>());
        match self.run.writer.get_or_init(|| sink.open(&owner).map(Mutex::new).map_err(|e| e.to_string())) {
            Ok(_) => Ok(()),
            Err(e) => Err(e.clone().into()),
        }
    }
    fn process(&mut self, e: T, ctx: &mut ProcessContext<'_, ()>) -> UserResult {
        let (timestamp, window, pane) = (ctx.timestamp(), *ctx.window(), *ctx.pane());
        self.buffer.push(crate::windowed_value::WindowedValue { value: e, timestamp, window, pane });
        Ok(())
    }
    fn finish_bundle(&mut self, _: &mut FinishBundleContext<'_, ()>) -> UserResult {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let writer = match self.run.writer.get() {
            Some(Ok(w)) => w,
            Some(Err(e)) => return Err(e.clone().into()),
            None => return Err(format!("{}: written before it was opened", self.sink.describe()).into()),
        };
        let id = self.run.next.fetch_add(1, Ordering::SeqCst);
        let batch = Batch::new(std::mem::take(&mut self.buffer));
        writer.lock().unwrap_or_else(|e| e.into_inner()).commit(id, vec![batch])
    }
}
