//! Reading matched files as a splittable DoFn (Beam's `FileIO.readMatches()` followed by a
//! format's `ReadFiles`, on the splittable model).
//!
//! A [`FileFormat`] says how a file divides into *units* (its bytes for line-based formats, its
//! row groups for Parquet) and reads the records that start in a range of them, claiming each
//! record's first unit before it outputs it. [`ReadFiles`] turns a format into a splittable DoFn
//! over [`FileMetadata`]: each file's restriction is `[0, units)`, split up front into parts of
//! [`FileFormat::initial_splits`], so one large file is read by every worker; the runners
//! checkpoint and split it further as they do any restriction. A file added to a watched
//! directory (see [`crate::io::file_io`]) is read the same way.
//!
//! The formats here are line-based: text ([`TextFormat`]), JSON lines ([`JsonLinesFormat`]),
//! and CSV ([`CsvFormat`]). A range `[from, to)` of bytes reads the lines that *start* in it,
//! so adjacent ranges read every line once. Records that cannot be parsed follow a
//! [`BadRecordPolicy`].

use crate::coders::Element;
use crate::error::UserResult;
use crate::io::bad_records::{BadRecordPolicy, BadRecords};
use crate::io::file_io::{EmptyMatchTreatment, FileIO, FileMetadata};
use crate::io::text::{open_at_line, TextSource};
use crate::pipeline::{PBegin, PCollection, PTransform};
use crate::splittable::{
    Claims, OffsetRange, OffsetRangeTracker, ProcessContinuation, SdfContext, SplittableDoFn, SplittableParDo,
    WatermarkEstimator,
};
use crate::time::Timestamp;
use serde::de::DeserializeOwned;
use std::marker::PhantomData;
use std::sync::Arc;

/// How a reader hands out what it read: the records, stamped as the read says, and the bad
/// records, handled by the read's policy.
pub struct Records<'a, 'b, O> {
    ctx: &'a mut SdfContext<'b, O>,
    timestamps: Option<&'a TimestampFn<O>>,
    bad: &'a BadRecords,
}

impl<O: Element> Records<'_, '_, O> {
    /// Outputs a record, at the time the read's timestamp function gives it, or at the file's.
    pub fn emit(&mut self, record: O) -> UserResult {
        match self.timestamps {
            Some(f) => {
                let ts = f(&record);
                self.ctx.output_with_timestamp(record, ts)
            }
            None => {
                self.ctx.output(record);
                Ok(())
            }
        }
    }
    /// A record that could not be parsed: `raw` at `place`, because of `error`.
    pub fn bad(&mut self, place: &str, raw: &[u8], error: &dyn std::fmt::Display) -> UserResult {
        self.bad.handle(place, raw, error)
    }
}

/// A file format that [`ReadFiles`] reads in splits.
pub trait FileFormat: Clone + Send + Sync + 'static {
    /// What a record becomes.
    type Out: Element;
    /// The format's name, for step names and messages.
    fn name(&self) -> &'static str;
    /// How many units `file` divides into: its bytes (the default), or its row groups.
    fn units(&self, file: &FileMetadata) -> UserResult<i64> {
        Ok(file.size_bytes as i64)
    }
    /// The parts `whole`, all of `file`'s units, is split into before reading, each read
    /// independently, by any worker (parts of 64 MiB of bytes by default; Parquet's are its row
    /// groups).
    fn initial_splits(&self, _file: &FileMetadata, whole: OffsetRange) -> UserResult<Vec<OffsetRange>> {
        Ok(whole.split(64 << 20))
    }
    /// Reads the records of `file` that start in the tracker's range, claiming each one's first
    /// unit before emitting it, until a claim fails or the range's records are read.
    fn read(
        &mut self,
        file: &FileMetadata,
        tracker: &mut Claims<'_, OffsetRangeTracker>,
        out: &mut Records<'_, '_, Self::Out>,
    ) -> UserResult;
}

/// A record's event time.
pub type TimestampFn<O> = dyn Fn(&O) -> Timestamp + Send + Sync;

/// What happens to a file once it has been read to its end and the runner has committed what
/// was read (Spark's `cleanSource`): nothing, deleted, or moved under an archive directory
/// (keeping its path: `/in/a.csv` goes to `ARCHIVE/in/a.csv`). Cleaning is best effort, as
/// Spark's is: a failure is logged and the pipeline goes on; a crash between the commit and the
/// cleaning leaves the file where it was, and a continuous match does not read it again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CleanSource {
    /// Leave files as they are.
    #[default]
    Off,
    /// Delete each file.
    Delete,
    /// Move each file under this directory.
    Archive(std::path::PathBuf),
}

impl std::str::FromStr for CleanSource {
    type Err = String;
    /// `off`, `delete` or `archive=DIR`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(CleanSource::Off),
            "delete" => Ok(CleanSource::Delete),
            _ => match s.strip_prefix("archive=") {
                Some(dir) if !dir.is_empty() => Ok(CleanSource::Archive(dir.into())),
                _ => Err(format!("'{s}' is not one of off, delete, archive=DIR")),
            },
        }
    }
}

impl CleanSource {
    /// Cleans `path` (gone already is fine: a replay may clean twice).
    pub fn clean(&self, path: &str) -> UserResult {
        let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
        match self {
            CleanSource::Off => Ok(()),
            CleanSource::Delete => match std::fs::remove_file(path) {
                Err(e) if !gone(&e) => Err(format!("cannot delete the read file {path}: {e}").into()),
                _ => Ok(()),
            },
            CleanSource::Archive(dir) => {
                let to = dir.join(std::path::Path::new(path).strip_prefix("/").unwrap_or(std::path::Path::new(path)));
                let err = |e: std::io::Error| format!("cannot archive the read file {path} to {}: {e}", to.display());
                if let Some(parent) = to.parent() {
                    std::fs::create_dir_all(parent).map_err(err)?;
                }
                match std::fs::rename(path, &to) {
                    Err(e) if gone(&e) => Ok(()),
                    // Another file system: copied, then removed.
                    Err(_) => {
                        std::fs::copy(path, &to).map_err(err)?;
                        std::fs::remove_file(path).map_err(err)?;
                        Ok(())
                    }
                    Ok(()) => Ok(()),
                }
            }
        }
    }
}

/// Reads every file of its input with a [`FileFormat`], in splits, as a splittable DoFn.
pub struct ReadFiles<F: FileFormat> {
    format: F,
    timestamps: Option<Arc<TimestampFn<F::Out>>>,
    bad: BadRecords,
    clean: CleanSource,
}

impl<F: FileFormat> ReadFiles<F> {
    /// Reads with `format`; records come at their file's timestamp, and bad ones are skipped.
    pub fn of(format: F) -> Self {
        let what = format!("{} record", format.name());
        let bad = BadRecords::new(BadRecordPolicy::Skip, &what, "io", "badRecords");
        ReadFiles { format, timestamps: None, bad, clean: CleanSource::Off }
    }
    /// Stamps each record with the event time `f` gives it (Beam's `WithTimestamps`, with an
    /// unlimited skew: a record may be older than the file it came in). The read's watermark
    /// then stays at the file's timestamp until the file is read.
    pub fn with_timestamps(mut self, f: impl Fn(&F::Out) -> Timestamp + Send + Sync + 'static) -> Self {
        self.timestamps = Some(Arc::new(f));
        self
    }
    /// What to do with records that cannot be parsed (skipped and counted as
    /// `io:badRecords` by default).
    pub fn with_bad_records(mut self, policy: BadRecordPolicy) -> Self {
        let what = format!("{} record", self.format.name());
        self.bad = BadRecords::new(policy, &what, "io", "badRecords");
        self
    }
    /// Reads the units `range` of `file` here and now, with no runner, checkpointing every
    /// `budget` claims (see [`crate::splittable::process_restriction`]): to test a format.
    pub fn process_directly(
        &self,
        file: FileMetadata,
        range: OffsetRange,
        budget: usize,
    ) -> UserResult<Vec<(F::Out, Timestamp)>> {
        let read = ReadFn {
            format: self.format.clone(),
            timestamps: self.timestamps.clone(),
            bad: self.bad.clone(),
            clean: self.clean.clone(),
        };
        crate::splittable::process_restriction(read, file, range, budget)
    }
    /// Deletes or archives each file once it is read and the read committed (see
    /// [`CleanSource`]). Each file is then read by one restriction (its parts in order), so that
    /// the one that reads its end knows the whole file is read. Runners that cannot run work
    /// after their commits refuse it when they translate the pipeline.
    pub fn clean_source(mut self, clean: CleanSource) -> Self {
        self.clean = clean;
        self
    }
    /// Handles bad records as `bad` says (its own counter and messages).
    pub fn with_bad_record_handler(mut self, bad: BadRecords) -> Self {
        self.bad = bad;
        self
    }
}

struct ReadFn<F: FileFormat> {
    format: F,
    timestamps: Option<Arc<TimestampFn<F::Out>>>,
    bad: BadRecords,
    clean: CleanSource,
}

impl<F: FileFormat> Clone for ReadFn<F> {
    fn clone(&self) -> Self {
        ReadFn {
            format: self.format.clone(),
            timestamps: self.timestamps.clone(),
            bad: self.bad.clone(),
            clean: self.clean.clone(),
        }
    }
}

impl<F: FileFormat> SplittableDoFn for ReadFn<F> {
    type In = FileMetadata;
    type Out = F::Out;
    type Restriction = OffsetRange;
    type Tracker = OffsetRangeTracker;
    fn initial_restriction(&self, file: &FileMetadata) -> UserResult<OffsetRange> {
        Ok(OffsetRange::new(0, self.format.units(file)?))
    }
    fn split_restriction(&self, file: &FileMetadata, r: OffsetRange) -> UserResult<Vec<OffsetRange>> {
        if self.clean != CleanSource::Off {
            return Ok(vec![r]);
        }
        self.format.initial_splits(file, r)
    }
    fn finalizes_bundles(&self) -> bool {
        self.clean != CleanSource::Off
    }
    /// A file being cleaned is read in order, checkpointed but never split elsewhere (see
    /// `process`).
    fn new_tracker(&self, _: &FileMetadata, r: OffsetRange) -> OffsetRangeTracker {
        match self.clean {
            CleanSource::Off => OffsetRangeTracker::new(r),
            _ => OffsetRangeTracker::new(r).checkpoints_only(),
        }
    }
    /// Held at the file's timestamp until its records are out: records may come in any order.
    fn initial_watermark_estimator(&self, _: &FileMetadata, timestamp: Timestamp) -> WatermarkEstimator {
        WatermarkEstimator::Manual(timestamp)
    }
    fn allowed_timestamp_skew_millis(&self) -> i64 {
        if self.timestamps.is_some() {
            i64::MAX
        } else {
            0
        }
    }
    fn process(
        &mut self,
        file: &FileMetadata,
        tracker: &mut Claims<'_, OffsetRangeTracker>,
        ctx: &mut SdfContext<'_, F::Out>,
    ) -> UserResult<ProcessContinuation> {
        let mut out = Records { ctx: &mut *ctx, timestamps: self.timestamps.as_deref(), bad: &self.bad };
        self.format.read(file, tracker, &mut out)?;
        // A range read to its end claims one past it, so the tracker knows it is done.
        let end = tracker.current_restriction().to;
        if tracker.tracker().last_attempted().is_none_or(|a| a < end) {
            tracker.try_claim(end);
        }
        // The part that reads to the file's end asks for the cleaning, which runs once its read
        // is committed. A file being cleaned is one restriction, split only at checkpoints, each
        // leaving the whole rest of the file as its residual: so its parts are read one after
        // another, and when the part ending at the file's end is done, every part of it is.
        let end = tracker.current_restriction().to;
        if self.clean != CleanSource::Off
            && tracker.tracker().last_attempted().is_some_and(|a| a >= end)
            && end >= self.format.units(file)?
        {
            let (clean, path) = (self.clean.clone(), file.path.clone());
            ctx.after_commit(move || clean.clean(&path));
        }
        Ok(ProcessContinuation::stop())
    }
}

impl<F: FileFormat> PTransform<PCollection<FileMetadata>> for ReadFiles<F> {
    type Output = PCollection<F::Out>;
    fn expand(self, files: PCollection<FileMetadata>) -> PCollection<F::Out> {
        let read = ReadFn { format: self.format, timestamps: self.timestamps, bad: self.bad, clean: self.clean };
        files.apply("ReadRanges", SplittableParDo::of(read))
    }
}

/// Reads the files matching a pattern with a format: `FileIO::match_pattern` and
/// [`ReadFiles`] in one (see [`CsvFormat::read`], [`JsonLinesFormat::read`], [`TextFormat::read`]).
pub struct ReadPattern<F: FileFormat> {
    pattern: String,
    empty: EmptyMatchTreatment,
    read: ReadFiles<F>,
}

impl<F: FileFormat> ReadPattern<F> {
    /// Reads the files matching `pattern` with `format`.
    pub fn new(pattern: impl Into<String>, format: F) -> Self {
        ReadPattern { pattern: pattern.into(), empty: EmptyMatchTreatment::Disallow, read: ReadFiles::of(format) }
    }
    /// What a pattern matching nothing means (an error by default).
    pub fn with_empty_match_treatment(mut self, empty: EmptyMatchTreatment) -> Self {
        self.empty = empty;
        self
    }
    /// See [`ReadFiles::with_timestamps`].
    pub fn with_timestamps(mut self, f: impl Fn(&F::Out) -> Timestamp + Send + Sync + 'static) -> Self {
        self.read = self.read.with_timestamps(f);
        self
    }
    /// See [`ReadFiles::with_bad_records`].
    pub fn with_bad_records(mut self, policy: BadRecordPolicy) -> Self {
        self.read = self.read.with_bad_records(policy);
        self
    }
    /// See [`ReadFiles::clean_source`].
    pub fn clean_source(mut self, clean: CleanSource) -> Self {
        self.read = self.read.clean_source(clean);
        self
    }
}

impl<F: FileFormat> PTransform<PBegin> for ReadPattern<F> {
    type Output = PCollection<F::Out>;
    fn expand(self, input: PBegin) -> PCollection<F::Out> {
        input
            .apply("Match", FileIO::match_pattern(self.pattern).with_empty_match_treatment(self.empty))
            .apply("ReadFiles", self.read)
    }
}

/// Reads the lines of `path` that start in the tracker's range, claiming each line's first
/// byte; `f` gets each line (without its `\n` or `\r\n`) and its offset.
pub fn read_lines(
    path: &str,
    tracker: &mut Claims<'_, OffsetRangeTracker>,
    mut f: impl FnMut(&[u8], u64) -> UserResult,
) -> UserResult {
    let range = tracker.current_restriction();
    let source = TextSource::Range { path: path.into(), start: range.from as u64, end: u64::MAX };
    let mut lines = source.line_reader()?;
    let mut scratch = Vec::new();
    loop {
        let read = lines.next_line_at(&mut scratch, |line, at| {
            if !tracker.try_claim(at as i64) {
                return Ok(false);
            }
            f(line, at).map(|()| true)
        })?;
        match read {
            Some((Ok(true), ..)) => {}
            Some((Err(e), ..)) => return Err(e),
            Some((Ok(false), ..)) | None => return Ok(()),
        }
    }
}

/// Lines of text, as `String`s (Beam's `TextIO`).
#[derive(Clone, Debug, Default)]
pub struct TextFormat;

impl TextFormat {
    /// Reads the lines of the files matching `pattern`.
    pub fn read(pattern: impl Into<String>) -> ReadPattern<TextFormat> {
        ReadPattern::new(pattern, TextFormat)
    }
}

impl FileFormat for TextFormat {
    type Out = String;
    fn name(&self) -> &'static str {
        "text"
    }
    fn read(
        &mut self,
        file: &FileMetadata,
        tracker: &mut Claims<'_, OffsetRangeTracker>,
        out: &mut Records<'_, '_, String>,
    ) -> UserResult {
        read_lines(&file.path, tracker, |line, at| match std::str::from_utf8(line) {
            Ok(s) => out.emit(s.to_string()),
            Err(e) => out.bad(&format!("{}, byte {at}", file.path), line, &e),
        })
    }
}

/// One JSON value per line, deserialised into `T`; blank lines are skipped.
pub struct JsonLinesFormat<T>(PhantomData<fn() -> T>);

impl<T> Clone for JsonLinesFormat<T> {
    fn clone(&self) -> Self {
        JsonLinesFormat(PhantomData)
    }
}

impl<T: Element> Default for JsonLinesFormat<T> {
    fn default() -> Self {
        JsonLinesFormat(PhantomData)
    }
}

impl<T: Element> JsonLinesFormat<T> {
    /// Reads the JSON lines of the files matching `pattern` as `T`s.
    pub fn read(pattern: impl Into<String>) -> ReadPattern<JsonLinesFormat<T>> {
        ReadPattern::new(pattern, JsonLinesFormat(PhantomData))
    }
}

impl<T: Element> FileFormat for JsonLinesFormat<T> {
    type Out = T;
    fn name(&self) -> &'static str {
        "JSON lines"
    }
    fn read(
        &mut self,
        file: &FileMetadata,
        tracker: &mut Claims<'_, OffsetRangeTracker>,
        out: &mut Records<'_, '_, T>,
    ) -> UserResult {
        read_lines(&file.path, tracker, |line, at| {
            if line.iter().all(u8::is_ascii_whitespace) {
                return Ok(());
            }
            match serde_json::from_slice::<T>(line) {
                Ok(v) => out.emit(v),
                Err(e) => out.bad(&format!("{}, byte {at}", file.path), line, &e),
            }
        })
    }
}

/// How CSV files are read: the delimiter, the quote, and whether quoted fields may span lines.
#[derive(Clone, Copy, Debug)]
pub struct CsvOptions {
    delimiter: u8,
    quote: u8,
    multi_line: bool,
}

impl Default for CsvOptions {
    fn default() -> Self {
        CsvOptions { delimiter: b',', quote: b'"', multi_line: false }
    }
}

impl CsvOptions {
    /// The field delimiter (`,` by default).
    pub fn delimiter(mut self, d: u8) -> Self {
        self.delimiter = d;
        self
    }
    /// The quote character (`"` by default).
    pub fn quote(mut self, q: u8) -> Self {
        self.quote = q;
        self
    }
    /// Quoted fields may hold line breaks: each file is read whole, by one worker.
    pub fn multi_line(mut self, yes: bool) -> Self {
        self.multi_line = yes;
        self
    }
    /// The field delimiter.
    pub fn delimiter_byte(&self) -> u8 {
        self.delimiter
    }

    fn builder(&self) -> csv::ReaderBuilder {
        let mut b = csv::ReaderBuilder::new();
        b.delimiter(self.delimiter).quote(self.quote).has_headers(false).flexible(true);
        b
    }

    /// The units of a file: its bytes, or one unit when records may span lines.
    pub fn units(&self, file: &FileMetadata) -> i64 {
        if self.multi_line {
            1
        } else {
            file.size_bytes as i64
        }
    }

    /// Reads the records of `path` that start in the tracker's range (all of them when records
    /// may span lines), claiming each; `f` gets the header, each record and its byte offset.
    /// Blank lines are skipped; an empty file has no header and no records.
    ///
    /// When records may not span lines, a line whose quote is never closed would take every
    /// line after it into one field: it is given to `f` as [`CsvLine::Unterminated`] (a bad
    /// record, for the caller's bad-record policy), and reading goes on at the next line.
    pub fn read_records(
        &self,
        path: &str,
        tracker: &mut Claims<'_, OffsetRangeTracker>,
        mut f: impl FnMut(&csv::ByteRecord, CsvLine<'_>, u64) -> UserResult,
    ) -> UserResult {
        let err = |e: csv::Error| format!("{path}: {e}");
        // The header is the file's first record, whatever range this is.
        let (head, _) = open_at_line(std::path::Path::new(path), 0)?;
        let mut header = csv::ByteRecord::new();
        if !self.builder().from_reader(head).read_byte_record(&mut header).map_err(err)? {
            return Ok(());
        }
        let range = tracker.current_restriction();
        if self.multi_line && !tracker.try_claim(0) {
            return Ok(());
        }
        let from = if self.multi_line { 0 } else { range.from.max(0) as u64 };
        let (reader, mut base) = open_at_line(std::path::Path::new(path), from)?;
        let mut records = self.builder().from_reader(reader);
        let mut record = csv::ByteRecord::new();
        loop {
            let at = base + records.position().byte();
            match records.read_byte_record(&mut record) {
                Ok(false) => return Ok(()),
                Ok(true) => {}
                // A record the parser cannot even split: the rest of the range cannot be read.
                Err(e) => return Err(format!("{path}, byte {at}: {e}").into()),
            }
            if at == 0 {
                continue; // The header.
            }
            if !self.multi_line && !tracker.try_claim(at as i64) {
                return Ok(());
            }
            if record.len() == 1 && record.get(0).is_some_and(<[u8]>::is_empty) {
                continue; // A blank line.
            }
            if !self.multi_line && record.as_slice().contains(&b'\n') {
                // A quote left open: the record's first line is bad, and the next line is where
                // the records go on.
                let raw = record_text(&record, self.delimiter);
                let first = raw.split(|&b| b == b'\n').next().unwrap_or_default();
                f(&header, CsvLine::Unterminated(first.strip_suffix(b"\r").unwrap_or(first)), at)?;
                let (reader, next) = open_at_line(std::path::Path::new(path), at + 1)?;
                base = next;
                records = self.builder().from_reader(reader);
                continue;
            }
            f(&header, CsvLine::Record(&record), at)?;
        }
    }
}

/// A line of a CSV file as [`CsvOptions::read_records`] gives it.
pub enum CsvLine<'a> {
    /// A record.
    Record(&'a csv::ByteRecord),
    /// The text of a line whose quote is never closed (when records may not span lines): a
    /// bad record; the records go on at the next line.
    Unterminated(&'a [u8]),
}

impl<'a> CsvLine<'a> {
    /// The record, or the error to give the bad-record policy with the line's text.
    pub fn record(self) -> Result<&'a csv::ByteRecord, (&'a [u8], &'static str)> {
        match self {
            CsvLine::Record(r) => Ok(r),
            CsvLine::Unterminated(raw) => Err((raw, "a quoted field is not closed on its line")),
        }
    }
}

/// CSV with a header line, deserialised into `T` by column name through serde (the `csv`
/// crate): quoting, a delimiter of choice, and empty fields as `None` for `Option` fields.
///
/// Files split by byte range at line ends, so a quoted field must not hold a line break
/// (Spark's default); [`CsvFormat::multi_line`] reads each file whole instead, and then quoted
/// fields may span lines.
pub struct CsvFormat<T> {
    options: CsvOptions,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for CsvFormat<T> {
    fn clone(&self) -> Self {
        CsvFormat { options: self.options, _t: PhantomData }
    }
}

impl<T: Element> Default for CsvFormat<T> {
    fn default() -> Self {
        CsvFormat { options: CsvOptions::default(), _t: PhantomData }
    }
}

impl<T: Element> CsvFormat<T> {
    /// Comma-separated, `"`-quoted, split by byte range.
    pub fn new() -> Self {
        Self::default()
    }
    /// Reads the CSV files matching `pattern` as `T`s.
    pub fn read(pattern: impl Into<String>) -> ReadPattern<CsvFormat<T>> {
        ReadPattern::new(pattern, Self::default())
    }
    /// The field delimiter (`,` by default).
    pub fn delimiter(mut self, d: u8) -> Self {
        self.options = self.options.delimiter(d);
        self
    }
    /// The quote character (`"` by default).
    pub fn quote(mut self, q: u8) -> Self {
        self.options = self.options.quote(q);
        self
    }
    /// Quoted fields may hold line breaks: each file is read whole, by one worker.
    pub fn multi_line(mut self, yes: bool) -> Self {
        self.options = self.options.multi_line(yes);
        self
    }
}

impl<T: Element + DeserializeOwned> FileFormat for CsvFormat<T> {
    type Out = T;
    fn name(&self) -> &'static str {
        "CSV"
    }
    fn units(&self, file: &FileMetadata) -> UserResult<i64> {
        Ok(self.options.units(file))
    }
    fn read(
        &mut self,
        file: &FileMetadata,
        tracker: &mut Claims<'_, OffsetRangeTracker>,
        out: &mut Records<'_, '_, T>,
    ) -> UserResult {
        let delimiter = self.options.delimiter;
        self.options.read_records(&file.path, tracker, |header, line, at| {
            let place = || format!("{}, byte {at}", file.path);
            let record = match line.record() {
                Ok(r) => r,
                Err((raw, why)) => return out.bad(&place(), raw, &why),
            };
            match record.deserialize::<T>(Some(header)) {
                Ok(v) => out.emit(v),
                Err(e) => out.bad(&place(), &record_text(record, delimiter), &e),
            }
        })
    }
}

/// A record's fields joined again by `delimiter`, for a message or a dead-letter file.
pub fn record_text(record: &csv::ByteRecord, delimiter: u8) -> Vec<u8> {
    let mut raw = Vec::new();
    for (i, f) in record.iter().enumerate() {
        if i > 0 {
            raw.push(delimiter);
        }
        raw.extend_from_slice(f);
    }
    raw
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `file`'s records in the given ranges, directly (no runner), with claims checked.
    fn read_ranges<F: FileFormat>(format: &F, file: &FileMetadata, ranges: Vec<OffsetRange>) -> Vec<F::Out> {
        let mut all = Vec::new();
        for r in ranges {
            let read = ReadFiles::of(format.clone()).with_bad_records(BadRecordPolicy::Fail);
            all.extend(read.process_directly(file.clone(), r, 300).unwrap().into_iter().map(|(v, _)| v));
        }
        all
    }

    fn meta(path: &std::path::Path) -> FileMetadata {
        FileMetadata {
            path: path.to_string_lossy().into_owned(),
            size_bytes: std::fs::metadata(path).unwrap().len(),
            last_modified_millis: 0,
        }
    }

    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Row {
        id: i64,
        name: String,
        note: Option<String>,
    }

    #[test]
    fn csv_reads_every_record_once_in_any_split() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.csv");
        let rows: Vec<Row> = (0..2_000)
            .map(|i| Row {
                id: i,
                name: format!("n,{i} \"q\""),
                note: (i % 3 == 0).then(|| "x".repeat(i as usize % 50)),
            })
            .map(|r| Row { note: r.note.filter(|n| !n.is_empty()), ..r })
            .collect();
        let mut w = csv::Writer::from_path(&path).unwrap();
        for r in &rows {
            w.serialize(r).unwrap();
        }
        w.flush().unwrap();
        let file = meta(&path);
        let format = CsvFormat::<Row>::new();
        let whole = OffsetRange::new(0, format.units(&file).unwrap());
        for size in [whole.len(), 1_000, 4_096, 77] {
            assert_eq!(read_ranges(&format, &file, whole.split(size)), rows, "splits of {size} bytes");
        }
        let multi = CsvFormat::<Row>::new().multi_line(true);
        assert_eq!(read_ranges(&multi, &file, vec![OffsetRange::new(0, 1)]), rows);
    }
}
