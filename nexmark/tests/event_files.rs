//! Events files and results in the formats other tools write and read: DuckDB and pyarrow turn
//! the JSON-lines export into CSV and Parquet, Weir reads them (the same events, and every query
//! checked against its model), and DuckDB and pyarrow read the JSON-lines and Parquet results
//! Weir writes back, with the same contents.
//!
//! Needs a Python with `duckdb` and `pyarrow` (`$WEIR_PYTHON`, or `python3`): `.ci/run` makes a
//! virtual environment with them. Without one the tests are skipped, except under CI.

use std::path::Path;
use std::process::Command;
use weir_nexmark::event_files::{EventFiles, EventsFormat};
use weir_nexmark::launcher::run;
use weir_nexmark::{Event, NexmarkConfig};
use weir_sdk::io::file_io::{match_files, EmptyMatchTreatment};
use weir_sdk::io::read_files::{FileFormat, ReadFiles};
use weir_sdk::splittable::OffsetRange;

/// A Python that has duckdb and pyarrow, or `None` (the test is skipped; under CI it fails).
fn python() -> Option<String> {
    let python = std::env::var("WEIR_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&python).args(["-c", "import duckdb, pyarrow"]).status().is_ok_and(|s| s.success());
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "{python} lacks duckdb or pyarrow (.ci/run installs them)");
        eprintln!("SKIPPED: {python} lacks duckdb or pyarrow (pip install duckdb pyarrow)");
        return None;
    }
    Some(python)
}

fn py(python: &str, dir: &Path, script: &str) -> String {
    let out = Command::new(python).current_dir(dir).args(["-c", script]).output().expect("python runs");
    assert!(out.status.success(), "python failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// Every event of the file at `path`, read in splits.
fn events_of(path: &Path) -> Vec<Event> {
    let files = match_files(&path.to_string_lossy(), EmptyMatchTreatment::Disallow).unwrap();
    let mut all = Vec::new();
    for file in files {
        let units = EventFiles::default().units(&file).unwrap();
        let split = if EventsFormat::of(&file.path) == EventsFormat::Parquet { 1 } else { 50_000 };
        for r in OffsetRange::new(0, units).split(split) {
            let read = ReadFiles::of(EventFiles::default()).process_directly(file.clone(), r, 1_000).unwrap();
            all.extend(read.into_iter().map(|(e, _)| e));
        }
    }
    all
}

#[test]
fn csv_and_parquet_made_by_duckdb_and_pyarrow_hold_the_same_events_and_answer_every_query() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let n = "6000";
    assert_eq!(run(args(&["--export-events", d.join("e.jsonl").to_str().unwrap(), "--num-events", n])), 0);
    py(
        &python,
        d,
        "import duckdb, pyarrow.json as pj, pyarrow.parquet as pq, pyarrow.csv as pc\n\
         duckdb.sql(\"COPY (SELECT * FROM read_json_auto('e.jsonl')) TO 'duck.parquet' (FORMAT parquet, ROW_GROUP_SIZE 2048)\")\n\
         duckdb.sql(\"COPY (SELECT * FROM read_json_auto('e.jsonl')) TO 'duck.csv' (HEADER)\")\n\
         t = pj.read_json('e.jsonl')\n\
         pq.write_table(t, 'arrow.parquet', row_group_size=1000)\n\
         pc.write_csv(t, 'arrow.csv')\n",
    );
    let config = NexmarkConfig { num_events: 6_000, ..NexmarkConfig::default() };
    let generated: Vec<Event> = weir_nexmark::generator::split_events(&config).map(|n| n.event).collect();
    for name in ["e.jsonl", "duck.csv", "duck.parquet", "arrow.csv", "arrow.parquet"] {
        let path = d.join(name);
        let events = events_of(&path);
        assert!(events == generated, "{name}: {} events, not the {} generated", events.len(), generated.len());
        // Every query of the suite, checked against its model over these events.
        let file = path.to_str().unwrap();
        let code = run(args(&["--events-file", file, "--suite", "smoke", "--check"]));
        assert_eq!(code, 0, "{name}");
    }
    // Split over workers of the timely runner too.
    let file = d.join("duck.parquet");
    let code = run(args(&[
        "--events-file",
        file.to_str().unwrap(),
        "--runner",
        "timely",
        "--workers",
        "2",
        "--query",
        "5",
        "--query",
        "7",
        "--check",
    ]));
    assert_eq!(code, 0);
}

#[test]
fn results_in_json_lines_and_parquet_read_back_by_duckdb_and_pyarrow() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for format in ["jsonl", "parquet"] {
        let out = d.join(format);
        let code = run(args(&[
            "--query",
            "0",
            "--query",
            "5",
            "--query",
            "7",
            "--num-events",
            "5000",
            "--results",
            out.to_str().unwrap(),
            "--results-format",
            format,
        ]));
        assert_eq!(code, 0, "{format}");
    }
    // Each tool's view of each format: the sorted (query, timestamp, value) triples.
    let script = "import duckdb, json, glob, pyarrow.parquet as pq\n\
         def norm(q, t, v): return (q, int(t), json.dumps(json.loads(v) if isinstance(v, str) else v, sort_keys=True))\n\
         duck_j = sorted(norm(q, t, v) for q, t, v in duckdb.sql(\"SELECT query, timestamp, CAST(value AS VARCHAR) FROM read_json('jsonl/*/*.jsonl', format='newline_delimited', columns={'query': 'VARCHAR', 'timestamp': 'BIGINT', 'value': 'JSON'})\").fetchall())\n\
         duck_p = sorted(norm(q, t, v) for q, t, v in duckdb.sql(\"SELECT query, timestamp, value FROM 'parquet/*/*.parquet'\").fetchall())\n\
         arrow_p = []\n\
         for f in glob.glob('parquet/*/*.parquet'):\n    t = pq.read_table(f).to_pydict()\n    arrow_p += [norm(q, ts, v) for q, ts, v in zip(t['query'], t['timestamp'], t['value'])]\n\
         arrow_p.sort()\n\
         assert duck_j == duck_p, (len(duck_j), len(duck_p))\n\
         assert arrow_p == duck_p, (len(arrow_p), len(duck_p))\n\
         print(len(duck_j), len({q for q, _, _ in duck_j}))\n";
    let counts = py(&python, d, script);
    // PASSTHROUGH's 5000, HOT_ITEMS' and MAX_PRICE's results, from three queries.
    let (rows, queries) = counts.trim().split_once(' ').unwrap();
    assert!(rows.parse::<usize>().unwrap() > 5_000, "{counts}");
    assert_eq!(queries, "3");
}

/// The PASSTHROUGH results committed under `out`: the events' JSON, sorted.
fn committed_events(out: &Path) -> Vec<String> {
    let dir = out.join("PASSTHROUGH");
    let Ok(files) = weir_sdk::io::file_sink::committed_files(&dir.to_string_lossy()) else { return Vec::new() };
    let mut values = Vec::new();
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else { continue };
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            values.push(v["value"].to_string());
        }
    }
    values.sort();
    values
}

/// Files appear in a watched directory, some while the query runs and some while it is down;
/// the query is SIGKILLed at random points and restarted from its checkpoint. In the end every
/// event of every file is in the committed results exactly once, and the files read are
/// archived (`--events-dir-clean`).
#[test]
fn a_watched_directory_is_read_exactly_once_across_kills() {
    use rand::{Rng, SeedableRng};
    let dir = tempfile::tempdir().unwrap();
    let (input, staging, checkpoint, out) =
        (dir.path().join("in"), dir.path().join("staging"), dir.path().join("ck"), dir.path().join("out"));
    std::fs::create_dir_all(&input).unwrap();
    std::fs::create_dir_all(&staging).unwrap();
    let config = NexmarkConfig { num_events: 4_800, ..NexmarkConfig::default() };
    let events: Vec<Event> = weir_nexmark::generator::split_events(&config).map(|n| n.event).collect();
    // 16 files of 300 events, in all three formats; each written aside, then moved in whole.
    let formats = [("jsonl", EventsFormat::JsonLines), ("csv", EventsFormat::Csv), ("parquet", EventsFormat::Parquet)];
    let mut files = Vec::new();
    for (i, chunk) in events.chunks(300).enumerate() {
        let (ext, format) = formats[i % 3];
        let path = staging.join(format!("events-{i:02}.{ext}"));
        let mut f = std::fs::File::create(&path).unwrap();
        weir_nexmark::event_files::write_events(format, chunk.iter().cloned(), &mut f).unwrap();
        files.push(path);
    }
    let mut expected: Vec<String> =
        events.iter().map(|e| serde_json::from_str::<serde_json::Value>(&e.to_json()).unwrap().to_string()).collect();
    expected.sort();
    let archive = dir.path().join("archive");
    let clean = format!("archive={}", archive.display());
    let start = || {
        Command::new(env!("CARGO_BIN_EXE_nexmark"))
            .args(["--query", "0", "--streaming", "--trigger", "processing-time", "--trigger-interval-ms", "50"])
            .args(["--events-dir-clean", &clean])
            .args(["--events-dir-poll-ms", "50", "--events-dir"])
            .arg(&input)
            .arg("--checkpoint-dir")
            .arg(&checkpoint)
            .arg("--results")
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the launcher starts")
    };
    let move_in = |f: &Path| std::fs::rename(f, input.join(f.file_name().unwrap())).unwrap();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let mut next = files.iter();
    for round in 0..6 {
        // Some files arrive while the query is down, some while it runs.
        if round % 2 == 1 {
            next.next().into_iter().for_each(|f| move_in(f));
        }
        let mut child = start();
        for _ in 0..2 {
            std::thread::sleep(std::time::Duration::from_millis(rng.random_range(50..400)));
            next.next().into_iter().for_each(|f| move_in(f));
        }
        std::thread::sleep(std::time::Duration::from_millis(rng.random_range(0..500)));
        child.kill().unwrap();
        child.wait().unwrap();
    }
    next.for_each(|f| move_in(f));
    let mut child = start();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while committed_events(&out).len() < expected.len() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // Drain (SIGUSR1): the watch ends, what was read is committed, and the run ends cleanly.
    Command::new("kill").args(["-USR1", &child.id().to_string()]).status().unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "the drained run ends cleanly: {status}");
    let got = committed_events(&out);
    assert_eq!(got.len(), expected.len(), "every event once (nothing lost, nothing duplicated)");
    assert!(got == expected, "the committed results are exactly the events of the files");
    // Files read and committed were archived (a kill between a commit and its cleaning may
    // leave one behind, never read again); none was lost.
    let left = std::fs::read_dir(&input).unwrap().count();
    let archived = std::fs::read_dir(archive.join(input.strip_prefix("/").unwrap())).map_or(0, |d| d.count());
    assert_eq!(left + archived, files.len());
    assert!(archived >= files.len() - 6, "{archived} of {} files archived", files.len());
}

/// `--events-dir` with the default trigger (available-now) reads the files there, in every
/// format, ends the watch, and closes every window: windowed queries equal their models over
/// the files' events, on the micro-batch and the timely runner.
#[test]
fn an_events_directory_read_available_now_answers_windowed_queries() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    let config = NexmarkConfig { num_events: 6_000, ..NexmarkConfig::default() };
    let events: Vec<Event> = weir_nexmark::generator::split_events(&config).map(|n| n.event).collect();
    let formats = [("jsonl", EventsFormat::JsonLines), ("csv", EventsFormat::Csv), ("parquet", EventsFormat::Parquet)];
    for (i, chunk) in events.chunks(2_000).enumerate() {
        let (ext, format) = formats[i];
        let mut f = std::fs::File::create(input.join(format!("events-{i}.{ext}"))).unwrap();
        weir_nexmark::event_files::write_events(format, chunk.iter().cloned(), &mut f).unwrap();
    }
    for runner in ["microbatch", "timely"] {
        let code = run(args(&[
            "--streaming",
            "--events-dir",
            input.to_str().unwrap(),
            "--runner",
            runner,
            "--query",
            "5",
            "--query",
            "7",
            "--query",
            "8",
            "--check",
        ]));
        assert_eq!(code, 0, "{runner}");
    }
}

/// Every result line under a `--results` directory, sorted.
fn result_lines(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    for q in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        for e in std::fs::read_dir(q.path()).into_iter().flatten().flatten() {
            if e.file_name().to_string_lossy().ends_with(".jsonl") {
                lines.extend(std::fs::read_to_string(e.path()).unwrap().lines().map(String::from));
            }
        }
    }
    lines.sort();
    lines
}

/// Bundle finalization on a timely cluster: a 2-process run with a checkpoint archives each
/// events file once the epoch that read its end is committed (the commit record worker 0
/// writes, news of which reaches the other process), and its results are those of a run that
/// archives nothing.
#[test]
fn a_timely_cluster_archives_each_file_after_its_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (input, archive) = (dir.path().join("in"), dir.path().join("archive"));
    std::fs::create_dir_all(&input).unwrap();
    let config = NexmarkConfig { num_events: 6_000, ..NexmarkConfig::default() };
    let events: Vec<Event> = weir_nexmark::generator::split_events(&config).map(|n| n.event).collect();
    for (i, chunk) in events.chunks(2_000).enumerate() {
        let mut f = std::fs::File::create(input.join(format!("events-{i}.jsonl"))).unwrap();
        weir_nexmark::event_files::write_events(EventsFormat::JsonLines, chunk.iter().cloned(), &mut f).unwrap();
    }
    let nexmark = |extra: &[&str], out: &Path| {
        let o = Command::new(env!("CARGO_BIN_EXE_nexmark"))
            .args(["--streaming", "--events-dir", input.to_str().unwrap(), "--query", "2", "--results"])
            .arg(out)
            .args(extra)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let plain = dir.path().join("plain");
    nexmark(&["--runner", "microbatch"], &plain);
    let expected = result_lines(&plain);
    assert!(!expected.is_empty());
    let out = dir.path().join("out");
    let ck = dir.path().join("ck");
    let clean = format!("archive={}", archive.display());
    nexmark(
        &[
            "--runner",
            "timely",
            "--processes",
            "2",
            "--checkpoint-dir",
            ck.to_str().unwrap(),
            "--events-dir-clean",
            &clean,
        ],
        &out,
    );
    assert_eq!(result_lines(&out), expected);
    assert_eq!(std::fs::read_dir(&input).unwrap().count(), 0, "every file was archived");
    for i in 0..3 {
        let moved = archive.join(input.strip_prefix("/").unwrap()).join(format!("events-{i}.jsonl"));
        assert!(moved.is_file(), "{} archived", moved.display());
    }
}

/// Spark's incremental batch (`Trigger.AvailableNow` with a checkpoint): each run of
/// `--events-dir` with the default trigger (available-now) and `--checkpoint-dir` reads the files
/// that arrived since the last run, and ends. Over three runs, with files added before the second
/// and third, the results are those of one run over every file, each once, on the micro-batch and
/// the timely runner.
#[test]
fn each_available_now_run_reads_the_files_that_arrived_since_the_last() {
    let config = NexmarkConfig { num_events: 2_000, ..NexmarkConfig::default() };
    let events: Vec<Event> = weir_nexmark::generator::split_events(&config).map(|n| n.event).collect();
    for runner in [&["--runner", "microbatch"][..], &["--runner", "timely", "--workers", "2"]] {
        let dir = tempfile::tempdir().unwrap();
        let (input, staging) = (dir.path().join("in"), dir.path().join("staging"));
        std::fs::create_dir_all(&input).unwrap();
        std::fs::create_dir_all(&staging).unwrap();
        for (i, chunk) in events.chunks(500).enumerate() {
            let mut f = std::fs::File::create(staging.join(format!("events-{i}.jsonl"))).unwrap();
            weir_nexmark::event_files::write_events(EventsFormat::JsonLines, chunk.iter().cloned(), &mut f).unwrap();
        }
        let arrive = |i: usize| {
            let name = format!("events-{i}.jsonl");
            std::fs::rename(staging.join(&name), input.join(&name)).unwrap();
        };
        let nexmark = |extra: &[&str], out: &Path| {
            let o = Command::new(env!("CARGO_BIN_EXE_nexmark"))
                .args(["--streaming", "--events-dir", input.to_str().unwrap(), "--query", "0", "--results"])
                .arg(out)
                .args(runner)
                .args(extra)
                .env_remove("RUST_LOG")
                .output()
                .unwrap();
            assert!(o.status.success(), "{runner:?}: {}", String::from_utf8_lossy(&o.stderr));
        };
        let (out, ck) = (dir.path().join("out"), dir.path().join("ck"));
        let incremental = ["--checkpoint-dir", ck.to_str().unwrap()];
        arrive(0);
        arrive(1);
        nexmark(&incremental, &out);
        let first = result_lines(&out).len();
        arrive(2);
        nexmark(&incremental, &out);
        let second = result_lines(&out).len();
        arrive(3);
        nexmark(&incremental, &out);
        // One run over every file, for the expected results.
        let all = dir.path().join("all");
        nexmark(&[], &all);
        let expected = result_lines(&all);
        assert!(
            0 < first && first < second && second < expected.len(),
            "{runner:?}: {first}, {second}, {}",
            expected.len()
        );
        assert_eq!(result_lines(&out), expected, "{runner:?}");
    }
}
