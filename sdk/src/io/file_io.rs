//! FileIO: matching files by pattern, once or continuously (Beam's `FileIO.match()` and
//! `FileIO.matchAll()`, with `.continuously(..)`; Spark's file stream source).
//!
//! A match runs when the pipeline runs, not when it is built. `continuously` watches the
//! patterns as a splittable DoFn: every poll lists the matches, and outputs the files not seen
//! before, each once. The set of files seen is the restriction, so it is checkpointed with the
//! operator's state: after a restart, a file is neither read twice nor missed (like Spark's
//! file source log). Spark's options apply: at most some files per poll
//! ([`Continuously::max_files_per_poll`], `maxFilesPerTrigger`) and the newest first
//! ([`Continuously::latest_first`]).

use crate::error::UserResult;
use crate::pipeline::{PBegin, PCollection, PTransform};
use crate::splittable::{
    Claims, ProcessContinuation, Progress, RestrictionTracker, SdfContext, SplittableDoFn, SplittableParDo,
    WatermarkEstimator,
};
use crate::time::{duration_millis, Timestamp, MIN_TIMESTAMP};
use crate::transforms::create::Create;
use crate::transforms::par_do::ParDo;
use crate::{DoFn, ProcessContext};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::time::Duration;

/// A file a match found (Beam's `MatchResult.Metadata`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FileMetadata {
    /// The file's path.
    pub path: String,
    /// Its size when matched.
    pub size_bytes: u64,
    /// When it was last modified, ms since the epoch.
    pub last_modified_millis: i64,
}

/// What a pattern that matches nothing means (Beam's `EmptyMatchTreatment`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum EmptyMatchTreatment {
    /// Nothing is fine.
    Allow,
    /// Nothing is an error.
    Disallow,
    /// Nothing is fine for a pattern with a wildcard, an error for a plain file name (Beam's
    /// default).
    #[default]
    AllowIfWildcard,
}

/// Matching files (see the module documentation).
///
/// ```
/// use std::time::Duration;
/// use weir_sdk::prelude::*;
/// use weir_sdk::io::file_io::{FileIO, FileMetadata, Termination};
/// let p = Pipeline::create();
/// // Every CSV file in `in/`, as it arrives, each once, until an hour passes without one.
/// let files: PCollection<FileMetadata> = p.apply(
///     "Watch",
///     FileIO::match_pattern("in/*.csv")
///         .continuously(Duration::from_secs(1), Termination::after_time_since_new_output(Duration::from_secs(3600))),
/// );
/// assert!(p.graph().is_streaming());
/// assert!(p.validate().is_ok());
/// ```
pub struct FileIO;

impl FileIO {
    /// The files matching `pattern` (a glob: `dir/*.csv`, `logs/**/*.jsonl`), matched when the
    /// pipeline runs (Beam's `FileIO.match().filepattern(..)`). As in Beam, a pattern that
    /// matches nothing is an error unless [`MatchPattern::with_empty_match_treatment`] says
    /// otherwise; a watched pattern ([`MatchPattern::continuously`]) may match nothing at first,
    /// since its files may come later.
    pub fn match_pattern(pattern: impl Into<String>) -> MatchPattern {
        MatchPattern { pattern: pattern.into(), all: FileIO::match_all(), empty: None }
    }
    /// The files matching each pattern of the input (Beam's `FileIO.matchAll()`): an empty match
    /// is fine for a pattern with a wildcard and an error for a plain file name, by default.
    pub fn match_all() -> MatchAll {
        MatchAll { empty: EmptyMatchTreatment::default(), continuously: None }
    }
}

/// Matches every pattern of its input; see [`FileIO::match_all`].
#[derive(Clone, Debug)]
pub struct MatchAll {
    empty: EmptyMatchTreatment,
    continuously: Option<Continuously>,
}

impl MatchAll {
    /// What a pattern that matches nothing means.
    pub fn with_empty_match_treatment(self, empty: EmptyMatchTreatment) -> Self {
        MatchAll { empty, ..self }
    }
    /// Watches the patterns: polls every `poll_interval` and outputs each new file once, until
    /// `terminate` says to stop. The output is unbounded.
    pub fn continuously(self, poll_interval: Duration, terminate: Termination) -> Self {
        MatchAll { continuously: Some(Continuously::new(poll_interval, terminate)), ..self }
    }
    /// Watches the patterns as `how` says (see [`Continuously`]).
    pub fn watching(self, how: Continuously) -> Self {
        MatchAll { continuously: Some(how), ..self }
    }
}

/// Matches one pattern; see [`FileIO::match_pattern`].
#[derive(Clone, Debug)]
pub struct MatchPattern {
    pattern: String,
    all: MatchAll,
    /// The treatment the user chose; by default `Disallow` for a single match and `Allow` for a
    /// watch (Beam's `FileIO.match()` and its poll function).
    empty: Option<EmptyMatchTreatment>,
}

impl MatchPattern {
    /// What a pattern that matches nothing means.
    pub fn with_empty_match_treatment(self, empty: EmptyMatchTreatment) -> Self {
        MatchPattern { empty: Some(empty), ..self }
    }
    /// Watches the pattern: polls every `poll_interval` and outputs each new file once, until
    /// `terminate` says to stop. The output is unbounded.
    pub fn continuously(self, poll_interval: Duration, terminate: Termination) -> Self {
        MatchPattern { all: self.all.continuously(poll_interval, terminate), ..self }
    }
    /// Watches the pattern as `how` says (see [`Continuously`]).
    pub fn watching(self, how: Continuously) -> Self {
        MatchPattern { all: self.all.watching(how), ..self }
    }
}

/// When a continuous match stops watching (Beam's `Watch.Growth` termination conditions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Termination {
    /// Never: the pipeline runs until it is stopped, cancelled or drained.
    Never,
    /// Once this long has passed since the watch started.
    AfterTotalOf(
        /// ms
        i64,
    ),
    /// Once this long has passed without a new file.
    AfterTimeSinceNewOutput(
        /// ms
        i64,
    ),
    /// After this many polls.
    AfterIterations(u64),
    /// One poll per run of a pipeline with a checkpoint: between runs the watch (the files it
    /// has seen) waits in the checkpoint, and the next run polls as it starts, so each run
    /// reads the files that arrived since the last (Spark's incremental batch with
    /// `Trigger.AvailableNow`). A run without a checkpoint has no next run: use
    /// [`Termination::after_iterations`] there.
    EachRun,
}

impl Termination {
    /// Beam's `Growth.never()`.
    pub fn never() -> Self {
        Termination::Never
    }
    /// Beam's `Growth.afterTotalOf(d)`.
    pub fn after_total_of(d: Duration) -> Self {
        Termination::AfterTotalOf(duration_millis(d))
    }
    /// Beam's `Growth.afterTimeSinceNewOutput(d)`.
    pub fn after_time_since_new_output(d: Duration) -> Self {
        Termination::AfterTimeSinceNewOutput(duration_millis(d))
    }
    /// Beam's `Growth.afterIterations(n)`.
    pub fn after_iterations(n: u64) -> Self {
        Termination::AfterIterations(n)
    }
    /// One poll per run ([`Termination::EachRun`]).
    pub fn each_run() -> Self {
        Termination::EachRun
    }
}

/// How a continuous match watches: the poll interval, when it stops, and Spark's file source
/// options.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Continuously {
    poll_interval_ms: i64,
    terminate: Termination,
    max_files_per_poll: Option<usize>,
    latest_first: bool,
    #[serde(default)]
    hold_watermark: bool,
}

impl Continuously {
    /// Polls every `poll_interval` until `terminate`.
    pub fn new(poll_interval: Duration, terminate: Termination) -> Self {
        Continuously {
            poll_interval_ms: duration_millis(poll_interval).max(1),
            terminate,
            max_files_per_poll: None,
            latest_first: false,
            hold_watermark: false,
        }
    }
    /// At most `n` new files per poll (Spark's `maxFilesPerTrigger`); the others come in the
    /// next polls, at once.
    pub fn max_files_per_poll(self, n: usize) -> Self {
        Continuously { max_files_per_poll: Some(n.max(1)), ..self }
    }
    /// The newest files first, by modification time (Spark's `latestFirst`); otherwise the
    /// oldest first, then by path.
    pub fn latest_first(self, yes: bool) -> Self {
        Continuously { latest_first: yes, ..self }
    }
    /// Files come at the pattern's timestamp (not each poll's time), and the watermark stays
    /// there until the watch ends: for readers that stamp records with their own event times,
    /// which may be older than the poll that found their file. Windows downstream then close
    /// when the watch ends (it terminates, or the pipeline is drained).
    pub fn hold_watermark(self, yes: bool) -> Self {
        Continuously { hold_watermark: yes, ..self }
    }
}

/// The regular files matching `pattern`, sorted by path, with what `empty` says of none.
pub fn match_files(pattern: &str, empty: EmptyMatchTreatment) -> UserResult<Vec<FileMetadata>> {
    let paths = glob::glob(pattern).map_err(|e| format!("invalid file pattern '{pattern}': {e}"))?;
    let mut out = Vec::new();
    for p in paths {
        let p = p.map_err(|e| format!("cannot read a match of '{pattern}': {e}"))?;
        // A file removed between the listing and the look is not a match.
        let Ok(meta) = std::fs::metadata(&p) else { continue };
        if !meta.is_file() {
            continue;
        }
        let modified =
            meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, duration_millis);
        out.push(FileMetadata {
            path: p.to_string_lossy().into_owned(),
            size_bytes: meta.len(),
            last_modified_millis: modified,
        });
    }
    out.sort();
    let wildcard = pattern.contains(['*', '?', '[']);
    let refuse = match empty {
        EmptyMatchTreatment::Allow => false,
        EmptyMatchTreatment::Disallow => true,
        EmptyMatchTreatment::AllowIfWildcard => !wildcard,
    };
    if out.is_empty() && refuse {
        return Err(format!("no file matches pattern '{pattern}' (empty matches are not allowed: {empty:?})").into());
    }
    Ok(out)
}

/// Matches each pattern once.
#[derive(Clone)]
struct MatchOnce(EmptyMatchTreatment);

impl DoFn for MatchOnce {
    type In = String;
    type Out = FileMetadata;
    fn process(&mut self, pattern: String, ctx: &mut ProcessContext<'_, FileMetadata>) -> UserResult {
        for m in match_files(&pattern, self.0)? {
            ctx.output(m);
        }
        Ok(())
    }
}

/// What a continuous match has done: the files it output, its polls, and when it started and
/// last found a new file: the restriction of a continuous match, checkpointed. The default is
/// a watch that has not polled yet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Growth {
    /// The paths output so far.
    pub seen: BTreeSet<String>,
    /// Polls so far.
    pub polls: u64,
    /// When the watch started (its first poll), ms; `None` before it.
    pub started: Option<Timestamp>,
    /// When a poll last found a new file, ms.
    pub last_new: Option<Timestamp>,
    /// Whether the watch is over.
    pub done: bool,
}

/// What one poll claims: the new files it found (with the poll's time), or the end.
#[derive(Clone, Debug)]
pub enum PollClaim {
    /// A poll at this time found these files.
    Poll(Timestamp, Vec<String>),
    /// The watch is over.
    End,
}

/// Tracks a [`Growth`]: each poll's new files are claimed, and a checkpoint hands the grown set
/// to the residual (Beam's `GrowthTracker`).
#[derive(Clone, Debug)]
pub struct GrowthTracker {
    /// The state with this call's claims added.
    grown: Growth,
    /// Whether this call's part is over (the watch ended, or was checkpointed).
    ended: bool,
}

impl GrowthTracker {
    /// Tracks `state`.
    pub fn new(state: Growth) -> Self {
        GrowthTracker { ended: state.done, grown: state }
    }
}

impl RestrictionTracker for GrowthTracker {
    type Restriction = Growth;
    type Position = PollClaim;
    fn try_claim(&mut self, claim: PollClaim) -> bool {
        if self.ended {
            return false;
        }
        match claim {
            PollClaim::Poll(at, new) => {
                self.grown.polls += 1;
                self.grown.started.get_or_insert(at);
                if !new.is_empty() {
                    self.grown.last_new = Some(at);
                }
                self.grown.seen.extend(new);
                true
            }
            PollClaim::End => {
                self.ended = true;
                self.grown.done = true;
                false
            }
        }
    }
    fn current_restriction(&self) -> Growth {
        self.grown.clone()
    }
    /// Only a checkpoint: the residual goes on from the grown state; this call's part is over.
    fn try_split(&mut self, fraction_of_remainder: f64) -> Option<Growth> {
        if fraction_of_remainder != 0.0 || self.ended {
            return None;
        }
        self.ended = true;
        Some(self.grown.clone())
    }
    fn check_done(&self) -> Result<(), String> {
        if self.ended {
            Ok(())
        } else {
            Err("a watch returned without ending or being checkpointed".into())
        }
    }
    fn progress(&self) -> Progress {
        Progress { work_completed: self.grown.seen.len() as f64, work_remaining: if self.ended { 0.0 } else { 1.0 } }
    }
    fn is_bounded(&self) -> bool {
        false
    }
}

/// Watches a pattern: the splittable DoFn of a continuous match.
#[derive(Clone)]
struct Watch {
    how: Continuously,
    empty: EmptyMatchTreatment,
}

impl Watch {
    fn over(&self, g: &Growth, now: Timestamp) -> bool {
        match self.how.terminate {
            Termination::Never => false,
            Termination::AfterTotalOf(ms) => g.started.is_some_and(|s| now - s >= ms),
            Termination::AfterTimeSinceNewOutput(ms) => g.last_new.or(g.started).is_some_and(|t| now - t >= ms),
            Termination::AfterIterations(n) => g.polls >= n,
            Termination::EachRun => false,
        }
    }
}

impl SplittableDoFn for Watch {
    type In = String;
    type Out = FileMetadata;
    type Restriction = Growth;
    type Tracker = GrowthTracker;
    fn initial_restriction(&self, _: &String) -> UserResult<Growth> {
        Ok(Growth::default())
    }
    fn new_tracker(&self, _: &String, g: Growth) -> GrowthTracker {
        GrowthTracker::new(g)
    }
    fn initial_watermark_estimator(&self, _: &String, _: Timestamp) -> WatermarkEstimator {
        WatermarkEstimator::Manual(MIN_TIMESTAMP)
    }
    fn unbounded_per_element(&self) -> bool {
        true
    }
    fn process(
        &mut self,
        pattern: &String,
        tracker: &mut Claims<'_, GrowthTracker>,
        ctx: &mut SdfContext<'_, FileMetadata>,
    ) -> UserResult<ProcessContinuation> {
        let now = ctx.processing_time();
        let state = tracker.current_restriction();
        // An empty match is only refused on the first poll: files may come later.
        let empty = if state.polls == 0 { self.empty } else { EmptyMatchTreatment::Allow };
        let mut new: Vec<FileMetadata> =
            match_files(pattern, empty)?.into_iter().filter(|m| !state.seen.contains(&m.path)).collect();
        if self.how.latest_first {
            new.sort_by(|a, b| b.last_modified_millis.cmp(&a.last_modified_millis).then(a.path.cmp(&b.path)));
        } else {
            new.sort_by(|a, b| a.last_modified_millis.cmp(&b.last_modified_millis).then(a.path.cmp(&b.path)));
        }
        let more = self.how.max_files_per_poll.is_some_and(|n| new.len() > n);
        new.truncate(self.how.max_files_per_poll.unwrap_or(usize::MAX));
        if !tracker.try_claim(PollClaim::Poll(now, new.iter().map(|m| m.path.clone()).collect())) {
            return Ok(ProcessContinuation::stop());
        }
        if self.how.hold_watermark {
            new.into_iter().for_each(|m| ctx.output(m));
        } else {
            for m in new {
                ctx.output_with_timestamp(m, now)?;
            }
            // Everything found by now is out: nothing earlier than this poll will come.
            ctx.set_watermark(now)?;
        }
        if self.over(&tracker.current_restriction(), now) {
            tracker.try_claim(PollClaim::End);
            return Ok(ProcessContinuation::stop());
        }
        if !more && self.how.terminate == Termination::EachRun {
            return Ok(ProcessContinuation::resume_next_run());
        }
        let delay = if more { 0 } else { self.how.poll_interval_ms };
        Ok(ProcessContinuation::resume().with_resume_delay(Duration::from_millis(delay as u64)))
    }
}

impl PTransform<PCollection<String>> for MatchAll {
    type Output = PCollection<FileMetadata>;
    fn expand(self, patterns: PCollection<String>) -> PCollection<FileMetadata> {
        match self.continuously {
            None => patterns.apply("Match", ParDo::of(MatchOnce(self.empty))),
            Some(how) => patterns.apply("Watch", SplittableParDo::of(Watch { how, empty: self.empty })),
        }
    }
}

impl PTransform<PBegin> for MatchPattern {
    type Output = PCollection<FileMetadata>;
    fn expand(self, input: PBegin) -> PCollection<FileMetadata> {
        let empty = self.empty.unwrap_or(match self.all.continuously {
            None => EmptyMatchTreatment::Disallow,
            Some(_) => EmptyMatchTreatment::Allow,
        });
        input
            .apply("Pattern", Create::of(vec![self.pattern]))
            .apply("MatchAll", self.all.with_empty_match_treatment(empty))
    }
}
