//! Reading and writing files on every runner: text, JSON lines, CSV and Parquet read in splits
//! (each record once, whatever the splits), bad records by policy, and the exactly-once file
//! sink's files, windows and metadata log.

use serde::{Deserialize, Serialize};
use weir_parquet::{ArrowBatch, ParquetBatches, ParquetIO};
use weir_sdk::io::file_sink::committed_files;
use weir_sdk::io::read_files::{CsvFormat, JsonLinesFormat, ReadFiles, TextFormat};
use weir_sdk::io::{BadRecordPolicy, FileIO, WriteJsonLines};
use weir_sdk::prelude::*;
use weir_tests::conformance;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
struct Trip {
    id: i64,
    city: String,
    fare: i64,
    note: Option<String>,
}

fn trips(n: i64) -> Vec<Trip> {
    (0..n)
        .map(|id| Trip {
            id,
            city: ["Oslo", "Lima, Peru", "Pune \"West\""][id as usize % 3].to_string(),
            fare: id * 7 % 101,
            note: (id % 4 == 0).then(|| format!("n{id}")),
        })
        .collect()
}

fn write_csv(path: &std::path::Path, rows: &[Trip]) {
    let mut w = csv::Writer::from_path(path).unwrap();
    for r in rows {
        w.serialize(r).unwrap();
    }
    w.flush().unwrap();
}

fn pattern(dir: &std::path::Path, glob: &str) -> String {
    dir.join(glob).to_string_lossy().into_owned()
}

/// Runs a pipeline on `options`' runner writing `rows` as Parquet files into `dir`.
fn write_parquet<T: Element>(options: PipelineOptions, dir: &std::path::Path, rows: Vec<T>) {
    let p = weir_sdk::testing::TestPipeline::from_options(options);
    p.apply("Rows", Create::of(rows)).apply("Write", ParquetIO::write::<T>(dir.to_string_lossy()));
    p.run();
}

conformance! {
    fn csv_files_are_read_once_per_record_with_quotes_and_nulls(p) {
        let dir = tempfile::tempdir().unwrap();
        let all = trips(3_000);
        write_csv(&dir.path().join("a.csv"), &all[..1_800]);
        write_csv(&dir.path().join("b.csv"), &all[1_800..]);
        // Small splits: a file is read by many restrictions, each line once.
        let format = CsvFormat::<Trip>::new();
        let files = p.apply("Match", FileIO::match_pattern(pattern(dir.path(), "*.csv")));
        let read = files.apply("Read", ReadFiles::of(SmallSplits(format)));
        assert_that(&read).contains_in_any_order(all);
        p.run();
    }

    fn text_and_json_lines_files_are_read_in_splits(p) {
        let dir = tempfile::tempdir().unwrap();
        let lines: Vec<String> = (0..2_000).map(|i| format!("line {i}")).collect();
        std::fs::write(dir.path().join("t.txt"), lines.join("\r\n")).unwrap();
        let json: Vec<String> = trips(500).iter().map(|t| serde_json::to_string(t).unwrap()).collect();
        std::fs::write(dir.path().join("t.jsonl"), json.join("\n") + "\n\n").unwrap();
        let text = p.apply("Text", TextFormat::read(pattern(dir.path(), "*.txt")));
        assert_that(&text).contains_in_any_order(lines);
        let rows = p.apply("Json", JsonLinesFormat::<Trip>::read(pattern(dir.path(), "*.jsonl")));
        assert_that(&rows).contains_in_any_order(trips(500));
        p.run();
    }

    fn bad_records_are_skipped_failed_or_kept_aside(p) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.csv");
        std::fs::write(&path, "id,city,fare,note\n1,Oslo,3,\nx,Oslo,4,\n2,Lima,5,n\n").unwrap();
        let dead = dir.path().join("dead.txt");
        let csv = pattern(dir.path(), "bad.csv");
        let read = p.apply(
            "Read",
            CsvFormat::<Trip>::read(csv.clone()).with_bad_records(BadRecordPolicy::DeadLetter(dead.clone())),
        );
        let ids = read.apply("Ids", Map::new(|t: Trip| t.id));
        assert_that(&ids).contains_in_any_order(vec![1, 2]);
        p.run();
        assert_eq!(std::fs::read_to_string(&dead).unwrap(), "x,Oslo,4,\n");

        let q = weir_sdk::testing::TestPipeline::from_options(p.options());
        q.apply("Read", CsvFormat::<Trip>::read(csv).with_bad_records(BadRecordPolicy::Fail));
        let err = q.try_run().expect_err("a bad record fails the read").to_string();
        assert!(err.contains("bad.csv, byte 28") && err.contains("malformed CSV record"), "{err}");
    }

    fn parquet_round_trips_with_projection_and_row_groups(p) {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        write_parquet(p.options(), &out, trips(5_000));
        let files = pattern(&out, "*.parquet");
        let read = p.apply("Read", ParquetIO::read::<Trip>(files.clone()));
        assert_that(&read).contains_in_any_order(trips(5_000));
        // Two columns only, as record batches.
        let batches = p.apply(
            "MatchBatches",
            FileIO::match_pattern(files),
        )
        .apply("ReadBatches", ReadFiles::of(ParquetBatches::new().columns(["id", "fare"]).batch_size(1000)));
        let shape = batches.apply("Shape", Map::new(|b: ArrowBatch| (b.batch().num_columns(), b.num_rows() as i64)));
        let totals = shape.apply("Columns", Map::new(|(c, n): (usize, i64)| KV::new(c as i64, n))).apply("Sum", Sum::per_key());
        assert_that(&totals).contains_in_any_order(vec![KV::new(2, 5_000)]);
        p.run();
    }

    fn csv_files_are_read_as_arrow_batches_of_a_schema(p) {
        use arrow_array::{Array, Int64Array};
        use arrow_schema::{DataType, Field, Schema};
        let dir = tempfile::tempdir().unwrap();
        let all = trips(2_000);
        write_csv(&dir.path().join("a.csv"), &all[..1_200]);
        write_csv(&dir.path().join("b.csv"), &all[1_200..]);
        // A record whose fare is not a number, and one without an id (not nullable).
        std::fs::write(dir.path().join("c.csv"), "id,city,fare,note\n5000,Oslo,x,\n,Lima,3,\n5001,\"Pune, \"\"W\"\"\",4,\n").unwrap();
        let dead = dir.path().join("dead.txt");
        // The schema's columns in another order than the files', one of them left out.
        let schema = std::sync::Arc::new(Schema::new(vec![
            Field::new("fare", DataType::Int64, true),
            Field::new("id", DataType::Int64, false),
            Field::new("note", DataType::Utf8, true),
        ]));
        let format = weir_parquet::CsvBatches::new(schema).batch_size(100);
        let batches = p
            .apply("Match", FileIO::match_pattern(pattern(dir.path(), "*.csv")))
            .apply("Read", ReadFiles::of(SmallSplits(format)).with_bad_records(BadRecordPolicy::DeadLetter(dead.clone())));
        // Per batch: rows, the sum of ids and fares, and the null notes.
        let stats = batches.apply("Stats", Map::new(|b: ArrowBatch| {
            let b = b.batch();
            let col = |i: usize| b.column(i).as_any().downcast_ref::<Int64Array>().unwrap().iter().flatten().sum::<i64>();
            (b.num_rows() as i64, col(1), col(0), b.column(2).null_count() as i64)
        }));
        let totals = stats
            .apply("Keyed", FlatMap::new(|(n, ids, fares, nulls): (i64, i64, i64, i64)| {
                vec![KV::new("rows".to_string(), n), KV::new("ids".to_string(), ids), KV::new("fares".to_string(), fares), KV::new("nulls".to_string(), nulls)]
            }))
            .apply("Sum", Sum::per_key());
        let want = |f: fn(&Trip) -> i64| all.iter().map(f).sum::<i64>();
        assert_that(&totals).contains_in_any_order(vec![
            KV::new("rows".to_string(), 2_001),
            KV::new("ids".to_string(), want(|t| t.id) + 5001),
            KV::new("fares".to_string(), want(|t| t.fare) + 4),
            KV::new("nulls".to_string(), want(|t| i64::from(t.note.is_none())) + 1),
        ]);
        p.run();
        let mut bad: Vec<String> = std::fs::read_to_string(&dead).unwrap().lines().map(String::from).collect();
        bad.sort();
        assert_eq!(bad, vec![",Lima,3,".to_string(), "5000,Oslo,x,".to_string()]);
    }

    fn parquet_rows_that_do_not_fit_the_type_follow_the_policy(p) {
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        struct Loose { id: i64, note: Option<String> }
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        struct Strict { id: i64, note: String }
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let rows = vec![Loose { id: 1, note: Some("a".into()) }, Loose { id: 2, note: None }, Loose { id: 3, note: Some("c".into()) }];
        write_parquet(p.options(), &out, rows);
        let read = p.apply("Read", ParquetIO::read::<Strict>(pattern(&out, "*.parquet")));
        let ids = read.apply("Ids", Map::new(|s: Strict| s.id));
        assert_that(&ids).contains_in_any_order(vec![1, 3]);
        p.run();
    }

    fn a_file_sink_writes_windows_and_lists_what_it_committed(p) {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out").to_string_lossy().into_owned();
        let rows: Vec<TimestampedValue<i64>> = (0..100).map(|i| TimestampedValue::new(i, i * 1_000)).collect();
        p.apply("Rows", Create::timestamped(rows))
            .apply("Window", Window::into(FixedWindows::of(std::time::Duration::from_secs(60))))
            .apply("Write", WriteJsonLines::to(out.clone()).windowed(true));
        p.run();
        let files = committed_files(&out).unwrap();
        let mut seen = Vec::new();
        for f in &files {
            let name = std::path::Path::new(f).file_name().unwrap().to_string_lossy().into_owned();
            let first = name.starts_with("1970-01-01T00:00:00.000Z-1970-01-01T00:01:00.000Z-");
            let second = name.starts_with("1970-01-01T00:01:00.000Z-1970-01-01T00:02:00.000Z-");
            assert!(first || second, "{name}");
            for line in std::fs::read_to_string(f).unwrap().lines() {
                let v: i64 = line.parse().unwrap();
                assert_eq!(v < 60, first, "{v} in {name}");
                seen.push(v);
            }
        }
        seen.sort();
        assert_eq!(seen, (0..100).collect::<Vec<_>>());
        // The log lists every data file there is.
        let mut on_disk: Vec<String> = std::fs::read_dir(&out).unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let mut listed = files.clone();
        listed.sort();
        assert_eq!(listed, on_disk);
    }
}

/// A format read in splits of 256 units, so every file is many restrictions.
#[derive(Clone)]
struct SmallSplits<F>(F);

impl<F: weir_sdk::io::read_files::FileFormat> weir_sdk::io::read_files::FileFormat for SmallSplits<F> {
    type Out = F::Out;
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn initial_splits(
        &self,
        _: &weir_sdk::io::file_io::FileMetadata,
        whole: weir_sdk::splittable::OffsetRange,
    ) -> UserResult<Vec<weir_sdk::splittable::OffsetRange>> {
        Ok(whole.split(256))
    }
    fn read(
        &mut self,
        file: &weir_sdk::io::file_io::FileMetadata,
        tracker: &mut weir_sdk::splittable::Claims<'_, weir_sdk::splittable::OffsetRangeTracker>,
        out: &mut weir_sdk::io::read_files::Records<'_, '_, F::Out>,
    ) -> UserResult {
        self.0.read(file, tracker, out)
    }
}

mod cleaning {
    use super::*;
    use weir_sdk::io::file_io::{Continuously, Termination};
    use weir_sdk::io::read_files::CleanSource;

    conformance! {
        fn files_read_and_committed_are_archived(p) {
            let dir = tempfile::tempdir().unwrap();
            let (input, archive) = (dir.path().join("in"), dir.path().join("archive"));
            std::fs::create_dir_all(&input).unwrap();
            let all = trips(900);
            for (i, chunk) in all.chunks(300).enumerate() {
                write_csv(&input.join(format!("t{i}.csv")), chunk);
            }
            let watch = Continuously::new(std::time::Duration::from_millis(20), Termination::after_iterations(1));
            let read = p
                .apply("Watch", FileIO::match_pattern(pattern(&input, "*.csv")).watching(watch))
                .apply("Read", ReadFiles::of(CsvFormat::<Trip>::new()).clean_source(CleanSource::Archive(archive.clone())));
            assert_that(&read).contains_in_any_order(all);
            p.run();
            // Every file was read, committed, then moved under the archive with its path.
            assert_eq!(std::fs::read_dir(&input).unwrap().count(), 0);
            for i in 0..3 {
                let moved = archive.join(input.strip_prefix("/").unwrap()).join(format!("t{i}.csv"));
                assert!(moved.is_file(), "{} archived", moved.display());
            }
        }
    }
}
