//! Commit-aware sinks: what a runner writes when it commits a unit of work.
//!
//! A sink node's partitions stage their input into a [`SinkWriter`] while the batch (or round,
//! or epoch) runs; nothing is visible until the runner commits it by batch id. Committing the
//! same batch id again (a batch replayed after a crash) writes the same output in the same
//! place, so a runner that replays uncommitted batches gets exactly-once output. A failed batch
//! is discarded.

use crate::do_fn_runner::guarded;
use crate::plan::SinkSpec;
use std::path::Path;
use weir_sdk::io::CommitSinkWriter;
use weir_sdk::kernel::Batch;
use weir_sdk::runner_api::{claim_output_dir, write_atomic, FileSinkPayload, ForEachBatchPayload};
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
    /// nothing for now. Batches up to `relaid_through` may have been written, in an earlier
    /// attempt, by writers owning other partitions (a run with another number of workers): the
    /// writer then also clears what those wrote for its partitions, and the last writer what
    /// they wrote for partitions past all of this run's.
    fn own_partitions(&mut self, _owned: std::ops::Range<usize>, _relaid_through: Option<u64>) {}
}

impl SinkSpec {
    /// The writer of a run over `partitions` partitions. `owner` names the run (or, for a
    /// checkpointed query, the query, the same across restarts): output already in the sink's
    /// place from another owner is refused unless the sink was asked to overwrite it.
    pub fn open(&self, owner: &str, partitions: usize) -> Result<Box<dyn SinkWriter>> {
        match self {
            SinkSpec::Files { step, payload } => {
                claim_output_dir(&payload.dir, owner, payload.overwrite).map_err(|e| Error::construction(step, e))?;
                Ok(file_writer(step, payload, partitions))
            }
            SinkSpec::ForEachBatch { step, payload } => {
                Ok(WholeBatchWriter::boxed(step, Box::new(Callback(payload.clone()))))
            }
            SinkSpec::Committed { step, payload } => {
                Ok(WholeBatchWriter::boxed(step, guarded(step, "sink", || payload.sink.open(owner))?))
            }
        }
    }

    /// The writer of a process that joins a distributed run whose first process has opened
    /// (and claimed) the sink's place: it writes its own partitions there without claiming it.
    pub fn join(&self, partitions: usize) -> Result<Box<dyn SinkWriter>> {
        match self {
            SinkSpec::Files { step, payload } => {
                std::fs::create_dir_all(&payload.dir).map_err(|e| Error::Io {
                    path: payload.dir.clone(),
                    message: format!("cannot create the output directory: {e}"),
                })?;
                Ok(file_writer(step, payload, partitions))
            }
            SinkSpec::ForEachBatch { .. } => self.open("", partitions),
            // Its input all goes to the first process ([`SinkSpec::gathers`]), which opened it.
            SinkSpec::Committed { step, .. } => Ok(WholeBatchWriter::boxed(step, Box::new(Elsewhere))),
        }
    }

    /// Whether the sink hands every batch to one callback in the driving process (ForEachBatch,
    /// Collect, Console): a distributed runner then sends all of its input to its first worker.
    pub fn gathers(&self) -> bool {
        matches!(self, SinkSpec::ForEachBatch { .. } | SinkSpec::Committed { .. })
    }
}

/// The exactly-once file sink's writer: per batch and partition, one file (or one per window),
/// written atomically at commit, then an entry of the metadata log listing them.
fn file_writer(step: &str, payload: &FileSinkPayload, partitions: usize) -> Box<dyn SinkWriter> {
    Box::new(FileWriter {
        step: step.to_string(),
        payload: payload.clone(),
        staged: (0..partitions.max(1)).map(|_| Vec::new()).collect(),
        owned: 0..partitions.max(1),
        relaid_through: None,
    })
}

struct FileWriter {
    step: String,
    payload: FileSinkPayload,
    /// Per partition, the batch's input, rendered and written at commit.
    staged: Vec<Vec<Batch>>,
    /// The partitions this writer commits.
    owned: std::ops::Range<usize>,
    /// The last batch an earlier attempt may have written with other owners.
    relaid_through: Option<u64>,
}

fn io_error(path: &Path, what: &str, e: impl std::fmt::Display) -> Error {
    Error::Io { path: path.display().to_string(), message: format!("{what}: {e}") }
}

impl SinkWriter for FileWriter {
    fn stage(&mut self, partition: usize, batch: Batch) -> Result<usize> {
        let n = self.staged.len();
        let rows = batch.len();
        self.staged[partition % n].push(batch);
        Ok(rows)
    }
    /// Renders and writes each partition's files as a task of its own on the workers: rendering
    /// and copying into the page cache are most of a sink's cost, and a runner commits from one
    /// thread. Then the log entry lists them, and what an earlier attempt of the batch wrote
    /// that this one did not is removed.
    fn commit(&mut self, batch_id: u64, workers: Option<&crate::exec::workers::Workers>) -> Result<()> {
        let owned = self.owned.clone();
        let parts: Vec<(usize, Vec<Batch>)> = self
            .staged
            .iter_mut()
            .enumerate()
            .filter(|(p, b)| owned.contains(p) || !b.is_empty())
            .map(|(p, b)| (p, std::mem::take(b)))
            .collect();
        let (step, payload) = (self.step.clone(), self.payload.clone());
        let write = move |(p, batches): (usize, Vec<Batch>)| -> Result<Vec<String>> {
            let files =
                payload.format.render(batches, payload.windowed).map_err(|e| Error::execution(&step, e.to_string()))?;
            let mut names = Vec::new();
            for (window, bytes) in files {
                let name = payload.file_name(batch_id, p, window.as_ref());
                write_atomic(&Path::new(&payload.dir).join(&name), &bytes)
                    .map_err(|e| Error::Io { path: e.path.display().to_string(), message: e.source.to_string() })?;
                names.push(name);
            }
            Ok(names)
        };
        // Every file is written (or has failed) before the first error is returned.
        let written: Vec<Result<Vec<String>>> = crate::exec::workers::run_in_step(workers, parts, write);
        let mut names = Vec::new();
        for w in written {
            names.extend(w?);
        }
        names.sort();
        let payload = &self.payload;
        let dir = Path::new(&payload.dir);
        let entry = payload.log_entry(batch_id, owned.start);
        let earlier: Vec<String> = match std::fs::read_to_string(&entry) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| io_error(&entry, "a corrupt metadata log entry", e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_error(&entry, "cannot read the metadata log", e)),
        };
        // An earlier attempt may have written files this one does not (work that depends on the
        // processing time), and, without windows, the file of a partition now empty.
        let mut stale: Vec<String> = earlier.into_iter().filter(|n| !names.contains(n)).collect();
        if !payload.windowed {
            stale.extend(owned.clone().map(|p| payload.file_name(batch_id, p, None)).filter(|n| !names.contains(n)));
        }
        let (others, unlisted) = self.other_owners(batch_id)?;
        for listed in others.iter().map(|o| &o.1).chain([&unlisted]) {
            stale.extend(listed.iter().filter(|n| !names.contains(n)).cloned());
        }
        for name in stale {
            let path = dir.join(&name);
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(io_error(&path, "cannot remove an earlier attempt's output", e))
                }
                _ => {}
            }
        }
        if let Some(log) = entry.parent() {
            std::fs::create_dir_all(log).map_err(|e| io_error(log, "cannot create the metadata log", e))?;
        }
        let listing = serde_json::to_vec(&names).map_err(|e| io_error(&entry, "cannot list the files", e))?;
        write_atomic(&entry, &listing)
            .map_err(|e| Error::Io { path: e.path.display().to_string(), message: e.source.to_string() })?;
        // Their entries go once this writer's lists what replaces them.
        for (path, _) in others {
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(io_error(&path, "cannot remove an earlier attempt's log entry", e))
                }
                _ => {}
            }
        }
        Ok(())
    }
    fn discard(&mut self) {
        self.staged.iter_mut().for_each(Vec::clear);
    }
    fn own_partitions(&mut self, owned: std::ops::Range<usize>, relaid_through: Option<u64>) {
        self.owned = owned;
        self.relaid_through = relaid_through;
    }
}

/// A metadata log entry's path, and the files it lists.
type ListedEntry = (std::path::PathBuf, Vec<String>);

impl FileWriter {
    /// What writers owning other partitions wrote for `batch_id` in an earlier attempt (a run
    /// with another number of workers), for partitions this writer now owns or, if it is the
    /// last writer, past everyone's: their log entries, each with the files it lists, and the
    /// files of those partitions in the directory (an attempt may have stopped before its
    /// entry).
    fn other_owners(&self, batch_id: u64) -> Result<(Vec<ListedEntry>, Vec<String>)> {
        if self.relaid_through.is_none_or(|t| batch_id > t) {
            return Ok((Vec::new(), Vec::new()));
        }
        let (owned, last) = (&self.owned, self.owned.end >= self.staged.len());
        let mine = |p: usize| owned.contains(&p) || (last && p >= owned.end);
        let dir = Path::new(&self.payload.dir);
        let listing = |e: std::io::Error| io_error(dir, "cannot list the sink's files", e);
        let mut entries = Vec::new();
        for (first, path) in self.payload.log_entries(batch_id).map_err(listing)? {
            if first == owned.start || !mine(first) {
                continue;
            }
            let text =
                std::fs::read_to_string(&path).map_err(|e| io_error(&path, "cannot read the metadata log", e))?;
            let listed: Vec<String> =
                serde_json::from_str(&text).map_err(|e| io_error(&path, "a corrupt metadata log entry", e))?;
            entries.push((path, listed));
        }
        let files = self.payload.files_of(batch_id).map_err(listing)?;
        Ok((entries, files.into_iter().filter(|(p, _)| mine(*p)).map(|(_, name)| name).collect()))
    }
}

/// A sink handed each committed batch's whole output with the batch's id: ForEachBatch,
/// Collect and Console (a replayed batch calls the callback again with the same id), and a
/// [`weir_sdk::io::CommitSink`] (which skips what it committed before).
struct WholeBatchWriter {
    step: String,
    writer: Box<dyn CommitSinkWriter>,
    staged: Vec<Batch>,
}

impl WholeBatchWriter {
    fn boxed(step: &str, writer: Box<dyn CommitSinkWriter>) -> Box<dyn SinkWriter> {
        Box::new(WholeBatchWriter { step: step.to_string(), writer, staged: Vec::new() })
    }
}

impl SinkWriter for WholeBatchWriter {
    fn stage(&mut self, _: usize, batch: Batch) -> Result<usize> {
        let n = batch.len();
        self.staged.push(batch);
        Ok(n)
    }
    fn commit(&mut self, batch_id: u64, _: Option<&crate::exec::workers::Workers>) -> Result<()> {
        let batches = std::mem::take(&mut self.staged);
        if batches.is_empty() && !self.writer.every_batch() {
            return Ok(());
        }
        let writer = &mut self.writer;
        guarded(&self.step, "sink", || writer.commit(batch_id, batches))
    }
    fn discard(&mut self) {
        self.staged.clear();
    }
}

/// ForEachBatch's callback, as a writer of whole batches.
struct Callback(ForEachBatchPayload);

impl CommitSinkWriter for Callback {
    fn commit(&mut self, batch_id: u64, batches: Vec<Batch>) -> weir_sdk::UserResult {
        self.0.kernel.write(batch_id, batches)
    }
}

/// The writer of a process that never commits a gathered sink (its first process does).
struct Elsewhere;

impl CommitSinkWriter for Elsewhere {
    fn commit(&mut self, _: u64, _: Vec<Batch>) -> weir_sdk::UserResult {
        Err("a process other than the first was given output of a sink its first process writes".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use weir_sdk::io::file_sink::{FileSinkFormat, RenderedFiles};

    /// One line per element, the count of elements.
    struct Counts;

    impl FileSinkFormat for Counts {
        fn extension(&self) -> &str {
            "txt"
        }
        fn render(&self, batches: Vec<Batch>, _: bool) -> std::result::Result<RenderedFiles, weir_sdk::UserError> {
            Ok(vec![(None, batches.iter().map(Batch::len).sum::<usize>().to_string().into_bytes())])
        }
    }

    fn rows(n: usize) -> Batch {
        let v: Vec<weir_sdk::WindowedValue<Vec<u8>>> =
            (0..n).map(|_| weir_sdk::WindowedValue::in_global_window(Vec::new())).collect();
        Batch::new(v)
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut n: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".txt"))
            .collect();
        n.sort();
        n
    }

    #[test]
    fn a_batch_replayed_by_fewer_writers_replaces_every_file_the_others_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let payload = FileSinkPayload {
            dir: dir.path().to_string_lossy().into_owned(),
            overwrite: false,
            windowed: false,
            format: Arc::new(Counts),
        };
        // Batch 7 by two processes of two workers each; the second stopped after its files,
        // before its log entry.
        let mut first = file_writer("Out", &payload, 4);
        first.own_partitions(0..2, None);
        first.stage(0, rows(1)).unwrap();
        first.stage(1, rows(2)).unwrap();
        first.commit(7, None).unwrap();
        std::fs::write(dir.path().join(payload.file_name(7, 3, None)), "4").unwrap();
        assert_eq!(names(dir.path()).len(), 3);
        // Replayed by one worker: its one file replaces all of theirs, and one entry lists it.
        let mut one = file_writer("Out", &payload, 1);
        one.own_partitions(0..1, Some(7));
        one.stage(0, rows(7)).unwrap();
        one.commit(7, None).unwrap();
        assert_eq!(names(dir.path()), vec![payload.file_name(7, 0, None)]);
        assert_eq!(payload.log_entries(7).unwrap().len(), 1);
        // Without a replay of another layout (a later batch), nothing else is looked for.
        std::fs::write(dir.path().join(payload.file_name(8, 3, None)), "4").unwrap();
        one.stage(0, rows(1)).unwrap();
        one.commit(8, None).unwrap();
        assert_eq!(names(dir.path()).len(), 3);
    }
}
