//! Commit-aware sinks: what a runner writes when it commits a unit of work.
//!
//! A sink node's partitions stage their input into a [`SinkWriter`] while the batch (or round,
//! or epoch) runs; nothing is visible until the runner commits it by batch id. Committing the
//! same batch id again (a batch replayed after a crash) writes the same output in the same
//! place, so a runner that replays uncommitted batches gets exactly-once output. A failed batch
//! is discarded.

use crate::do_fn_runner::guarded;
use std::path::Path;
use weir_sdk::io::for_each_batch::ForEachBatchPayload;
use weir_sdk::io::json_lines::{claim_output_dir, JsonLinesPayload};
use weir_sdk::kernel::Batch;
use weir_sdk::{Error, Result};

/// A sink's writer for one run of a pipeline.
pub trait SinkWriter: Send {
    /// Stages one partition's input of the current batch; returns the rows staged.
    fn stage(&mut self, partition: usize, batch: Batch) -> Result<usize>;
    /// Makes what was staged visible as batch `batch_id`, replacing what an earlier attempt of
    /// the same batch wrote. A writer may spread the work over `workers` when given.
    fn commit(&mut self, batch_id: u64, workers: Option<&crate::exec::workers::Workers>) -> Result<()>;
    /// Drops what was staged (the batch failed and will be retried).
    fn discard(&mut self);
    /// Says which partitions this writer commits: a distributed runner's process writes its own
    /// workers' partitions, and only those (all of them unless told). A writer that replaces
    /// an earlier attempt's output must also clear what an owned partition wrote then and has
    /// nothing for now.
    fn own_partitions(&mut self, _owned: std::ops::Range<usize>) {}
}

/// Opens a sink's writer when a run starts.
pub trait SinkFactory: Send + Sync {
    /// The writer of a run over `partitions` partitions. `owner` names the run (or, for a
    /// checkpointed query, the query, the same across restarts): output already in the sink's
    /// place from another owner is refused unless the sink was asked to overwrite it.
    fn open(&self, owner: &str, partitions: usize) -> Result<Box<dyn SinkWriter>>;
    /// The writer of a process that joins a distributed run whose first process has opened
    /// (and claimed) the sink's place: it writes its own partitions there without claiming it.
    fn join(&self, partitions: usize) -> Result<Box<dyn SinkWriter>> {
        self.open("", partitions)
    }
    /// Whether the sink hands every batch to one callback in the driving process (ForEachBatch,
    /// Collect, Console): a distributed runner then sends all of its input to its first worker.
    fn gathers(&self) -> bool {
        false
    }
}

/// The exactly-once JSON-lines file sink: one file per batch and partition,
/// `batch-<id>-part-<p>.jsonl`, written atomically at commit.
pub struct JsonLinesSinkFactory {
    step: String,
    payload: JsonLinesPayload,
}

impl JsonLinesSinkFactory {
    /// The sink of step `step`.
    pub fn new(step: &str, payload: JsonLinesPayload) -> Self {
        JsonLinesSinkFactory { step: step.to_string(), payload }
    }
}

impl SinkFactory for JsonLinesSinkFactory {
    fn open(&self, owner: &str, partitions: usize) -> Result<Box<dyn SinkWriter>> {
        claim_output_dir(&self.payload.dir, owner, self.payload.overwrite)
            .map_err(|e| Error::construction(&self.step, e))?;
        Ok(self.writer(partitions))
    }
    fn join(&self, partitions: usize) -> Result<Box<dyn SinkWriter>> {
        std::fs::create_dir_all(&self.payload.dir).map_err(|e| Error::Io {
            path: self.payload.dir.clone(),
            message: format!("cannot create the output directory: {e}"),
        })?;
        Ok(self.writer(partitions))
    }
}

impl JsonLinesSinkFactory {
    fn writer(&self, partitions: usize) -> Box<dyn SinkWriter> {
        Box::new(JsonLinesWriter {
            step: self.step.clone(),
            payload: self.payload.clone(),
            staged: (0..partitions.max(1)).map(|_| Vec::new()).collect(),
            owned: 0..partitions.max(1),
        })
    }
}

struct JsonLinesWriter {
    step: String,
    payload: JsonLinesPayload,
    /// Per partition, the batch's input, rendered and written at commit.
    staged: Vec<Vec<Batch>>,
    /// The partitions this writer commits.
    owned: std::ops::Range<usize>,
}

impl SinkWriter for JsonLinesWriter {
    fn stage(&mut self, partition: usize, batch: Batch) -> Result<usize> {
        let n = self.staged.len();
        let rows = batch.len();
        self.staged[partition % n].push(batch);
        Ok(rows)
    }
    /// Renders and writes each partition's file as a task of its own on the workers: rendering
    /// JSON and copying it into the page cache are most of a sink's cost, and a runner commits
    /// from one thread.
    fn commit(&mut self, batch_id: u64, workers: Option<&crate::exec::workers::Workers>) -> Result<()> {
        // Every owned partition, those with nothing too: an earlier attempt of this batch may
        // have written a file for one that a replay leaves empty (work that depends on the
        // processing time, such as a splittable DoFn's polls), and that file must go.
        let owned = self.owned.clone();
        let parts: Vec<(usize, Vec<Batch>)> = self
            .staged
            .iter_mut()
            .enumerate()
            .filter(|(p, b)| owned.contains(p) || !b.is_empty())
            .map(|(p, b)| (p, std::mem::take(b)))
            .collect();
        let (step, payload) = (self.step.clone(), self.payload.clone());
        let write = move |(p, batches): (usize, Vec<Batch>)| -> Result<()> {
            let mut buf = Vec::new();
            for b in batches {
                payload.kernel.append(b, &mut buf).map_err(|e| Error::execution(&step, e.to_string()))?;
            }
            let path = Path::new(&payload.dir).join(format!("batch-{batch_id:010}-part-{p:05}.jsonl"));
            if buf.is_empty() {
                return match std::fs::remove_file(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::Io {
                        path: path.display().to_string(),
                        message: format!("cannot remove an earlier attempt's output: {e}"),
                    }),
                    _ => Ok(()),
                };
            }
            weir_sdk::io::atomic::write_atomic(&path, &buf)
                .map_err(|e| Error::Io { path: e.path.display().to_string(), message: e.source.to_string() })
        };
        // Every file is written (or has failed) before the first error is returned.
        crate::exec::workers::run_in_step(workers, parts, write).into_iter().collect()
    }
    fn discard(&mut self) {
        self.staged.iter_mut().for_each(Vec::clear);
    }
    fn own_partitions(&mut self, owned: std::ops::Range<usize>) {
        self.owned = owned;
    }
}

/// ForEachBatch, Collect and Console: the callback once per committed batch, with all of its
/// elements; a replayed batch calls it again with the same id.
pub struct ForEachBatchSinkFactory {
    step: String,
    payload: ForEachBatchPayload,
}

impl ForEachBatchSinkFactory {
    /// The sink of step `step`.
    pub fn new(step: &str, payload: ForEachBatchPayload) -> Self {
        ForEachBatchSinkFactory { step: step.to_string(), payload }
    }
}

impl SinkFactory for ForEachBatchSinkFactory {
    fn open(&self, _: &str, _: usize) -> Result<Box<dyn SinkWriter>> {
        Ok(Box::new(ForEachBatchWriter { step: self.step.clone(), payload: self.payload.clone(), staged: Vec::new() }))
    }
    fn gathers(&self) -> bool {
        true
    }
}

struct ForEachBatchWriter {
    step: String,
    payload: ForEachBatchPayload,
    staged: Vec<Batch>,
}

impl SinkWriter for ForEachBatchWriter {
    fn stage(&mut self, _: usize, batch: Batch) -> Result<usize> {
        let n = batch.len();
        self.staged.push(batch);
        Ok(n)
    }
    fn commit(&mut self, batch_id: u64, _: Option<&crate::exec::workers::Workers>) -> Result<()> {
        let batches = std::mem::take(&mut self.staged);
        if batches.is_empty() {
            return Ok(());
        }
        guarded(&self.step, "sink", || self.payload.kernel.write(batch_id, batches))
    }
    fn discard(&mut self) {
        self.staged.clear();
    }
}
