//! The `nexmark` launcher: runs suites and queries on any runner, checks results against the
//! models, writes results and perf files, and prints Beam's summary table.

use crate::perf::{steady_state_events_per_sec, NexmarkPerf, ProgressSnapshot, SNAPSHOT_PERIOD};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use serde::{Deserialize, Serialize};
use weir_sdk::io::{Read, ReadUnbounded, WriteFiles};
use weir_sdk::metrics::{DistributionResult, MetricQueryResults};
use weir_sdk::testing::assert_that;
use weir_sdk::{
    DoFn, MetricsFilter, PCollection, ParDo, Pipeline, PipelineOptions, PipelineState, ProcessContext, UserResult,
};

use crate::event_files::{EventFiles, EventsFormat};
use crate::models::{compare, comparison, expected_for};
use crate::queries::{self, QueryOptions, ResultRecord};
use crate::signals::{self, Interrupt};
use crate::sources::{export_events, BoundedEventSource, OnMalformed, ReadEventsFile, UnboundedEventSource};
use crate::{Event, NexmarkConfig, QueryName, Suite};
use weir_sdk::io::bad_records::BadRecords;
use weir_sdk::io::file_io::{Continuously, EmptyMatchTreatment, FileIO, Termination};
use weir_sdk::io::read_files::{CleanSource, FileFormat, ReadFiles};

/// The launcher's own flags; every pipeline option (`--runner`, `--parallelism`,
/// `--checkpoint-dir`, `--trigger-interval-ms`, the metrics-sink flags...) is accepted too, and
/// every configuration field as `--field-name VALUE` (e.g. `--num-events 1000`).
#[derive(Parser, Debug)]
#[command(
    name = "nexmark",
    no_binary_name = true,
    version,
    about = "Beam's Nexmark benchmark on Weir",
    after_help = "Every field of Beam's NexmarkConfiguration is a flag too, in kebab case: \
                  --num-events 1000000, --rate-shape square, --window-size-sec 10, --is-rate-limited ...\n\
                  Logs go to standard error (warnings by default; RUST_LOG=info or RUST_LOG=debug for more).\n\
                  Exit status: 0 done, 1 a run failed, 2 bad usage, 130/143 stopped by SIGINT/SIGTERM."
)]
struct Args {
    /// Query number or name (repeatable); default: every query of the suite.
    #[arg(long)]
    query: Vec<String>,
    /// Queries to leave out, by number or name (comma-separated or repeated), e.g.
    /// `--skip-queries 15` for a streaming SMOKE run (PORTABILITY_BATCH is batch-only).
    #[arg(long = "skip-queries", value_delimiter = ',')]
    skip_queries: Vec<String>,
    /// DEFAULT, SMOKE, STRESS, FULL_THROTTLE, SMALL_LOGGER or LONG_RUNNING_LOGGER.
    #[arg(long, default_value = "default")]
    suite: String,
    /// Streaming mode: the unbounded source instead of the bounded one.
    #[arg(long)]
    streaming: bool,
    /// Write each query's results under DIR/<QUERY>/, exactly once (in streaming too), in the
    /// format --results-format names.
    #[arg(long, value_name = "DIR")]
    results: Option<PathBuf>,
    /// The format of --results: `jsonl` (`{"query", "timestamp", "value": {...}}` per line) or
    /// `parquet` (columns query, timestamp, and value, the result's JSON text).
    #[arg(long = "results-format", value_name = "FORMAT", default_value = "jsonl", value_parser = ["jsonl", "parquet"])]
    results_format: String,
    /// Write the events to FILE and exit: Beam's JSON lines, or CSV or Parquet by the name's
    /// extension (`.csv`, `.parquet`), one row per event with the union of the Person, Auction
    /// and Bid fields. `kafka://HOST:PORT/TOPIC` publishes them to a Kafka topic instead, a JSON
    /// line per record (a query reads each event's time from the event).
    #[arg(long = "export-events", value_name = "FILE")]
    export_events: Option<PathBuf>,
    /// Read events from a Kafka topic, `HOST:PORT/TOPIC` (as --export-events publishes them,
    /// one JSON line per record; Beam's --sourceType=KAFKA). In batch, and in streaming with
    /// --trigger available-now, the partitions are read to their ends as the run starts; with
    /// another trigger they are read as they grow until the run is stopped. Offsets live in the
    /// --checkpoint-dir, so a restarted query reads every event once.
    #[arg(long = "events-kafka", value_name = "HOST:PORT/TOPIC", conflicts_with_all = ["events_file", "events_glob", "events_dir"])]
    events_kafka: Option<crate::kafka::KafkaTopic>,
    /// Write each result to a Kafka topic, `HOST:PORT/TOPIC`, as the JSON line --results writes
    /// (Beam's --sinkType=KAFKA): one transaction per batch (epoch), so a read_committed consumer
    /// sees each result once, across restarts from --checkpoint-dir too.
    #[arg(long = "results-kafka", value_name = "HOST:PORT/TOPIC")]
    results_kafka: Option<crate::kafka::KafkaTopic>,
    /// Read events from FILE instead of generating them: Beam's JSON lines, or CSV or Parquet by
    /// the name's extension (the tables --export-events writes, or DuckDB and Spark make). The
    /// name is taken as it is; see --events-glob for several files.
    #[arg(long = "events-file", value_name = "FILE", conflicts_with_all = ["events_glob", "events_dir"], value_parser = weir_sdk::options::non_empty())]
    events_file: Option<String>,
    /// Read events from every file matching the glob PATTERN (e.g. `events/*.parquet`), each in
    /// the format its extension says.
    #[arg(long = "events-glob", value_name = "PATTERN", conflicts_with = "events_dir", value_parser = weir_sdk::options::non_empty())]
    events_glob: Option<String>,
    /// With --streaming: read the events files that appear in DIR, each once, in the format its
    /// extension says. With --trigger available-now (the default) the files there are read and
    /// the run stops; with --checkpoint-dir too, each later run reads the files that arrived
    /// since the last (Spark's incremental batch). With another trigger the directory is watched
    /// until the run is stopped. Windows close when the watch ends (or a run is drained).
    #[arg(long = "events-dir", value_name = "DIR", requires = "streaming")]
    events_dir: Option<PathBuf>,
    /// How often --events-dir looks for new files, ms.
    #[arg(long = "events-dir-poll-ms", value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    events_dir_poll_ms: u64,
    /// What --events-dir does with a file once it is read and the read committed (Spark's
    /// cleanSource): `off`, `delete`, or `archive=DIR` (moved under DIR, keeping its path).
    /// Not on the timely runner.
    #[arg(long = "events-dir-clean", value_name = "WHAT", default_value = "off", requires = "events_dir")]
    events_dir_clean: CleanSource,
    /// What to do with lines of an events file that are not events: `skip` (a warning per line
    /// and a count in the summary), `fail`, or `dead-letter=FILE` (skip, and keep the lines
    /// verbatim in FILE).
    #[arg(long = "on-malformed", value_name = "POLICY", default_value = "skip")]
    on_malformed: OnMalformed,
    /// Replace what a --results directory holds instead of refusing one that is not empty.
    #[arg(long)]
    overwrite: bool,
    /// Append one JSON object per run (Beam's NexmarkPerf fields) to FILE.
    #[arg(long = "perf-file", value_name = "FILE")]
    perf_file: Option<PathBuf>,
    /// Compare with the runs of an earlier perf file.
    #[arg(long = "baseline-file", value_name = "FILE")]
    baseline_file: Option<PathBuf>,
    /// Compare results with the model and fail on a mismatch.
    #[arg(long)]
    check: bool,
    /// Also write the run's report to FILE: one self-contained HTML page (no network) with the
    /// summary, a chart of events/s per query, each configuration's runner, mode, runtime,
    /// events/s, results and --check verdict, and with --baseline-file the changes. With
    /// --report-history, the history's page instead, and nothing is run.
    #[arg(long, value_name = "FILE.html")]
    report: Option<PathBuf>,
    /// Percent by which a query's runtime may exceed its baseline's before the report marks it.
    #[arg(long = "report-threshold", value_name = "PCT", default_value_t = 10.0)]
    report_threshold: f64,
    /// Perf files (--perf-file) of earlier runs, oldest first: --report draws the runtime and
    /// the result count of every query across them, as line charts.
    #[arg(long = "report-history", value_name = "PERF_FILE", num_args = 1.., requires = "report")]
    report_history: Vec<PathBuf>,
    /// Generate and count events only, no query: the ceiling for this workload.
    #[arg(long = "generator-only")]
    generator_only: bool,
    /// Where LOG_TO_SHARDED_FILES (10) writes its log and index files (Beam's `--outputPath`);
    /// without it the query runs without writing files.
    #[arg(long = "output-path", value_name = "DIR")]
    output_path: Option<PathBuf>,
    /// Beam's `--maxNumWorkers`: LOG_TO_SHARDED_FILES logs to 5 shards per worker.
    #[arg(long = "max-num-workers", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1024))]
    max_num_workers: u32,
    #[command(flatten)]
    pipeline: PipelineOptions,
}

/// What one configuration did.
struct Run {
    conf: String,
    perf: Option<NexmarkPerf>,
    note: Option<String>,
    check: Option<crate::report::Verdict>,
}

/// Splits `--field-name VALUE` configuration overrides from the other arguments.
fn split_config_overrides(args: Vec<String>) -> Result<(NexmarkConfig, Vec<String>, bool), String> {
    let defaults = serde_json::to_value(NexmarkConfig::default()).map_err(|e| e.to_string())?;
    let serde_json::Value::Object(defaults_map) = defaults else { unreachable!("a struct serialises as an object") };
    let mut fields = defaults_map.clone();
    let mut rest = Vec::new();
    let mut overridden = false;
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let Some(flag) = arg.strip_prefix("--") else {
            rest.push(arg);
            continue;
        };
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (flag.to_string(), None),
        };
        let camel = kebab_to_camel(&name);
        let Some(default) = fields.get(&camel).cloned().filter(|_| camel != "query") else {
            rest.push(arg);
            continue;
        };
        let raw = match inline {
            Some(v) => v,
            None if default.is_boolean() => "true".to_string(),
            None => it.next().ok_or_else(|| format!("--{name} needs a value"))?,
        };
        let invalid = |why: &dyn std::fmt::Display| format!("invalid value for --{name}: '{raw}' ({why})");
        let value = match default {
            serde_json::Value::String(_) => serde_json::Value::String(raw.to_ascii_uppercase().replace('-', "_")),
            serde_json::Value::Null => serde_json::Value::String(raw.clone()),
            _ => serde_json::from_str(&raw).map_err(|_| invalid(&"not a value of this field's type"))?,
        };
        // Check the value alone against the field's type, so the error names this flag.
        let mut alone = defaults_map.clone();
        alone.insert(camel.clone(), value.clone());
        if let Err(e) = serde_json::from_value::<NexmarkConfig>(serde_json::Value::Object(alone)) {
            return Err(invalid(&e));
        }
        fields.insert(camel, value);
        overridden = true;
    }
    let config: NexmarkConfig = serde_json::from_value(serde_json::Value::Object(fields))
        .map_err(|e| format!("invalid Nexmark configuration flag: {e}"))?;
    Ok((config, rest, overridden))
}

fn kebab_to_camel(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut upper = false;
    for c in s.chars() {
        if c == '-' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// Applies the command-line overrides (every field that differs from the default) to a suite
/// configuration, as Beam's `overrideFromOptions` does.
fn apply_overrides(base: &NexmarkConfig, overrides: &NexmarkConfig) -> Result<NexmarkConfig, String> {
    let mut merged = serde_json::to_value(base).map_err(|e| e.to_string())?;
    if let Some(m) = merged.as_object_mut() {
        m.extend(changed_fields(overrides));
    }
    serde_json::from_value(merged).map_err(|e| e.to_string())
}

/// The fields of `config` (Beam's JSON names) whose values differ from the defaults.
fn changed_fields(config: &NexmarkConfig) -> Vec<(String, serde_json::Value)> {
    let defaults = serde_json::to_value(NexmarkConfig::default()).unwrap_or_default();
    match serde_json::to_value(config) {
        Ok(serde_json::Value::Object(fields)) => {
            fields.into_iter().filter(|(k, v)| defaults.get(k) != Some(v)).collect()
        }
        _ => Vec::new(),
    }
}

/// A result line of `--results`: `{"query": NAME, "timestamp": MS, "value": {...}}`. Between
/// steps the value travels as text; in JSON it is the result object itself.
#[derive(Debug, Clone, PartialEq)]
struct ResultLine {
    query: String,
    timestamp: i64,
    value: String,
}

impl Serialize for ResultLine {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeStruct};
        let human = s.is_human_readable();
        let mut st = s.serialize_struct("ResultLine", 3)?;
        st.serialize_field("query", &self.query)?;
        st.serialize_field("timestamp", &self.timestamp)?;
        if human {
            // Borrowed, not copied: the value is checked to be one JSON value and written as it is.
            let raw: &serde_json::value::RawValue = serde_json::from_str(&self.value).map_err(S::Error::custom)?;
            st.serialize_field("value", raw)?;
        } else {
            st.serialize_field("value", &self.value)?;
        }
        st.end()
    }
}

impl ResultLine {
    /// Appends the line's JSON (what `serde_json` writes for it), without the newline. The
    /// value is a [`crate::queries::BeamJson`] rendering, so it is copied as it is instead of
    /// parsed again to check it.
    fn write_json(&self, out: &mut String) {
        out.push_str("{\"query\":");
        crate::json::write_str(out, &self.query);
        out.push_str(",\"timestamp\":");
        crate::json::write_int(out, self.timestamp);
        out.push_str(",\"value\":");
        out.push_str(&self.value);
        out.push('}');
    }
}

/// Result lines as a results file holds them: one JSON object per line, written in one buffer
/// of the right size.
struct ResultLines;

impl weir_sdk::io::RowFormat<ResultLine> for ResultLines {
    fn extension(&self) -> &str {
        "jsonl"
    }
    fn render(&self, rows: &[&ResultLine]) -> Result<Vec<u8>, weir_sdk::UserError> {
        let mut out = String::with_capacity(rows.iter().map(|r| r.query.len() + r.value.len() + 56).sum());
        for r in rows {
            r.write_json(&mut out);
            out.push('\n');
        }
        Ok(out.into_bytes())
    }
}

/// A result line is a Kafka record's value as it is a results file's line.
#[cfg(feature = "kafka")]
impl weir_kafka::KafkaEncode for ResultLine {
    fn encode(&self) -> Result<Option<std::borrow::Cow<'_, [u8]>>, String> {
        let mut out = String::with_capacity(self.query.len() + self.value.len() + 56);
        self.write_json(&mut out);
        Ok(Some(out.into_bytes().into()))
    }
}

impl<'de> Deserialize<'de> for ResultLine {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Text {
            query: String,
            timestamp: i64,
            value: String,
        }
        #[derive(Deserialize)]
        struct Json {
            query: String,
            timestamp: i64,
            value: Box<serde_json::value::RawValue>,
        }
        if d.is_human_readable() {
            let j = Json::deserialize(d)?;
            Ok(ResultLine { query: j.query, timestamp: j.timestamp, value: j.value.get().to_string() })
        } else {
            let t = Text::deserialize(d)?;
            Ok(ResultLine { query: t.query, timestamp: t.timestamp, value: t.value })
        }
    }
}

#[derive(Clone)]
struct ToLine {
    query: String,
}

/// A result row of `--results-format parquet`: the value is the result's JSON text.
#[cfg(feature = "parquet")]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ResultRow {
    query: String,
    timestamp: i64,
    value: String,
}

impl DoFn for ToLine {
    type In = ResultRecord;
    type Out = ResultLine;

    fn process(&mut self, r: ResultRecord, ctx: &mut ProcessContext<'_, ResultLine>) -> UserResult {
        ctx.output(ResultLine { query: self.query.clone(), timestamp: r.timestamp, value: r.value });
        Ok(())
    }
}

/// What to run: a query, or the generator alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Query(QueryName),
    GeneratorOnly,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Query(q) => q.name(),
            Target::GeneratorOnly => "GENERATOR_ONLY",
        }
    }
}

fn counter(m: &MetricQueryResults, ns: &str, name: &str) -> i64 {
    m.counters.iter().filter(|c| c.key.name.namespace == ns && c.key.name.name == name).map(|c| c.attempted).sum()
}

/// The distribution `ns:name` over every step, if any value was recorded.
fn dist(m: &MetricQueryResults, ns: &str, name: &str) -> Option<DistributionResult> {
    m.distributions
        .iter()
        .filter(|d| d.key.name.namespace == ns && d.key.name.name == name && d.attempted.count > 0)
        .map(|d| d.attempted)
        .reduce(|a, b| a.combine(&b))
}

/// A progress bar on stderr (drawn only on a terminal) of events read out of `total`.
fn progress_bar(total: Option<u64>, name: &str) -> indicatif::ProgressBar {
    let bar = match total {
        Some(n) => indicatif::ProgressBar::new(n),
        None => indicatif::ProgressBar::no_length(),
    };
    let template = if total.is_some() {
        "{prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} events ({msg})"
    } else {
        "{prefix} [{elapsed_precise}] {pos} events ({msg})"
    };
    if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar.set_prefix(name.to_string());
    bar
}

/// What one configuration's run gave: its performance, and the stop signal that ended it early.
struct Outcome {
    perf: NexmarkPerf,
    interrupted: Option<i32>,
    /// Whether the query had a model to check against (with `--check`).
    modelled: bool,
}

/// Reads events files of any of the three formats, stamped with their `dateTime`, with bad
/// records as `--on-malformed` says.
fn read_event_files(on_malformed: &OnMalformed) -> ReadFiles<EventFiles> {
    let bad = BadRecords::new(on_malformed.clone(), "Nexmark event", "nexmark", "malformedEvents")
        .with_fail_hint("--on-malformed fail");
    ReadFiles::of(EventFiles::default()).with_timestamps(Event::date_time).with_bad_record_handler(bad)
}

/// The events of the files `pattern` matches (`exact`: the one file it names), in the order of
/// their paths and, in each, of the file; bad records are skipped.
fn events_in_files(pattern: &str, exact: bool) -> Result<Vec<Event>, String> {
    let pattern = if exact { glob::Pattern::escape(pattern) } else { pattern.to_string() };
    let files = weir_sdk::io::file_io::match_files(&pattern, EmptyMatchTreatment::Allow).map_err(|e| e.to_string())?;
    let read = ReadFiles::of(EventFiles::default());
    let mut events = Vec::new();
    for file in files {
        let units = EventFiles::default().units(&file).map_err(|e| e.to_string())?;
        let range = weir_sdk::splittable::OffsetRange::new(0, units);
        let read = read.process_directly(file, range, usize::MAX).map_err(|e| e.to_string())?;
        events.extend(read.into_iter().map(|(e, _)| e));
    }
    Ok(events)
}

/// Runs one configuration.
fn run_one(args: &Args, config: &NexmarkConfig, target: Target, options: &PipelineOptions) -> Result<Outcome, String> {
    let mut options = options.clone();
    if options.job_name == PipelineOptions::default().job_name {
        // Named after the query unless --job-name says otherwise (the live page lists it so).
        options.job_name = format!("nexmark-{}", target.name().to_lowercase().replace('_', "-"));
    }
    let options = &options;
    let p = Pipeline::new(options.clone());
    let (events, events_file) = read_events(&p, args, config, options)?;
    let modelled = apply_target(args, config, target, &events, events_file.as_ref())?;
    let launched = weir_sdk::time::now_millis();
    let start = Instant::now();
    let result = p.run().map_err(|e| kafka_trigger_hint(args, options, e.to_string()))?;
    let ns = target.name();
    let total = if events_file.is_some() || config.num_events <= 0 { None } else { Some(config.num_events as u64) };
    let (state, interrupted, snapshots) =
        watch(&*result, ns, total, start).map_err(|e| kafka_trigger_hint(args, options, e))?;
    let wall = start.elapsed().as_secs_f64();
    if state != PipelineState::Done && !(interrupted.is_some() && state == PipelineState::Cancelled) {
        return Err(format!("the pipeline ended in state {state:?}"));
    }
    let run = Finished { result: &*result, launched, wall, interrupted, snapshots, events_file: events_file.as_ref() };
    let perf = perf_of(args, target, options, run);
    Ok(Outcome { perf, interrupted, modelled })
}

/// `error` with why a checkpoint of a Kafka read may be refused: the trigger decides how the
/// read runs (to the offsets latest as it starts, or on as the partitions grow), and a
/// checkpoint resumes only the read that wrote it.
fn kafka_trigger_hint(args: &Args, options: &PipelineOptions, error: String) -> String {
    if args.events_kafka.is_none() || !error.contains("written by a different pipeline") || !error.contains("ReadKafka")
    {
        return error;
    }
    let trigger = options.get::<weir::core::streaming::StreamingOptions>().trigger;
    let (this, other) = match trigger {
        weir::core::streaming::StreamingTrigger::AvailableNow => {
            ("--trigger available-now: the topic up to the offsets latest as the run starts", "processing-time or once")
        }
        _ => ("a streaming --trigger other than available-now: the topic on as it grows", "available-now"),
    };
    format!(
        "{error} (with --events-kafka, the trigger decides how the topic is read, and this run reads with {this}; \
         a checkpoint written with --trigger {other} resumes only with that trigger)"
    )
}

/// The events the query reads (the generator, or events files or a directory), and the files'
/// pattern if they come from files.
fn read_events(
    p: &Pipeline,
    args: &Args,
    config: &NexmarkConfig,
    options: &PipelineOptions,
) -> Result<(PCollection<Event>, Option<String>), String> {
    let dir_pattern = args.events_dir.as_ref().map(|d| d.join("*").to_string_lossy().into_owned());
    let events_file = args.events_file.as_ref().or(args.events_glob.as_ref()).or(dir_pattern.as_ref());
    let json_lines = |f: &String| EventsFormat::of(f) == EventsFormat::JsonLines;
    let events: PCollection<Event> = if let Some(dir) = &dir_pattern {
        let mb = options.get::<weir::core::streaming::StreamingOptions>();
        let available_now = mb.trigger == weir::core::streaming::StreamingTrigger::AvailableNow;
        // Available-now without a checkpoint reads what is there and ends the watch (every window
        // closes); with one, each run reads what arrived since the last (Spark's incremental
        // batch), and the watch waits in the checkpoint for the next run.
        let one_off = available_now && mb.checkpoint_dir.is_none();
        let termination = match (available_now, one_off) {
            (_, true) => Termination::after_iterations(1),
            (true, false) => Termination::each_run(),
            (false, _) => Termination::never(),
        };
        let watch = Continuously::new(Duration::from_millis(args.events_dir_poll_ms), termination).hold_watermark(true);
        let files = p.apply("EventFiles", FileIO::match_pattern(dir.clone()).watching(watch));
        files.apply("Events", read_event_files(&args.on_malformed).clean_source(args.events_dir_clean.clone()))
    } else if let Some(file) = args.events_file.as_ref().filter(|f| json_lines(f)) {
        p.apply("Events", ReadEventsFile::from(file.clone()).on_malformed(args.on_malformed.clone()))
    } else if let Some(pattern) = args.events_glob.as_ref().filter(|f| json_lines(f)) {
        p.apply("Events", ReadEventsFile::from_glob(pattern.clone()).on_malformed(args.on_malformed.clone()))
    } else if let Some(file) = args.events_file.as_ref().or(args.events_glob.as_ref()) {
        // CSV and Parquet: a plain name is matched as it is, even with glob characters.
        let pattern = if args.events_file.is_some() { glob::Pattern::escape(file) } else { file.clone() };
        let files = p.apply(
            "EventFiles",
            FileIO::match_pattern(pattern).with_empty_match_treatment(EmptyMatchTreatment::Disallow),
        );
        files.apply("Events", read_event_files(&args.on_malformed))
    } else if let Some(topic) = &args.events_kafka {
        let trigger = options.get::<weir::core::streaming::StreamingOptions>().trigger;
        let bounded = !args.streaming || trigger == weir::core::streaming::StreamingTrigger::AvailableNow;
        crate::kafka::read_events(p, topic, bounded, &args.on_malformed)?
    } else if args.streaming {
        p.apply("Events", ReadUnbounded::from(UnboundedEventSource::new(config)))
    } else {
        p.apply("Events", Read::from(BoundedEventSource::new(config)))
    };
    Ok((events, events_file.cloned()))
}

/// Why the model does not decide `query`'s results in this run, if it does not. The queries
/// built on Beam's `WinningBids` (4, 6 and 9) give each bid a window of twice the expected
/// auction duration, merged into its auction's window if the auction comes while the bid's
/// window is open; in batch every bid is there when the windows merge. The split generators'
/// timelines run side by side, so a bid early in one timeline may be for an auction late in
/// the one before it (Beam's generator picks bids' auctions near their event ids): in streaming
/// that bid's window fires alone once the watermark passes it, as it does on Beam's runners,
/// and which bids do depends on where the batches end. With one generator, or all events in
/// one batch, the model holds.
fn order_dependent(args: &Args, query: crate::QueryName, config: &NexmarkConfig) -> Option<String> {
    let batch = args.pipeline.get::<weir::core::streaming::StreamingOptions>().max_batch_size as i64;
    let batches = config.num_events == 0 || config.num_events > batch;
    (args.streaming && query.builds_on_winning_bids() && config.num_event_generators > 1 && batches).then(|| {
        format!(
            "in streaming over {} generators' side-by-side timelines, in more than one batch, which bids \
             meet their auctions depends on where the batches end (the model holds with \
             --num-event-generators 1)",
            config.num_event_generators
        )
    })
}

/// Applies `target` to `events`: the query and, as asked, its results written and checked
/// against its model; whether a model checks them.
fn apply_target(
    args: &Args,
    config: &NexmarkConfig,
    target: Target,
    events: &PCollection<Event>,
    events_file: Option<&String>,
) -> Result<bool, String> {
    let mut modelled = false;
    match target {
        Target::GeneratorOnly => {
            queries::monitor_events(target.name(), events);
        }
        Target::Query(query) => {
            let options = QueryOptions { output_path: args.output_path.clone(), max_num_workers: args.max_num_workers };
            let results = queries::apply_with(query, config, &options, events);
            let model = if args.check {
                // The model runs over the events the source produces: Beam's models see one
                // unsplit timeline, but the pipeline reads `numEventGenerators` split ones. An
                // events file's events are those in it, in file order (a directory's, those
                // there when the run starts).
                let seen: Vec<Event> = match events_file {
                    Some(f) => events_in_files(f, args.events_file.is_some())?,
                    None => crate::generator::split_events(config).map(|n| n.event).collect(),
                };
                let (model, why) = match order_dependent(args, query, config) {
                    Some(why) => (None, why),
                    None => (expected_for(query, config, &seen), "no model to check against".to_string()),
                };
                if model.is_none() {
                    eprintln!("{}: {why}; --check skipped", query.name());
                }
                modelled = model.is_some();
                model
            } else {
                None
            };
            if args.results.is_none() && args.results_kafka.is_none() && model.is_none() {
                // A benchmark run: results are counted, not rendered (Beam's DEVNULL sink).
                results.discard();
            } else {
                let records = results.records();
                if let Some(dir) = &args.results {
                    let dir = dir.join(query.name());
                    let dir = dir.to_string_lossy().to_string();
                    let lines = records.apply("ToLines", ParDo::of(ToLine { query: query.name().to_string() }));
                    if args.results_format == "parquet" {
                        write_parquet_results(lines, dir, args.overwrite)?;
                    } else {
                        lines.apply("WriteResults", WriteFiles::to(dir, ResultLines).overwrite(args.overwrite));
                    }
                }
                if let Some(topic) = &args.results_kafka {
                    let lines = records.apply("ToKafkaLines", ParDo::of(ToLine { query: query.name().to_string() }));
                    crate::kafka::write_values(lines, topic)?;
                }
                if let Some(model) = model {
                    let rule = comparison(query);
                    assert_that(&records).satisfies(move |actual: Vec<ResultRecord>| compare(rule, &actual, &model));
                }
            }
        }
    }
    Ok(modelled)
}

/// `--results-format parquet`: the result lines as Parquet rows in `dir`.
#[cfg(feature = "parquet")]
fn write_parquet_results(lines: PCollection<ResultLine>, dir: String, overwrite: bool) -> Result<(), String> {
    let rows = lines.apply(
        "ToRows",
        weir_sdk::transforms::map::Map::new(|l: ResultLine| ResultRow {
            query: l.query,
            timestamp: l.timestamp,
            value: l.value,
        }),
    );
    rows.apply("WriteResults", weir_parquet::ParquetIO::write::<ResultRow>(dir).overwrite(overwrite));
    Ok(())
}

/// Without the `parquet` feature: refused (see [`crate::event_files::require_parquet`]).
#[cfg(not(feature = "parquet"))]
fn write_parquet_results(_: PCollection<ResultLine>, _: String, _: bool) -> Result<(), String> {
    crate::event_files::require_parquet()
}

/// A progress snapshot every [`SNAPSHOT_PERIOD`].
type Snapshots = Vec<ProgressSnapshot>;

/// Waits for the run to end, with a progress bar of `total` events, draining on SIGUSR1 and
/// stopping on SIGINT or SIGTERM: its final state, the signal that stopped it, and its
/// progress snapshots.
fn watch(
    result: &dyn weir_sdk::runner::PipelineResult,
    ns: &str,
    total: Option<u64>,
    start: Instant,
) -> Result<(PipelineState, Option<i32>, Snapshots), String> {
    let bar = progress_bar(total, ns);
    let mut snapshots = Vec::new();
    let mut interrupted = None;
    let state = loop {
        let state = result.wait_until_finish(Some(Duration::from_millis(200))).map_err(|e| e.to_string())?;
        if state.is_terminal() {
            break state;
        }
        if signals::drain_requested() {
            bar.suspend(|| eprintln!("nexmark: SIGUSR1 received: draining (every window fires, then the query ends)"));
            result.drain().map_err(|e| e.to_string())?;
        }
        if let (None, Some(sig)) = (interrupted, Interrupt::get().received()) {
            interrupted = Some(sig);
            bar.suspend(|| {
                eprintln!(
                    "nexmark: {} received: finishing the current batch, then stopping (send it again to stop at once)",
                    signals::name(sig)
                )
            });
            result.stop().map_err(|e| e.to_string())?;
        }
        let m = result.metrics().query_metrics(&MetricsFilter::all().in_namespace(ns));
        let events = counter(&m, ns, "event.elements");
        let elapsed = start.elapsed();
        bar.set_position(events.max(0) as u64);
        bar.set_message(format!("{:.0} events/s", events as f64 / elapsed.as_secs_f64().max(1e-3)));
        if elapsed >= SNAPSHOT_PERIOD * (snapshots.len() as u32 + 1) {
            let runtime_sec =
                dist(&m, ns, "event.startTime").map_or(0.0, |d| (weir_sdk::time::now_millis() - d.min) as f64 / 1000.0);
            snapshots.push(ProgressSnapshot {
                sec_since_start: elapsed.as_secs_f64(),
                runtime_sec,
                num_events: events,
                num_results: counter(&m, ns, "result.elements"),
            });
        }
    };
    bar.finish_and_clear();
    Ok((state, interrupted, snapshots))
}

/// What a finished run leaves for its perf record.
struct Finished<'a> {
    result: &'a dyn weir_sdk::runner::PipelineResult,
    launched: i64,
    wall: f64,
    interrupted: Option<i32>,
    snapshots: Snapshots,
    events_file: Option<&'a String>,
}

/// The run's perf record, from its metrics (Beam's `NexmarkPerf`).
fn perf_of(args: &Args, target: Target, options: &PipelineOptions, run: Finished<'_>) -> NexmarkPerf {
    let Finished { result, launched, wall, interrupted, snapshots, events_file } = run;
    let ns = target.name();
    let mut errors = Vec::new();
    if let Some(sig) = interrupted {
        errors.push(format!("stopped early by {}: the results are those of the batches committed", signals::name(sig)));
    }
    let malformed = counter(
        &result.metrics().query_metrics(&MetricsFilter::all().named("nexmark", "malformedEvents")),
        "nexmark",
        "malformedEvents",
    );
    if malformed > 0 {
        let file = events_file.map(String::as_str).unwrap_or("the events file");
        errors.push(format!("{malformed} malformed event line(s) in {file} skipped (--on-malformed)"));
    }
    // A Kafka read counts the records it skipped as its own.
    if let Some(topic) = &args.events_kafka {
        let filter = MetricsFilter::all().named("kafka", "bad-records");
        let skipped = counter(&result.metrics().query_metrics(&filter), "kafka", "bad-records");
        if skipped > 0 {
            errors.push(format!("{skipped} malformed event record(s) in {topic} skipped (--on-malformed)"));
        }
    }
    let m = result.metrics().query_metrics(&MetricsFilter::all().in_namespace(ns));
    let num_events = counter(&m, ns, "event.elements");
    let event_bytes = counter(&m, ns, "event.bytes");
    let num_results = counter(&m, ns, "result.elements");
    let result_bytes = counter(&m, ns, "result.bytes");
    let event_start = dist(&m, ns, "event.startTime").map(|d| d.min);
    let event_end = dist(&m, ns, "event.endTime").map(|d| d.max);
    let result_start = dist(&m, ns, "result.startTime").map(|d| d.min);
    let result_end = dist(&m, ns, "result.endTime").map(|d| d.max);
    let secs = |ms: i64| ms as f64 / 1000.0;
    let runtime_sec = match (event_start, event_end.max(result_end)) {
        (Some(s), Some(e)) if e > s => secs(e - s),
        _ => wall,
    }
    .max(1e-3);
    let per_sec = |n: i64| n as f64 / runtime_sec;
    let time_dilation = match (
        dist(&m, ns, "result.startTimestamp").map(|d| d.min),
        dist(&m, ns, "result.endTimestamp").map(|d| d.max),
    ) {
        (Some(s), Some(e)) => secs(e - s) / runtime_sec,
        _ => -1.0,
    };
    let perf = NexmarkPerf {
        runtime_sec,
        num_events,
        // Streaming runs long enough report Beam's steady-state rate instead.
        events_per_sec: if args.streaming {
            steady_state_events_per_sec(&snapshots).unwrap_or(per_sec(num_events))
        } else {
            per_sec(num_events)
        },
        event_bytes_per_sec: per_sec(event_bytes),
        num_results: if target == Target::GeneratorOnly { -1 } else { num_results },
        results_per_sec: per_sec(num_results),
        result_bytes_per_sec: per_sec(result_bytes),
        startup_delay_sec: event_start.map_or(-1.0, |s| secs(s - launched)),
        processing_delay_sec: match (event_start, result_start) {
            (Some(e), Some(r)) => secs(r - e),
            _ => -1.0,
        },
        shutdown_delay_sec: result_end.or(event_end).map_or(-1.0, |e| secs(weir_sdk::time::now_millis() - e)),
        time_dilation,
        errors,
        snapshots,
        query: target.name().to_string(),
        runner: options.runner.clone(),
        mode: if args.streaming { "streaming" } else { "batch" }.to_string(),
        parallelism: options.get::<weir::microbatch::MicroBatchOptions>().parallelism,
    };
    perf
}

fn short_string(config: &NexmarkConfig, target: Target) -> String {
    let mut parts = vec![format!("query:{}", target.name())];
    parts.extend(changed_fields(config).into_iter().filter(|(k, _)| k != "query").map(|(k, v)| format!("{k}:{v}")));
    parts.join("; ")
}

fn read_baseline(path: &PathBuf) -> Result<BTreeMap<(String, String, String), NexmarkPerf>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("--baseline-file {}: {e}", path.display()))?;
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let perf: NexmarkPerf = serde_json::from_str(line)
            .map_err(|e| format!("--baseline-file {} line {}: not a perf record: {e}", path.display(), i + 1))?;
        out.insert((perf.query.clone(), perf.runner.clone(), perf.mode.clone()), perf);
    }
    Ok(out)
}

fn pct(now: f64, base: f64) -> String {
    if base <= 0.0 {
        String::new()
    } else {
        format!("{:+.1}%", (now - base) / base * 100.0)
    }
}

/// Why the launcher stopped without running everything.
enum Failure {
    /// Bad flags or files given on the command line: exit status 2.
    Usage(String),
    /// Something failed while running: exit status 1.
    Runtime(String),
}

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Failure::Usage(s)
    }
}

impl From<&str> for Failure {
    fn from(s: &str) -> Self {
        Failure::Usage(s.to_string())
    }
}

/// Runs the launcher with `args` (no program name); returns the process exit code: 0 when every
/// configuration ran, 1 when one failed, 2 for bad usage, 128 + the signal when stopped by
/// SIGINT or SIGTERM. `--help` and `--version` print to standard output and return 0.
pub fn run(args: Vec<String>) -> i32 {
    weir::register_with_logging();
    // SIGUSR1 drains from the start (its default action would end the process).
    signals::drain_requested();
    match launch(args) {
        Ok(code) => code,
        Err(Failure::Usage(e)) => {
            eprintln!("nexmark: {e}");
            2
        }
        Err(Failure::Runtime(e)) => {
            eprintln!("nexmark: {e}");
            1
        }
    }
}

fn launch(raw: Vec<String>) -> Result<i32, Failure> {
    let (overrides, rest, _) = split_config_overrides(raw)?;
    let args = match Args::try_parse_from(rest) {
        Ok(args) => args,
        Err(e) if matches!(e.kind(), clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion) => {
            print!("{}", e.render());
            return Ok(0);
        }
        Err(e) => return Err(Failure::Usage(e.render().to_string().trim().to_string())),
    };
    // Installed before anything runs, so a signal during a run stops it gracefully.
    Interrupt::get();
    let kafka_export = args.export_events.as_ref().is_some_and(|p| p.to_string_lossy().starts_with("kafka://"));
    if args.events_kafka.is_some() || args.results_kafka.is_some() || kafka_export {
        crate::kafka::require().map_err(Failure::Usage)?;
    }
    // What this build leaves out is refused before anything runs, naming how to build it in.
    if args.pipeline.runner == "timely" {
        crate::require_feature(cfg!(feature = "timely"), "the timely runner", "timely").map_err(Failure::Usage)?;
    }
    let checkpoint = args.pipeline.get::<weir::core::streaming::StreamingOptions>().checkpoint_dir.clone();
    if checkpoint.is_some_and(|c| c.starts_with("s3://")) {
        crate::require_feature(cfg!(feature = "s3"), "S3 checkpoints", "s3").map_err(Failure::Usage)?;
    }
    let parquet_path = |p: &str| p.to_ascii_lowercase().ends_with(".parquet");
    let export = args.export_events.as_ref().map(|p| p.to_string_lossy().to_string());
    let dir = args.events_dir.as_ref().map(|p| p.to_string_lossy().to_string());
    let named = [args.events_file.clone(), args.events_glob.clone(), dir, export];
    if args.results_format == "parquet" || named.iter().flatten().any(|p| parquet_path(p)) {
        crate::event_files::require_parquet().map_err(Failure::Usage)?;
    }
    if let Some(file) = &args.events_file {
        if !std::path::Path::new(file).is_file() {
            return Err(Failure::Usage(format!("--events-file {file}: no such file")));
        }
    }
    if !args.report_history.is_empty() {
        return history(&args);
    }
    if let Some(path) = &args.export_events {
        let config = apply_overrides(&NexmarkConfig::default(), &overrides)?;
        config.validate().map_err(|e| e.to_string())?;
        let shown = path.display().to_string();
        let n = if shown.starts_with("kafka://") {
            let topic: crate::kafka::KafkaTopic =
                shown.parse().map_err(|e| Failure::Usage(format!("--export-events: {e}")))?;
            crate::kafka::export_events(&config, &topic)
                .map_err(|e| Failure::Runtime(format!("--export-events {shown}: {e}")))?
        } else {
            export_events(&config, path).map_err(|e| Failure::Runtime(format!("--export-events {shown}: {e}")))?
        };
        println!("wrote {n} events to {shown}");
        return Ok(0);
    }
    let confs = configurations(&args, &overrides)?;
    let baseline = args.baseline_file.as_ref().map(read_baseline).transpose()?;
    let started = weir_sdk::time::now_millis();
    let (runs, failed, interrupted) = run_all(&args, &confs)?;
    print_summary(started, &runs, baseline.as_ref());
    if let Some(path) = &args.report {
        write_report(path, started, &runs, baseline.as_ref(), args.report_threshold)?;
    }
    Ok(match interrupted {
        Some(sig) => 128 + sig,
        None if failed => 1,
        None => 0,
    })
}

/// `--report-history`: the HTML history of the perf files given, written to `--report`.
fn history(args: &Args) -> Result<i32, Failure> {
    let mut files = Vec::new();
    for f in &args.report_history {
        let text =
            std::fs::read_to_string(f).map_err(|e| Failure::Usage(format!("--report-history {}: {e}", f.display())))?;
        let mut perfs = Vec::new();
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            perfs.push(serde_json::from_str::<NexmarkPerf>(line).map_err(|e| {
                Failure::Usage(format!("--report-history {} line {}: not a perf record: {e}", f.display(), i + 1))
            })?);
        }
        files.push((f.display().to_string(), perfs));
    }
    let html = crate::report::history_report(&files);
    let path = args.report.as_ref().ok_or_else(|| Failure::Usage("--report-history needs --report FILE".into()))?;
    weir_sdk::io::atomic::write_atomic(path, html.as_bytes())
        .map_err(|e| Failure::Runtime(format!("--report {}: {e}", path.display())))?;
    println!("history of {} runs written to {}", files.len(), path.display());
    Ok(0)
}

/// The configurations to run: the suite's, narrowed to `--query` (less `--skip-queries`), each
/// overridden by the configuration flags, and the generator alone first with
/// `--generator-only`.
fn configurations(args: &Args, overrides: &NexmarkConfig) -> Result<Vec<(NexmarkConfig, Target)>, Failure> {
    let suite = Suite::parse(&args.suite).ok_or_else(|| {
        format!(
            "unknown suite '{}'; known: DEFAULT, SMOKE, STRESS, FULL_THROTTLE, SMALL_LOGGER, LONG_RUNNING_LOGGER",
            args.suite
        )
    })?;
    let queries: Vec<QueryName> = args
        .query
        .iter()
        .map(|q| {
            QueryName::parse(q)
                .ok_or_else(|| format!("unknown query '{q}'; give a number 0-16 or a name such as HIGHEST_BID"))
        })
        .collect::<Result<_, _>>()?;
    let skipped: Vec<QueryName> = args
        .skip_queries
        .iter()
        .map(|q| QueryName::parse(q).ok_or_else(|| format!("unknown query '{q}' in --skip-queries")))
        .collect::<Result<_, _>>()?;
    // The configurations: the suite's, narrowed to --query, each overridden by the flags.
    let mut confs: Vec<(NexmarkConfig, Target)> = Vec::new();
    for base in suite.configurations() {
        let config = apply_overrides(&base, overrides)?;
        config.validate().map_err(|e| e.to_string())?;
        let suite_query = base.query;
        let targets: Vec<QueryName> = match (suite_query, queries.is_empty()) {
            (Some(q), true) => vec![q],
            (Some(q), false) => queries.iter().copied().filter(|x| *x == q).collect(),
            (None, false) => queries.clone(),
            (None, true) if args.generator_only => Vec::new(),
            (None, true) => return Err("the DEFAULT suite needs --query (a number 0-16 or a name)".into()),
        };
        for q in targets.into_iter().filter(|q| !skipped.contains(q)) {
            confs.push((NexmarkConfig { query: Some(q), ..config.clone() }, Target::Query(q)));
        }
    }
    if args.generator_only {
        let config = apply_overrides(&suite.configurations()[0], overrides)?;
        confs.insert(0, (NexmarkConfig { query: None, ..config }, Target::GeneratorOnly));
    }
    if confs.is_empty() {
        return Err(format!("no configuration of suite {} matches the given --query", args.suite).into());
    }
    // Again with each one's query: some ranges are the query's (sliding windows).
    for (config, _) in &confs {
        config.validate().map_err(|e| e.to_string())?;
    }
    // One batch of everything available would never end over an endless generator that is not
    // rate limited: all of its events are available at once.
    let once = args.pipeline.get::<weir::core::streaming::StreamingOptions>().trigger
        == weir::core::streaming::StreamingTrigger::Once;
    let generated = args.events_file.is_none()
        && args.events_glob.is_none()
        && args.events_dir.is_none()
        && args.events_kafka.is_none();
    let endless = confs.iter().any(|(c, _)| c.num_events == 0 && !c.is_rate_limited);
    if args.streaming && once && generated && endless {
        return Err("--num-events 0 (endless events, not rate limited) with --trigger once: every event is available \
                    at once, so the one batch would never end; give --num-events, --is-rate-limited or another --trigger"
            .into());
    }
    Ok(confs)
}

/// Runs every configuration in turn (none after a drain or a stop): the runs, whether one
/// failed, and the signal that stopped them.
fn run_all(args: &Args, confs: &[(NexmarkConfig, Target)]) -> Result<(Vec<Run>, bool, Option<i32>), Failure> {
    let mut runs = Vec::new();
    let mut failed = false;
    let mut interrupted = None;
    for (config, target) in confs {
        let conf = short_string(config, *target);
        if signals::drained() {
            runs.push(Run {
                conf,
                perf: None,
                note: Some("not run: the run was drained (SIGUSR1)".into()),
                check: None,
            });
            continue;
        }
        if let Some(sig) = interrupted.or_else(|| Interrupt::get().received()) {
            interrupted = Some(sig);
            runs.push(Run {
                conf,
                perf: None,
                note: Some(format!("not run: stopped by {}", signals::name(sig))),
                check: None,
            });
            continue;
        }
        eprintln!("running {conf} ({}, {})", args.pipeline.runner, if args.streaming { "streaming" } else { "batch" });
        match run_one(args, config, *target, &args.pipeline) {
            Ok(outcome) => {
                let perf = outcome.perf;
                if let Some(file) = &args.perf_file {
                    let line = serde_json::to_string(&perf).map_err(|e| Failure::Runtime(e.to_string()))?;
                    let mut f = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(file)
                        .map_err(|e| Failure::Runtime(format!("--perf-file {}: {e}", file.display())))?;
                    writeln!(f, "{line}")
                        .map_err(|e| Failure::Runtime(format!("--perf-file {}: {e}", file.display())))?;
                }
                interrupted = interrupted.or(outcome.interrupted);
                use crate::report::Verdict;
                let check = match (args.check, outcome.modelled, perf.errors.is_empty()) {
                    (false, ..) => None,
                    (true, false, _) => Some(Verdict::NoModel),
                    (true, true, true) => Some(Verdict::Passed),
                    (true, true, false) => Some(Verdict::Failed),
                };
                runs.push(Run { conf, perf: Some(perf), note: None, check });
            }
            Err(e) => {
                failed = true;
                runs.push(Run { conf, perf: None, note: Some(format!("error: {e}")), check: None });
            }
        }
    }

    Ok((runs, failed, interrupted))
}

/// Prints Beam's summary of the runs: the configurations, the performance (beside the baseline
/// when given) and the errors.
fn print_summary(started: i64, runs: &[Run], baseline: Option<&BTreeMap<(String, String, String), NexmarkPerf>>) {
    println!();
    println!(
        "Run started {} and ran for {:.1}s",
        weir_sdk::time::iso8601(started),
        (weir_sdk::time::now_millis() - started) as f64 / 1000.0
    );
    println!();
    println!("Configurations:");
    println!("  Conf  Description");
    for (i, r) in runs.iter().enumerate() {
        println!("  {i:04}  {}", r.conf);
    }
    println!();
    println!("Performance:");
    let with_base = baseline.is_some();
    if with_base {
        println!(
            "  {:>4}  {:>12}  {:>12}  {:>12}  {:>12}  {:>12}  {:>12}",
            "Conf", "Runtime(sec)", "(Baseline)", "Events(/sec)", "(Baseline)", "Results", "(Baseline)"
        );
    } else {
        println!("  {:>4}  {:>12}  {:>12}  {:>12}", "Conf", "Runtime(sec)", "Events(/sec)", "Results");
    }
    for (i, r) in runs.iter().enumerate() {
        match (&r.perf, &r.note) {
            (Some(perf), _) => {
                let results = if perf.num_results < 0 { String::new() } else { perf.num_results.to_string() };
                if let Some(base) = baseline {
                    let b = base.get(&(perf.query.clone(), perf.runner.clone(), perf.mode.clone()));
                    let (rt, ev, res) = match b {
                        Some(b) => (
                            pct(perf.runtime_sec, b.runtime_sec),
                            pct(perf.events_per_sec, b.events_per_sec),
                            format!("{:+}", perf.num_results - b.num_results),
                        ),
                        None => ("*none*".into(), "*none*".into(), "*none*".into()),
                    };
                    println!(
                        "  {i:04}  {:>12.1}  {rt:>12}  {:>12.1}  {ev:>12}  {results:>12}  {res:>12}",
                        perf.runtime_sec, perf.events_per_sec
                    );
                } else {
                    println!("  {i:04}  {:>12.1}  {:>12.1}  {results:>12}", perf.runtime_sec, perf.events_per_sec);
                }
            }
            (None, Some(note)) => println!("  {i:04}  *** {note} ***"),
            (None, None) => {}
        }
    }
    let errors: Vec<(usize, &String)> = runs
        .iter()
        .enumerate()
        .flat_map(|(i, r)| r.perf.iter().flat_map(move |p| p.errors.iter().map(move |e| (i, e))))
        .collect();
    if !errors.is_empty() {
        println!();
        println!("Errors:");
        for (i, e) in errors {
            println!("  {i:04}  {e}");
        }
    }
}

/// Writes the HTML report of the runs to `path`.
fn write_report(
    path: &std::path::Path,
    started: i64,
    runs: &[Run],
    baseline: Option<&BTreeMap<(String, String, String), NexmarkPerf>>,
    threshold: f64,
) -> Result<(), Failure> {
    let rows: Vec<crate::report::ReportRow> = runs
        .iter()
        .map(|r| crate::report::ReportRow {
            conf: r.conf.clone(),
            perf: r.perf.clone(),
            note: r.note.clone(),
            check: r.check,
        })
        .collect();
    let html = crate::report::run_report(&weir_sdk::time::iso8601(started), &rows, baseline, threshold);
    weir_sdk::io::atomic::write_atomic(path, html.as_bytes())
        .map_err(|e| Failure::Runtime(format!("--report {}: {e}", path.display())))?;
    eprintln!("report written to {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_flags_override_every_field() {
        let args: Vec<String> = [
            "--num-events",
            "1000",
            "--rate-shape",
            "square",
            "--is-rate-limited",
            "--runner",
            "direct",
            "--auction-skip=7",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let (config, rest, overridden) = split_config_overrides(args).unwrap();
        assert!(overridden);
        assert_eq!(config.num_events, 1000);
        assert_eq!(config.rate_shape, crate::config::RateShape::Square);
        assert!(config.is_rate_limited);
        assert_eq!(config.auction_skip, 7);
        assert_eq!(rest, ["--runner", "direct"]);
        let err = split_config_overrides(vec!["--num-events".into(), "many".into()]).unwrap_err();
        assert!(err.contains("--num-events") && err.contains("many"), "{err}");
        let err = split_config_overrides(vec!["--rate-shape".into(), "triangle".into()]).unwrap_err();
        assert!(err.contains("TRIANGLE"), "{err}");
    }

    #[test]
    fn overrides_apply_on_top_of_suite_configurations() {
        let suite = Suite::Smoke.configurations();
        let over = NexmarkConfig { num_event_generators: 1, ..NexmarkConfig::default() };
        let q4 = apply_overrides(&suite[4], &over).unwrap();
        assert_eq!((q4.num_events, q4.num_event_generators), (10_000, 1));
    }

    #[test]
    fn result_lines_are_beams_objects_in_json_and_text_in_the_coder() {
        let line = ResultLine { query: "SELECTION".into(), timestamp: 5, value: "{\"auction\":1,\"price\":2}".into() };
        let mut written = String::new();
        line.write_json(&mut written);
        assert_eq!(written, serde_json::to_string(&line).unwrap());
        let json = serde_json::to_string(&line).unwrap();
        assert_eq!(json, "{\"query\":\"SELECTION\",\"timestamp\":5,\"value\":{\"auction\":1,\"price\":2}}");
        assert_eq!(serde_json::from_str::<ResultLine>(&json).unwrap(), line);
        use weir_sdk::coders::{Coder, ElementCoder};
        let coder = ElementCoder::<ResultLine>::new();
        let mut bytes = Vec::new();
        coder.encode(&line, &mut bytes).unwrap();
        assert_eq!(coder.decode_outer(&bytes).unwrap(), line);
    }
}
