//! Tests.

use super::*;
use crate::plan::translate::{translate, Natives, Translation};
use crate::plan::Role;
use weir_sdk::prelude::*;

#[test]
fn positions_logged_by_some_shares_are_dealt_to_any_other_number() {
    // Seven splits, dealt to 2 shares (0, 2, 4, 6 and 1, 3, 5), then to 3.
    let split = |i: u64| json!({ "read": i * 10, "done": i == 3 });
    let logged = |share: (usize, usize)| {
        let mine = of_share((0..7).map(split).collect(), share);
        json!({ "splits": mine, "split_bytes": 64 })
    };
    let (a, b) = (logged((0, 2)), logged((1, 2)));
    for k in 0..3 {
        assert_eq!(reshare("Read", &[&a, &b], (k, 3)).unwrap(), logged((k, 3)));
    }
    // Back to one share, drained where any share was.
    let mut c = logged((1, 2));
    c["drained"] = json!(true);
    let one = reshare("Read", &[&a, &c], (0, 1)).unwrap();
    assert_eq!(one["splits"].as_array().unwrap().len(), 7);
    assert_eq!(one["drained"], json!(true));
    // More shares than splits: the last ones have none, and say the split size.
    assert_eq!(reshare("Read", &[&a, &b], (8, 9)).unwrap(), json!({ "splits": [], "split_bytes": 64 }));
    assert_eq!(reshare_counts(&[&[1, 2, 3, 4], &[5, 6, 7]], (0, 3)).unwrap(), vec![1, 6, 4]);
    // Parts that cannot come from one list, or another split size, are refused.
    let short = json!({ "splits": [], "split_bytes": 64 });
    assert!(reshare("Read", &[&a, &short], (0, 1)).unwrap_err().to_string().contains("Read"));
    let other = json!({ "splits": b["splits"], "split_bytes": 32 });
    assert!(reshare("Read", &[&a, &other], (0, 1)).unwrap_err().to_string().contains("split the source differently"));
    // Not split yet anywhere: still not split.
    let none = json!({ "splits": [] });
    assert_eq!(reshare("Read", &[&none, &none], (0, 3)).unwrap(), json!({ "splits": [] }));
}

/// A TestStream source of two bundles around a watermark move, as the plan reads it.
fn stream() -> SourceState {
    let p = Pipeline::create();
    p.apply(
        "Stream",
        TestStream::create()
            .add_elements(vec![TimestampedValue::new(1i64, 1)])
            .advance_watermark_to(5)
            .add_elements(vec![TimestampedValue::new(2i64, 6)]),
    );
    let graph = p.graph();
    let plan = translate(
        &graph,
        &Translation {
            runner: "test",
            natives: Natives::All,
            lift_combines: false,
            window_aggregation: true,
            partitions: 1,
            state: Default::default(),
        },
    )
    .unwrap();
    let node = plan.nodes.iter().find(|n| matches!(n.role, Role::Source(_))).unwrap();
    let Role::Source(spec) = &node.role else { unreachable!("found above") };
    SourceState::of(&node.name, spec, graph.pcollection(node.outputs[0]).ops.clone())
}

#[test]
fn a_drained_batch_replays_drained_and_a_restart_stays_drained() {
    let mut clock = Clock::Test(0);
    let mut live = stream();
    let first = live.next(1, 10, None, &mut clock, false, None).unwrap();
    assert_eq!(first.rows, 1);
    live.prepare_read(None, true);
    let drained = live.next(1, 10, None, &mut clock, false, None).unwrap();
    assert_eq!((drained.rows, drained.watermark), (0, MAX_TIMESTAMP));
    assert_eq!(drained.end_offset["drained"], json!(true));
    // A replay of the drained batch from the end of the one before reads what it read once
    // the logged drain is applied, and would read on without it.
    let mut replayed = stream();
    replayed.restore(&first.end_offset, 1).unwrap();
    replayed.prepare_read(Some(&drained.end_offset), true);
    let again = replayed.next(1, 10, Some(&drained.counts), &mut clock, false, None).unwrap();
    assert_eq!((again.rows, again.watermark), (0, MAX_TIMESTAMP));
    let mut undrained = stream();
    undrained.restore(&first.end_offset, 1).unwrap();
    undrained.prepare_read(Some(&first.end_offset), true);
    assert_eq!(undrained.next(1, 10, Some(&drained.counts), &mut clock, false, None).unwrap().watermark, 5);
    // A restart after the drained batch stays drained.
    let mut restarted = stream();
    restarted.restore(&drained.end_offset, 1).unwrap();
    let after = restarted.next(1, 10, None, &mut clock, false, None).unwrap();
    assert_eq!((after.rows, after.watermark), (0, MAX_TIMESTAMP));
}
