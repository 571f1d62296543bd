//! TextIO: line-oriented text files, read in splits and written as shards.

use crate::do_fn::{DoFn, ProcessContext};
use crate::error::{UserError, UserResult};
use crate::io::source::{BoundedReader, BoundedSource, Read};
use crate::kv::KV;
use crate::pipeline::{PBegin, PCollection, PTransform};
use crate::time::{Timestamp, MIN_TIMESTAMP};
use crate::transforms::combine::Combine;
use crate::transforms::group_by_key::GroupByKey;
use crate::transforms::par_do::ParDo;
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Entry points: `TextIO::read().from("in/*.txt")`, `TextIO::write().to("out/part")`.
pub struct TextIO;

impl TextIO {
    /// Reads lines of text files.
    pub fn read() -> TextRead {
        TextRead { pattern: String::new(), exact: false }
    }
    /// Writes strings as lines of sharded text files.
    pub fn write() -> TextWrite {
        TextWrite { prefix: String::new(), suffix: String::new(), num_shards: 1 }
    }
}

/// Reads every line (without its `\n` or `\r\n`) of the files matching a glob pattern.
#[derive(Clone, Debug)]
pub struct TextRead {
    pattern: String,
    /// Whether `pattern` is one file's name, taken literally.
    exact: bool,
}

impl TextRead {
    /// The glob pattern of the files to read (`logs/*.txt`; a plain name matches itself, but
    /// `[`, `*` and `?` are pattern characters).
    pub fn from(mut self, pattern: impl Into<String>) -> Self {
        self.pattern = pattern.into();
        self.exact = false;
        self
    }
    /// Exactly one file, whatever characters its name holds (`events[1].jsonl`).
    pub fn from_file(mut self, path: impl Into<String>) -> Self {
        self.pattern = path.into();
        self.exact = true;
        self
    }
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> UserError {
    format!("{}: {e}", path.display()).into()
}

/// A text source: a pattern (or one file) until split, then byte ranges of single files. A range
/// reads the lines that *start* inside it, so adjacent ranges read every line exactly once.
#[derive(Clone, Debug)]
pub enum TextSource {
    /// All files matching a glob pattern.
    Pattern(String),
    /// Exactly one file, its name taken as it is (no glob characters).
    File(PathBuf),
    /// Lines starting in `[start, end)` of one file.
    Range {
        /// The file.
        path: PathBuf,
        /// First byte.
        start: u64,
        /// End byte (exclusive).
        end: u64,
    },
}

impl TextSource {
    fn files(pattern: &str) -> UserResult<Vec<(PathBuf, u64)>> {
        let paths = glob::glob(pattern).map_err(|e| format!("invalid file pattern '{pattern}': {e}"))?;
        let mut out = Vec::new();
        for p in paths {
            let p = p.map_err(|e| format!("cannot read a match of '{pattern}': {e}"))?;
            let meta = std::fs::metadata(&p).map_err(|e| io_err(&p, e))?;
            if meta.is_file() {
                out.push((p, meta.len()));
            }
        }
        if out.is_empty() {
            return Err(format!("no files match pattern '{pattern}'").into());
        }
        Ok(out)
    }

    /// The byte ranges this source reads: `(file, start, end)`.
    pub fn ranges(&self) -> UserResult<Vec<(PathBuf, u64, u64)>> {
        match self {
            TextSource::Pattern(p) => Ok(Self::files(p)?.into_iter().map(|(f, len)| (f, 0, len)).collect()),
            TextSource::File(path) => {
                let meta = std::fs::metadata(path).map_err(|e| io_err(path, e))?;
                if !meta.is_file() {
                    return Err(io_err(path, "not a file"));
                }
                Ok(vec![(path.clone(), 0, meta.len())])
            }
            TextSource::Range { path, start, end } => Ok(vec![(path.clone(), *start, *end)]),
        }
    }

    /// Ranges of about `desired` bytes (at least 1 KiB) covering this source.
    pub fn split_ranges(&self, desired: u64) -> UserResult<Vec<TextSource>> {
        let desired = desired.max(1024);
        let mut out = Vec::new();
        for (path, start, end) in self.ranges()? {
            let mut s = start;
            loop {
                let e = (s + desired).min(end);
                out.push(TextSource::Range { path: path.clone(), start: s, end: e });
                if e >= end {
                    break;
                }
                s = e;
            }
        }
        Ok(out)
    }

    /// A reader of this source's lines with their positions.
    pub fn line_reader(&self) -> UserResult<LineReader> {
        Ok(LineReader { ranges: self.ranges()?.into(), current: None })
    }
}

impl BoundedSource for TextSource {
    type Output = String;
    type Reader = TextReader;
    fn describe(&self) -> String {
        format!("TextIO.Read({self:?})")
    }
    fn split(&self, desired: u64) -> UserResult<Vec<Self>> {
        self.split_ranges(desired)
    }
    fn estimated_size_bytes(&self) -> UserResult<u64> {
        Ok(self.ranges()?.iter().map(|(_, s, e)| e - s).sum())
    }
    fn create_reader(&self) -> UserResult<TextReader> {
        Ok(TextReader { lines: self.line_reader()?, buf: Vec::new() })
    }
}

/// Reads the lines of byte ranges of files, each with the file and the byte offset it starts at.
pub struct LineReader {
    ranges: std::collections::VecDeque<(PathBuf, u64, u64)>,
    current: Option<(PathBuf, BufReader<File>, u64, u64)>,
}

impl LineReader {
    /// Reads the next line into `line` (cleared first, without its `\n` or `\r\n`). Returns the
    /// file and the byte offset the line starts at, or `None` at the end.
    pub fn next_line(&mut self, line: &mut Vec<u8>) -> UserResult<Option<(&Path, u64)>> {
        let mut spanning = Vec::new();
        let read = self.next_line_with(&mut spanning, |l| {
            line.clear();
            line.extend_from_slice(l);
        })?;
        Ok(read.map(|((), path, at)| (path, at)))
    }

    /// Hands the next line (without its `\n` or `\r\n`) to `f` and returns what `f` made of it,
    /// with the file and the byte offset the line starts at, or `None` at the end. A line that
    /// lies whole in the read buffer is handed over in place, with no copy; one that spans two
    /// fills is gathered in `scratch` first.
    pub fn next_line_with<R>(
        &mut self,
        scratch: &mut Vec<u8>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> UserResult<Option<(R, &Path, u64)>> {
        self.next_line_at(scratch, |line, _| f(line))
    }

    /// [`LineReader::next_line_with`], with the line's offset handed to `f` too.
    pub fn next_line_at<R>(
        &mut self,
        scratch: &mut Vec<u8>,
        f: impl FnOnce(&[u8], u64) -> R,
    ) -> UserResult<Option<(R, &Path, u64)>> {
        loop {
            if self.current.is_none() {
                let Some((path, start, end)) = self.ranges.pop_front() else { return Ok(None) };
                let (reader, pos) = open_at_line(&path, start)?;
                self.current = Some((path, reader, pos, end));
            }
            let Some((path, reader, pos, end)) = self.current.as_mut() else { continue };
            if *pos >= *end {
                self.current = None;
                continue;
            }
            let buf = reader.fill_buf().map_err(|e| io_err(path, e))?;
            if buf.is_empty() {
                self.current = None;
                continue;
            }
            let at = *pos;
            let result = if let Some(i) = memchr::memchr(b'\n', buf) {
                let line = &buf[..i];
                let r = f(line.strip_suffix(b"\r").unwrap_or(line), at);
                reader.consume(i + 1);
                *pos += i as u64 + 1;
                r
            } else {
                scratch.clear();
                let n = read_line(reader, scratch).map_err(|e| io_err(path, e))?;
                *pos += n as u64;
                if scratch.last() == Some(&b'\n') {
                    scratch.pop();
                }
                if scratch.last() == Some(&b'\r') {
                    scratch.pop();
                }
                f(scratch, at)
            };
            return Ok(self.current.as_ref().map(|(p, ..)| (result, p.as_path(), at)));
        }
    }
}

/// Opens `path` at the first line that starts at or after byte `start` (a line starting before
/// it belongs to the range before): the reader and that line's offset.
pub fn open_at_line(path: &Path, start: u64) -> UserResult<(BufReader<File>, u64)> {
    let mut f = File::open(path).map_err(|e| io_err(path, e))?;
    if start == 0 {
        return Ok((BufReader::with_capacity(256 * 1024, f), 0));
    }
    f.seek(SeekFrom::Start(start - 1)).map_err(|e| io_err(path, e))?;
    let mut r = BufReader::with_capacity(256 * 1024, f);
    let mut skipped = Vec::new();
    let n = r.read_until(b'\n', &mut skipped).map_err(|e| io_err(path, e))?;
    Ok((r, start - 1 + n as u64))
}

/// `BufRead::read_until(b'\n')`, with the vectorised `memchr` crate's search (std's is a
/// word-at-a-time loop, and the search is a good part of reading a file of short lines).
fn read_line(reader: &mut BufReader<File>, line: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut n = 0;
    loop {
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let (done, used) = match memchr::memchr(b'\n', buf) {
            Some(i) => {
                line.extend_from_slice(&buf[..=i]);
                (true, i + 1)
            }
            None => {
                line.extend_from_slice(buf);
                (buf.is_empty(), buf.len())
            }
        };
        reader.consume(used);
        n += used;
        if done {
            return Ok(n);
        }
    }
}

/// The number of newlines in bytes `[from, to)` of `path`. With `from = 0`, one less than the
/// 1-based number of the line starting at `to`: for error messages naming a line.
pub fn count_newlines(path: &Path, from: u64, to: u64) -> std::io::Result<u64> {
    use std::io::Read;
    let mut f = File::open(path)?;
    f.seek(SeekFrom::Start(from))?;
    let mut f = f.take(to.saturating_sub(from));
    let mut buf = vec![0u8; 64 * 1024];
    let mut lines = 0;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(lines);
        }
        lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
    }
}

/// Reads the lines of a [`TextSource`].
pub struct TextReader {
    lines: LineReader,
    buf: Vec<u8>,
}

impl BoundedReader for TextReader {
    type Output = String;
    fn next(&mut self) -> UserResult<Option<(String, Timestamp)>> {
        let Some((path, _)) = self.lines.next_line(&mut self.buf)? else { return Ok(None) };
        let s = String::from_utf8(std::mem::take(&mut self.buf))
            .map_err(|e| io_err(path, format!("invalid UTF-8: {e}")))?;
        Ok(Some((s, MIN_TIMESTAMP)))
    }
}

impl PTransform<PBegin> for TextRead {
    type Output = PCollection<String>;
    fn expand(self, input: PBegin) -> Self::Output {
        let p = input.pipeline_handle();
        if self.pattern.is_empty() {
            p.record_error(&p.current_step(), "TextIO.read() needs a file pattern: call .from(pattern)");
        }
        let source =
            if self.exact { TextSource::File(PathBuf::from(self.pattern)) } else { TextSource::Pattern(self.pattern) };
        input.apply("Read", Read::from(source))
    }
}

/// Writes lines into `num_shards` files named `<prefix>-SSSSS-of-NNNNN<suffix>`. Each shard is
/// written to a temporary file and renamed when complete; shards that received no lines are
/// created empty. The output holds the names of the files written.
#[derive(Clone, Debug)]
pub struct TextWrite {
    prefix: String,
    suffix: String,
    num_shards: u32,
}

impl TextWrite {
    /// The path prefix of the output files.
    pub fn to(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }
    /// A suffix for every file name, e.g. `.txt`.
    pub fn with_suffix(mut self, suffix: impl Into<String>) -> Self {
        self.suffix = suffix.into();
        self
    }
    /// The number of output files (at least 1).
    pub fn with_num_shards(mut self, n: u32) -> Self {
        self.num_shards = n;
        self
    }
}

/// The name of shard `i` of `n`.
pub fn shard_name(prefix: &str, i: u32, n: u32, suffix: &str) -> String {
    format!("{prefix}-{i:05}-of-{n:05}{suffix}")
}

#[derive(Clone)]
struct AssignShardFn {
    n: u32,
    next: Option<u32>,
}

impl DoFn for AssignShardFn {
    type In = String;
    type Out = KV<u32, String>;
    fn process(&mut self, line: String, ctx: &mut ProcessContext<'_, Self::Out>) -> UserResult {
        let n = self.n;
        let shard = self.next.get_or_insert_with(|| rand::random::<u32>() % n);
        ctx.output(KV::new(*shard, line));
        *shard = (*shard + 1) % n;
        Ok(())
    }
}

fn write_atomically(path: &str, lines: &[String]) -> UserResult {
    crate::io::atomic::write_atomic_with(Path::new(path), |f| {
        for l in lines {
            f.write_all(l.as_bytes())?;
            f.write_all(b"\n")?;
        }
        Ok(())
    })?;
    Ok(())
}

#[derive(Clone)]
struct WriteShardFn {
    prefix: String,
    suffix: String,
    n: u32,
}

impl DoFn for WriteShardFn {
    type In = KV<u32, Vec<String>>;
    type Out = String;
    fn process(&mut self, kv: Self::In, ctx: &mut ProcessContext<'_, String>) -> UserResult {
        let name = shard_name(&self.prefix, kv.key, self.n, &self.suffix);
        write_atomically(&name, &kv.value)?;
        ctx.output(name);
        Ok(())
    }
}

#[derive(Clone)]
struct FinalizeFn {
    prefix: String,
    suffix: String,
    n: u32,
}

impl DoFn for FinalizeFn {
    type In = Vec<String>;
    type Out = String;
    fn process(&mut self, written: Vec<String>, ctx: &mut ProcessContext<'_, String>) -> UserResult {
        for i in 0..self.n {
            let name = shard_name(&self.prefix, i, self.n, &self.suffix);
            if !written.contains(&name) {
                write_atomically(&name, &[])?;
            }
            ctx.output(name);
        }
        Ok(())
    }
}

impl PTransform<PCollection<String>> for TextWrite {
    type Output = PCollection<String>;
    fn expand(self, input: PCollection<String>) -> Self::Output {
        let p = input.pipeline().clone();
        if self.prefix.is_empty() {
            p.record_error(&p.current_step(), "TextIO.write() needs an output prefix: call .to(prefix)");
        }
        if self.num_shards == 0 {
            p.record_error(&p.current_step(), "TextIO.write() needs at least one shard");
        }
        let n = self.num_shards.max(1);
        input
            .apply("AssignShard", ParDo::of(AssignShardFn { n, next: None }))
            .apply("GroupByShard", GroupByKey::create())
            .apply(
                "WriteShards",
                ParDo::of(WriteShardFn { prefix: self.prefix.clone(), suffix: self.suffix.clone(), n }),
            )
            .apply("CollectNames", Combine::globally(crate::transforms::combiners::ToListFn::<String>::default()))
            .apply("Finalize", ParDo::of(FinalizeFn { prefix: self.prefix, suffix: self.suffix, n }))
    }
    fn composite_urn() -> Option<&'static str> {
        Some(crate::urns::WRITE_FILES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines handed over in the read buffer and lines gathered across fills (one longer than
    /// the buffer, `\r\n` endings, a last line without one) come out the same, with their
    /// offsets, split by byte range or not.
    #[test]
    fn lines_in_place_and_across_buffer_fills() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lines.txt");
        let mut lines: Vec<String> = (0..20_000).map(|i| format!("{i}:{}", "x".repeat(i % 97))).collect();
        lines.insert(7_000, "y".repeat(300 * 1024));
        let mut text = String::new();
        for (i, l) in lines.iter().enumerate() {
            text.push_str(l);
            text.push_str(if i % 3 == 0 { "\r\n" } else { "\n" });
        }
        text.push_str("last");
        lines.push("last".into());
        std::fs::write(&path, &text).unwrap();
        let whole = TextSource::File(path.clone());
        for source in [vec![whole.clone()], whole.split_ranges(100_000).unwrap()] {
            let (mut got, mut scratch) = (Vec::new(), Vec::new());
            for s in &source {
                let mut r = s.line_reader().unwrap();
                while let Some((l, _, at)) = r.next_line_with(&mut scratch, |l| String::from_utf8(l.to_vec())).unwrap()
                {
                    let l = l.unwrap();
                    assert!(text[at as usize..].starts_with(&l), "offset {at}");
                    got.push(l);
                }
            }
            assert_eq!(got.len(), lines.len());
            assert!(got == lines, "{} ranges", source.len());
        }
    }

    fn read_all(src: &TextSource) -> Vec<String> {
        let mut r = src.create_reader().unwrap();
        let mut out = vec![];
        while let Some((l, _)) = r.next().unwrap() {
            out.push(l);
        }
        out
    }

    #[test]
    fn splits_read_every_line_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        let lines: Vec<String> = (0..500).map(|i| format!("line number {i} {}", "x".repeat(i % 37))).collect();
        let mut body = lines.join("\r\n");
        body.push('\n');
        std::fs::write(&path, body).unwrap();
        let src = TextSource::Pattern(path.to_string_lossy().into_owned());
        assert_eq!(read_all(&src), lines);
        for size in [1024, 2000, 4096, 1 << 20] {
            let mut got = vec![];
            for s in src.split(size).unwrap() {
                got.extend(read_all(&s));
            }
            assert_eq!(got, lines, "split size {size}");
        }
    }

    #[test]
    fn missing_files_are_an_error() {
        let e = TextSource::Pattern("/nonexistent/weir/*.txt".into()).split(1000).unwrap_err();
        assert!(e.to_string().contains("no files match pattern"), "{e}");
    }
}
