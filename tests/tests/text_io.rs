//! TextIO conformance: sharded write, split read, round trip, bad paths.

use weir_sdk::prelude::*;
use weir_tests::conformance;

conformance! {
    fn text_round_trip(p) {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("out/part").to_string_lossy().into_owned();
        let lines: Vec<String> = (0..1000).map(|i| format!("line {i}: {}", "ab".repeat(i % 13))).collect();
        let written = p.apply("Create", Create::of(lines.clone())).apply("Write", TextIO::write().to(&prefix).with_suffix(".txt").with_num_shards(3));
        let names: Vec<String> = (0..3).map(|i| weir_sdk::io::text::shard_name(&prefix, i, 3, ".txt")).collect();
        assert_that(&written).contains_in_any_order(names.clone());
        p.run();
        let mut total = 0;
        for n in &names {
            let body = std::fs::read_to_string(n).unwrap();
            assert!(!body.is_empty(), "{n} is empty");
            total += body.lines().count();
        }
        assert_eq!(total, 1000);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("out")).unwrap().filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().contains(".tmp-")).collect();
        assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");

        let q = weir_tests::pipeline("direct");
        let read = q.apply("Read", TextIO::read().from(format!("{prefix}-*-of-00003.txt")));
        assert_that(&read).contains_in_any_order(lines);
        q.run();
    }

    fn empty_shards_are_created(p) {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("few").to_string_lossy().into_owned();
        p.apply("Create", Create::of(vec!["only".to_string()])).apply("Write", TextIO::write().to(&prefix).with_num_shards(4));
        p.run();
        let mut lines = 0;
        for i in 0..4 {
            let name = weir_sdk::io::text::shard_name(&prefix, i, 4, "");
            lines += std::fs::read_to_string(&name).unwrap_or_else(|e| panic!("{name}: {e}")).lines().count();
        }
        assert_eq!(lines, 1);
    }

    fn read_of_missing_files_fails(p) {
        p.apply("Read", TextIO::read().from("/nonexistent-weir-dir/*.txt"));
        let err = p.try_run().unwrap_err().to_string();
        assert!(err.contains("Read") && err.contains("no files match pattern '/nonexistent-weir-dir/*.txt'"), "{err}");
    }

    fn write_to_unwritable_path_fails(p) {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, "x").unwrap();
        let prefix = blocker.join("sub/out").to_string_lossy().into_owned();
        p.apply("Create", Create::of(vec!["a".to_string()])).apply("Write", TextIO::write().to(&prefix));
        let err = p.try_run().unwrap_err().to_string();
        assert!(err.contains("Write/WriteShards") && err.contains("sub"), "{err}");
    }
}
