//! FileIO matching on every runner: a pattern matched when the pipeline runs, the empty-match
//! treatments, and a directory watched continuously, each new file output once.

use std::time::Duration;
use weir_sdk::io::file_io::{Continuously, EmptyMatchTreatment, FileIO, FileMetadata, Termination};
use weir_sdk::prelude::*;
use weir_tests::conformance;

fn write(dir: &std::path::Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

/// The file names of matches.
fn names(matches: &PCollection<FileMetadata>) -> PCollection<(String, u64)> {
    matches.apply(
        "Names",
        Map::new(|m: FileMetadata| {
            let name = std::path::Path::new(&m.path).file_name().unwrap().to_string_lossy().into_owned();
            (name, m.size_bytes)
        }),
    )
}

conformance! {
    fn a_pattern_is_matched_when_the_pipeline_runs(p) {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.csv", "1,2\n");
        write(dir.path(), "b.csv", "3,4,5\n");
        write(dir.path(), "c.txt", "no");
        let pattern = dir.path().join("*.csv").to_string_lossy().into_owned();
        let matched = p.apply("Match", FileIO::match_pattern(pattern));
        // Written after the pipeline is built, before it runs: matched too.
        write(dir.path(), "d.csv", "6\n");
        assert_that(&names(&matched)).contains_in_any_order(vec![("a.csv".into(), 4), ("b.csv".into(), 6), ("d.csv".into(), 2)]);
        p.run();
    }

    fn empty_matches_follow_the_treatment(p) {
        let dir = tempfile::tempdir().unwrap();
        let wild = dir.path().join("*.csv").to_string_lossy().into_owned();
        // As in Beam, FileIO.match() disallows an empty match by default; matchAll() allows it
        // for a wildcard, and so does a chosen treatment.
        let none = p.apply("Wild", FileIO::match_pattern(wild.clone()).with_empty_match_treatment(EmptyMatchTreatment::AllowIfWildcard));
        assert_that(&none).empty();
        let patterns = p.apply("Patterns", Create::of(vec![wild.clone()]));
        let all = patterns.apply("MatchAll", FileIO::match_all());
        assert_that(&all).empty();
        p.run();
        // Any pattern with the default, a plain name that matches nothing, or any empty match
        // when disallowed, is an error naming the pattern.
        let plain = dir.path().join("missing.csv").to_string_lossy().into_owned();
        for (pattern, treatment) in [
            (wild.clone(), None),
            (plain, Some(EmptyMatchTreatment::AllowIfWildcard)),
            (wild, Some(EmptyMatchTreatment::Disallow)),
        ] {
            let q = weir_sdk::testing::TestPipeline::from_options(p.options());
            let matched = FileIO::match_pattern(pattern.clone());
            q.apply("Match", match treatment {
                Some(t) => matched.with_empty_match_treatment(t),
                None => matched,
            });
            let err = q.try_run().expect_err("an empty match is refused");
            assert!(err.to_string().contains(&pattern), "{err}");
        }
    }

    fn a_watched_directory_gives_each_new_file_once(p) {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "0.jsonl", "{}\n");
        write(dir.path(), "1.jsonl", "{}\n");
        let pattern = dir.path().join("*.jsonl").to_string_lossy().into_owned();
        let watch = Continuously::new(Duration::from_millis(5), Termination::after_time_since_new_output(Duration::from_millis(1500)))
            .max_files_per_poll(1);
        let matched = p.apply("Watch", FileIO::match_pattern(pattern).watching(watch));
        assert!(p.graph().is_streaming());
        assert_that(&names(&matched)).contains_in_any_order((0..5).map(|i| (format!("{i}.jsonl"), 3)).collect());
        let path = dir.path().to_path_buf();
        let writer = std::thread::spawn(move || {
            for i in 2..5 {
                std::thread::sleep(Duration::from_millis(60));
                // Written whole before it can be matched.
                std::fs::write(path.join(format!(".{i}.tmp")), "{}\n").unwrap();
                std::fs::rename(path.join(format!(".{i}.tmp")), path.join(format!("{i}.jsonl"))).unwrap();
            }
        });
        p.run();
        writer.join().unwrap();
    }
}
