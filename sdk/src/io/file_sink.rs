//! The exactly-once file sink: files per batch, committed by batch id, listed in a metadata log.
//!
//! Every runner translates a file sink into a commit-aware sink: a batch's (round's, epoch's)
//! elements are staged, and at commit each partition's are rendered as one file per window
//! (one file when the writes are not windowed), named after the batch id:
//!
//! ```text
//! batch-0000000003-part-00001.parquet
//! 2026-12-02T06:00:00.000Z-2026-12-02T06:01:00.000Z-batch-0000000003-part-00001.parquet   (windowed)
//! ```
//!
//! After its data files, a commit writes an entry of the sink's metadata log,
//! `_weir_metadata/batch-<id>-part-<first partition>.json`, listing them (Spark's
//! `_spark_metadata`). A batch replayed after a crash writes the same names again, and removes
//! what its earlier attempt wrote and the replay did not, so the directory holds each output
//! once; [`committed_files`] reads the log, for readers that must never see a file of a batch
//! being committed. Formats: JSON lines ([`JsonLinesRows`]), text lines ([`TextLines`]), and
//! Parquet (in the `weir-parquet` crate); a new one implements [`RowFormat`].

use crate::coders::Element;
use crate::error::{UserError, UserResult};
use crate::kernel::{downcast_batch, Batch};
use crate::pipeline::{PCollection, PDone, PTransform};
use crate::window::Window;
use std::marker::PhantomData;
use std::sync::Arc;

/// The directory of a sink's metadata log, under its output directory.
pub const METADATA_DIR: &str = "_weir_metadata";

/// The contents of files, each with its window when the writes are windowed.
pub type RenderedFiles = Vec<(Option<Window>, Vec<u8>)>;

/// Renders a partition's elements of one batch as files (type-erased, for runners).
pub trait FileSinkFormat: Send + Sync {
    /// The file name extension, without the dot (`parquet`).
    fn extension(&self) -> &str;
    /// Renders `batches` as the contents of one file, or of one file per window when
    /// `windowed` (each with its window then).
    fn render(&self, batches: Vec<Batch>, windowed: bool) -> Result<RenderedFiles, UserError>;
}

/// A file format for elements of `T`: what a new format of the file sink implements.
pub trait RowFormat<T>: Send + Sync + 'static {
    /// The file name extension, without the dot.
    fn extension(&self) -> &str;
    /// The contents of a file holding `rows`, in order.
    fn render(&self, rows: &[&T]) -> Result<Vec<u8>, UserError>;
}

/// A [`RowFormat`] as a [`FileSinkFormat`].
struct Typed<T, R>(R, PhantomData<fn(T)>);

impl<T: Element, R: RowFormat<T>> FileSinkFormat for Typed<T, R> {
    fn extension(&self) -> &str {
        self.0.extension()
    }
    fn render(&self, batches: Vec<Batch>, windowed: bool) -> Result<RenderedFiles, UserError> {
        let mut values = Vec::new();
        for b in batches {
            values.extend(downcast_batch::<T>(b)?);
        }
        if values.is_empty() {
            return Ok(Vec::new());
        }
        if !windowed {
            let rows: Vec<&T> = values.iter().map(|wv| &wv.value).collect();
            return Ok(vec![(None, self.0.render(&rows)?)]);
        }
        let mut by_window: std::collections::BTreeMap<(i64, i64, String), (Window, Vec<&T>)> = Default::default();
        for wv in &values {
            let key = match wv.window.interval() {
                Some(w) => (w.start, w.end, String::new()),
                None => (i64::MIN, i64::MIN, wv.window.to_string()),
            };
            by_window.entry(key).or_insert_with(|| (wv.window, Vec::new())).1.push(&wv.value);
        }
        by_window.into_values().map(|(w, rows)| Ok((Some(w), self.0.render(&rows)?))).collect()
    }
}

/// One JSON value per line.
pub struct JsonLinesRows;

impl<T: Element> RowFormat<T> for JsonLinesRows {
    fn extension(&self) -> &str {
        "jsonl"
    }
    fn render(&self, rows: &[&T]) -> Result<Vec<u8>, UserError> {
        let mut out = Vec::new();
        for (i, r) in rows.iter().enumerate() {
            serde_json::to_writer(&mut out, r)?;
            out.push(b'\n');
            if i == 0 {
                // Room for the rest at the first line's length: a file of many lines is not
                // copied into a buffer twice its size again and again as it grows.
                out.reserve(out.len().saturating_mul(rows.len() - 1));
            }
        }
        Ok(out)
    }
}

/// One string per line.
pub struct TextLines;

impl RowFormat<String> for TextLines {
    fn extension(&self) -> &str {
        "txt"
    }
    fn render(&self, rows: &[&String]) -> Result<Vec<u8>, UserError> {
        let mut out = Vec::with_capacity(rows.iter().map(|r| r.len() + 1).sum());
        for r in rows {
            out.extend_from_slice(r.as_bytes());
            out.push(b'\n');
        }
        Ok(out)
    }
}

/// The runner-visible payload of a file sink.
#[derive(Clone)]
pub struct FileSinkPayload {
    /// Output directory.
    pub dir: String,
    /// Whether existing content of `dir` not written by this run is removed rather than refused.
    pub overwrite: bool,
    /// Whether each window's elements go to files of their own, named after the window.
    pub windowed: bool,
    /// Renders elements.
    pub format: Arc<dyn FileSinkFormat>,
}

impl FileSinkPayload {
    /// The name of the file of batch `batch_id`, partition `part`, and window `window`.
    pub fn file_name(&self, batch_id: u64, part: usize, window: Option<&Window>) -> String {
        self.name("batch", batch_id, part, window)
    }
    /// The metadata log entry of a commit of `batch_id` by the writer whose first partition is
    /// `first`.
    pub fn log_entry(&self, batch_id: u64, first: usize) -> std::path::PathBuf {
        self.entry("batch", batch_id, first)
    }
    /// The metadata log entries of batch `batch_id`, each with the first partition of the writer
    /// that wrote it (a distributed runner's processes each write one).
    pub fn log_entries(&self, batch_id: u64) -> std::io::Result<Vec<(usize, std::path::PathBuf)>> {
        let log = std::path::Path::new(&self.dir).join(METADATA_DIR);
        let prefix = format!("batch-{batch_id:010}-part-");
        let mut out = Vec::new();
        let listing = match std::fs::read_dir(&log) {
            Ok(l) => l,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e),
        };
        for e in listing {
            let name = e?.file_name().to_string_lossy().into_owned();
            let first = name.strip_prefix(&prefix).and_then(|r| r.strip_suffix(".json")).and_then(|f| f.parse().ok());
            if let Some(first) = first {
                out.push((first, log.join(name)));
            }
        }
        out.sort();
        Ok(out)
    }
    /// The files of batch `batch_id` in the output directory, each with its partition (whatever
    /// its window), whether or not a log entry lists them.
    pub fn files_of(&self, batch_id: u64) -> std::io::Result<Vec<(usize, String)>> {
        let marker = format!("batch-{batch_id:010}-part-");
        let suffix = format!(".{}", self.format.extension());
        let mut out = Vec::new();
        let listing = match std::fs::read_dir(&self.dir) {
            Ok(l) => l,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e),
        };
        for e in listing {
            let name = e?.file_name().to_string_lossy().into_owned();
            let Some(at) = name.find(&marker) else { continue };
            // Named by this sink: the batch first, or after the window.
            if name.starts_with('.') || (at > 0 && !name[..at].ends_with('-')) {
                continue;
            }
            let part = name[at + marker.len()..].strip_suffix(&suffix).and_then(|p| p.parse().ok());
            if let Some(part) = part {
                out.push((part, name));
            }
        }
        out.sort();
        Ok(out)
    }
    /// A file of `unit` `id` (a batch, or a bundle of a runner that runs the expansion).
    fn name(&self, unit: &str, id: u64, part: usize, window: Option<&Window>) -> String {
        let base = format!("{unit}-{id:010}-part-{part:05}.{}", self.format.extension());
        match window.and_then(Window::interval) {
            Some(w) => format!("{}-{}-{base}", crate::time::iso8601(w.start), crate::time::iso8601(w.end)),
            None => base,
        }
    }
    /// The log entry of `unit` `id`, written by the writer whose first partition is `first`.
    fn entry(&self, unit: &str, id: u64, first: usize) -> std::path::PathBuf {
        std::path::Path::new(&self.dir).join(METADATA_DIR).join(format!("{unit}-{id:010}-part-{first:05}.json"))
    }
}

/// The files of `dir` that its sink's metadata log lists as committed, as paths, in batch order.
pub fn committed_files(dir: &str) -> UserResult<Vec<String>> {
    let log = std::path::Path::new(dir).join(METADATA_DIR);
    let err = |e: std::io::Error| format!("metadata log {}: {e}", log.display());
    let mut entries: Vec<std::path::PathBuf> = std::fs::read_dir(&log)
        .map_err(err)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    entries.sort();
    let mut out = Vec::new();
    for e in entries {
        let text = std::fs::read_to_string(&e).map_err(err)?;
        let names: Vec<String> =
            serde_json::from_str(&text).map_err(|x| format!("metadata log entry {}: {x}", e.display()))?;
        out.extend(names.into_iter().map(|n| std::path::Path::new(dir).join(n).to_string_lossy().into_owned()));
    }
    Ok(out)
}

/// Writes every element into files of a format under a directory, exactly once (see the module
/// documentation): `pc.apply("Out", WriteFiles::to("out/", JsonLinesRows))`.
pub struct WriteFiles<T> {
    dir: String,
    overwrite: bool,
    windowed: bool,
    format: Arc<dyn FileSinkFormat>,
    _t: PhantomData<fn(T)>,
}

impl<T: Element> WriteFiles<T> {
    /// Files of `format` under `dir` (created if needed), which must be empty or this sink's own.
    pub fn to(dir: impl Into<String>, format: impl RowFormat<T>) -> Self {
        WriteFiles {
            dir: dir.into(),
            overwrite: false,
            windowed: false,
            format: Arc::new(Typed(format, PhantomData)),
            _t: PhantomData,
        }
    }
    /// Removes whatever `dir` holds when the run starts, instead of refusing a directory that is
    /// not empty (Spark's `mode("overwrite")`).
    pub fn overwrite(mut self, overwrite: bool) -> Self {
        self.overwrite = overwrite;
        self
    }
    /// Each window's elements go to files of their own, named after the window (Beam's
    /// `withWindowedWrites`).
    pub fn windowed(mut self, windowed: bool) -> Self {
        self.windowed = windowed;
        self
    }
}

impl<T: Element> WriteFiles<T> {
    /// Sets the payload runners translate, and keeps the input used.
    pub(crate) fn expand_sink(self, input: PCollection<T>) -> PDone {
        let p = input.pipeline().clone();
        if self.dir.is_empty() {
            p.record_error(&p.current_step(), "a file sink needs an output directory");
        }
        let payload =
            FileSinkPayload { dir: self.dir, overwrite: self.overwrite, windowed: self.windowed, format: self.format };
        p.set_composite_payload(Arc::new(payload.clone()));
        // Batch-aware runners translate the composite as a whole; the others run this expansion,
        // which writes each bundle's files when the bundle finishes.
        let write = WriteBundleFn::<T> { payload, claim: Claim::default(), buffer: Vec::new() };
        input.apply("WriteBundles", crate::transforms::par_do::ParDo::of(write));
        PDone
    }
}

impl<T: Element> PTransform<PCollection<T>> for WriteFiles<T> {
    type Output = PDone;
    fn expand(self, input: PCollection<T>) -> PDone {
        self.expand_sink(input)
    }
    fn composite_urn() -> Option<&'static str> {
        Some(crate::urns::FILE_SINK)
    }
}

/// Claims the output directory once per run, shared by every instance of the run's DoFn.
type Claim = Arc<std::sync::OnceLock<Result<(), String>>>;

/// The expansion of a file sink, for runners that run it: each bundle's elements become files
/// named after a random bundle id (temporary names, renamed when complete), then a log entry.
struct WriteBundleFn<T> {
    payload: FileSinkPayload,
    claim: Claim,
    buffer: Vec<crate::windowed_value::WindowedValue<T>>,
}

impl<T> Clone for WriteBundleFn<T> {
    fn clone(&self) -> Self {
        WriteBundleFn { payload: self.payload.clone(), claim: self.claim.clone(), buffer: Vec::new() }
    }
}

impl<T: Element> crate::DoFn for WriteBundleFn<T> {
    type In = T;
    type Out = ();
    fn setup(&mut self) -> UserResult {
        // The first instance of the run claims the directory, with an id of this run.
        let (dir, overwrite) = (self.payload.dir.clone(), self.payload.overwrite);
        let owner = format!("run {:016x}", rand::random::<u64>());
        self.claim.get_or_init(|| crate::io::json_lines::claim_output_dir(&dir, &owner, overwrite)).clone()?;
        Ok(())
    }
    fn process(&mut self, e: T, ctx: &mut crate::ProcessContext<'_, ()>) -> UserResult {
        let (timestamp, window, pane) = (ctx.timestamp(), *ctx.window(), *ctx.pane());
        self.buffer.push(crate::windowed_value::WindowedValue { value: e, timestamp, window, pane });
        Ok(())
    }
    fn finish_bundle(&mut self, _: &mut crate::FinishBundleContext<'_, ()>) -> UserResult {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let batch = Batch::new(std::mem::take(&mut self.buffer));
        // A bundle id no other bundle of the directory has: 64 random bits make a clash
        // vanishingly rare, and a name already logged is never reused, so no bundle's files
        // replace another's.
        let bundle = loop {
            let id = rand::random::<u64>();
            if !self.payload.entry("bundle", id, 0).exists() {
                break id;
            }
        };
        let dir = std::path::Path::new(&self.payload.dir);
        let mut names = Vec::new();
        for (window, bytes) in self.payload.format.render(vec![batch], self.payload.windowed)? {
            let name = self.payload.name("bundle", bundle, 0, window.as_ref());
            crate::io::atomic::write_atomic(&dir.join(&name), &bytes)?;
            names.push(name);
        }
        let entry = self.payload.entry("bundle", bundle, 0);
        if let Some(log) = entry.parent() {
            std::fs::create_dir_all(log).map_err(|e| format!("{}: {e}", log.display()))?;
        }
        crate::io::atomic::write_atomic(&entry, &serde_json::to_vec(&names)?)?;
        Ok(())
    }
}
