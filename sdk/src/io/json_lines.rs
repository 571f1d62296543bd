//! A JSON-lines file sink: one JSON object per element, written exactly once by the file sink
//! of [`crate::io::file_sink`]: one file per batch and partition, named by the batch id and
//! committed with the batch, so a replayed batch replaces its files instead of duplicating them.
//!
//! A rerun into a directory that already holds output would mix two runs' results, so the sink
//! claims its directory before writing: an empty or new directory is claimed with a marker file,
//! [`MARKER`], naming the run (on the micro-batch runner with a checkpoint, the query, so a resumed
//! query goes on writing into its own output). A directory holding anything else is refused,
//! unless the sink was built with [`WriteJsonLines::overwrite`], which empties it first.

use crate::coders::Element;
use crate::io::file_sink::{JsonLinesRows, WriteFiles};
use crate::pipeline::{PCollection, PDone, PTransform};
use std::marker::PhantomData;

/// The file by which a JSON-lines sink marks a directory as its own; it holds the owner's id.
pub const MARKER: &str = ".weir-sink";

/// Claims `dir` for the run or query `owner` before anything is written to it: a missing or
/// empty directory is created and marked; one already marked by `owner` is kept as it is (a
/// resumed query writing on); anything else is an error naming the directory, unless
/// `overwrite`, which removes its content first.
pub fn claim_output_dir(dir: &str, owner: &str, overwrite: bool) -> Result<(), String> {
    let path = std::path::Path::new(dir);
    let err = |e: std::io::Error| format!("output directory {dir}: {e}");
    std::fs::create_dir_all(path).map_err(err)?;
    let marker = path.join(MARKER);
    if std::fs::read_to_string(&marker).is_ok_and(|m| m.trim() == owner) {
        return Ok(());
    }
    let mut entries: Vec<std::fs::DirEntry> =
        std::fs::read_dir(path).map_err(err)?.collect::<Result<_, _>>().map_err(err)?;
    // What an interrupted atomic write left (a run killed while claiming the directory, or
    // while committing) is nobody's output.
    entries.retain(|e| {
        let temporary = crate::io::atomic::is_temporary(&e.file_name().to_string_lossy());
        if temporary {
            let _ = std::fs::remove_file(e.path());
        }
        !temporary
    });
    if !entries.is_empty() {
        if !overwrite {
            let what = if marker.exists() { "the output of another run" } else { "files this sink did not write" };
            return Err(format!(
                "output directory {dir} already holds {what} ({} entries); writing into it would mix two runs' \
                 results. Remove it, choose another directory, or overwrite it (--overwrite)",
                entries.len()
            ));
        }
        for e in entries {
            let p = e.path();
            let removed = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
            removed.map_err(|e| format!("cannot overwrite {}: {e}", p.display()))?;
        }
    }
    crate::io::atomic::write_atomic(&marker, owner.as_bytes()).map_err(|e| e.to_string())
}

/// Writes every element as a line of JSON into files under a directory, exactly once (the
/// file sink of [`crate::io::file_sink`] with JSON lines): `pc.apply("Out", WriteJsonLines::to("out/"))`.
pub struct WriteJsonLines<T> {
    dir: String,
    overwrite: bool,
    windowed: bool,
    _t: PhantomData<fn(T)>,
}

impl<T: Element> WriteJsonLines<T> {
    /// Files go under `dir` (created if needed), which must be empty or this sink's own.
    pub fn to(dir: impl Into<String>) -> Self {
        WriteJsonLines { dir: dir.into(), overwrite: false, windowed: false, _t: PhantomData }
    }
    /// Removes whatever `dir` holds when the run starts, instead of refusing a directory that is
    /// not empty (Spark's `mode("overwrite")`).
    pub fn overwrite(mut self, overwrite: bool) -> Self {
        self.overwrite = overwrite;
        self
    }
    /// Each window's elements go to files of their own, named after the window.
    pub fn windowed(mut self, windowed: bool) -> Self {
        self.windowed = windowed;
        self
    }
}

impl<T: Element> PTransform<PCollection<T>> for WriteJsonLines<T> {
    type Output = PDone;
    fn expand(self, input: PCollection<T>) -> PDone {
        WriteFiles::to(self.dir, JsonLinesRows).overwrite(self.overwrite).windowed(self.windowed).expand_sink(input)
    }
    fn composite_urn() -> Option<&'static str> {
        Some(crate::urns::WRITE_JSON_LINES)
    }
}
