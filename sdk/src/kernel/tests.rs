//! The kernels' tests.

use super::*;
use crate::coders::{Coder, ElementCoder};
use crate::kv::KV;
use crate::pane::PaneInfo;
use crate::time::Timestamp;
use crate::window::IntervalWindow;
use crate::window::Window;
use crate::windowed_value::WindowedValue;
use std::sync::Arc;

/// Rows (key, value, window start) of an encoded batch, decoded.
fn rows(b: &EncodedKvBatch) -> Vec<(i64, String, Timestamp)> {
    (0..b.rows.len())
        .map(|i| {
            let k = ElementCoder::<i64>::new().decode_outer(b.key(i)).unwrap();
            let v = ElementCoder::<String>::new().decode_outer(b.value(i)).unwrap();
            (k, v, b.rows[i].window.max_timestamp())
        })
        .collect()
}

/// Issue 16: FNV-1a without a finalizer put the one-byte encodings of 0..63 in a single
/// partition of two. Key groups (issue 34) keep the spread.
#[test]
fn small_integer_keys_spread_over_partitions() {
    let coder = ElementCoder::<i64>::new();
    for n in [2usize, 3, 4, 8] {
        let mut counts = vec![0usize; n];
        for k in 0..64i64 {
            let mut key = Vec::new();
            coder.encode(&k, &mut key).unwrap();
            counts[partition_of(&key, n)] += 1;
        }
        // A sample this small varies by chance; the degenerate hash put them all in one.
        let expected = 64 / n;
        assert!(counts.iter().all(|&c| c >= expected / 4), "keys 0..64 over {n} partitions: {counts:?}");
    }
    for n in [2usize, 4, 7, 16] {
        let mut counts = vec![0usize; n];
        for k in 0..100_000u32 {
            counts[partition_of(&k.to_be_bytes(), n)] += 1;
        }
        let expected = 100_000 / n;
        assert!(
            counts.iter().all(|&c| c.abs_diff(expected) < expected / 20),
            "100 000 keys over {n} partitions: {counts:?}"
        );
    }
}

#[test]
fn encoded_rows_split_concat_partition_and_select_by_window() {
    let input: Vec<WindowedValue<KV<i64, String>>> = (0..10i64)
        .map(|i| {
            let mut wv = WindowedValue::timestamped(KV::new(i % 4, format!("v{i}")), i);
            wv.window = Window::Interval(IntervalWindow::new(i / 5 * 5, i / 5 * 5 + 5));
            wv
        })
        .collect();
    let mut batch = EncodedKvBatch::default();
    batch.append::<i64, String>(Batch::new(input), &ElementCoder::new(), &ElementCoder::new()).unwrap();
    let all = rows(&batch);
    let ops = EncodedKvOps;
    let parts = Batch::new(batch.clone()).split(3);
    assert_eq!(parts.iter().map(Batch::len).collect::<Vec<_>>(), [3, 3, 3, 1]);
    let joined = ops.concat(parts);
    assert_eq!(rows(joined.downcast_ref::<EncodedKvBatch>().unwrap()), all);
    // By key partition: every row once, each where its key belongs, in order.
    let by_key = batch.clone().partition(3);
    assert_eq!(by_key.iter().map(|p| p.rows.len()).sum::<usize>(), 10);
    for (q, p) in by_key.iter().enumerate() {
        assert!((0..p.rows.len()).all(|i| partition_of(p.key(i), 3) == q));
    }
    // Split while encoding: the same parts, rows and order as encoding then partitioning.
    let many: Vec<WindowedValue<KV<i64, String>>> =
        (0..500i64).map(|i| WindowedValue::timestamped(KV::new(i % 37, format!("v{i}")), i)).collect();
    let mut whole = EncodedKvBatch::default();
    whole.append::<i64, String>(Batch::new(many.clone()), &ElementCoder::new(), &ElementCoder::new()).unwrap();
    let mut split: Vec<EncodedKvBatch> = (0..3).map(|_| EncodedKvBatch::default()).collect();
    for half in Batch::new(many).split(250) {
        EncodedKvBatch::append_split::<i64, String>(&mut split, half, &ElementCoder::new(), |v, d| {
            ElementCoder::<String>::new().encode(v, d)
        })
        .unwrap();
    }
    let expected: Vec<_> = whole.partition(3).iter().map(rows).collect();
    assert_eq!(split.iter().map(rows).collect::<Vec<_>>(), expected);
    assert!(expected.iter().all(|p| !p.is_empty()));
    let (early, late) = ops.partition_by_window(Batch::new(batch), &mut |w| w.max_timestamp() < 5);
    assert_eq!(rows(early.downcast_ref::<EncodedKvBatch>().unwrap()), all[..5]);
    assert_eq!(rows(late.downcast_ref::<EncodedKvBatch>().unwrap()), all[5..]);
}

#[test]
fn encoded_rows_cross_processes_as_bytes() {
    let input: Vec<WindowedValue<KV<i64, String>>> = (0..7i64)
        .map(|i| {
            let mut wv = WindowedValue::timestamped(KV::new(i % 3, format!("value {i}")), 10 * i);
            wv.window = Window::Interval(IntervalWindow::new(i, i + 5));
            wv
        })
        .collect();
    let mut batch = EncodedKvBatch::default();
    batch.append::<i64, String>(Batch::new(input), &ElementCoder::new(), &ElementCoder::new()).unwrap();
    for lifted in [false, true] {
        batch.lifted = lifted;
        let ops = EncodedKvOps;
        let bytes = ops.encode_batch(&Batch::new(batch.clone())).unwrap();
        let back = ops.decode_batch(&bytes).unwrap();
        let back = back.downcast_ref::<EncodedKvBatch>().unwrap();
        assert_eq!(rows(back), rows(&batch));
        assert_eq!(back.lifted, lifted);
        // Every truncation is an error, never a panic.
        for n in 0..bytes.len() {
            assert!(ops.decode_batch(&bytes[..n]).is_err(), "{n} of {} bytes decoded", bytes.len());
        }
    }
}

fn uniform(values: Vec<i64>, timestamp: Timestamp, window: Window) -> UniformBatch<i64> {
    UniformBatch { values, timestamp, window, pane: PaneInfo::NO_FIRING }
}

fn rows_of(b: &Batch) -> Vec<WindowedValue<i64>> {
    downcast_batch::<i64>(b.clone()).unwrap()
}

#[test]
fn uniform_batches_are_collections_like_rows() {
    let ops = TypedCollectionOps::<i64>::new(Arc::new(ElementCoder::new()));
    let w = Window::Interval(IntervalWindow::new(0, 10));
    let b: Batch = Batch::new(uniform(vec![1, 2, 3], 7, w));
    let expanded: Vec<WindowedValue<i64>> = [1, 2, 3]
        .into_iter()
        .map(|value| WindowedValue { value, timestamp: 7, window: w, pane: PaneInfo::NO_FIRING })
        .collect();
    assert_eq!(rows_of(&b), expanded);
    assert_eq!(b.len(), 3);
    assert_eq!(b.min_timestamp(), Some(7));
    assert_eq!(b.timestamp_stats(), (7, 7, 21, 3));
    assert_eq!(ops.describe(&b, 2), vec!["1", "2"]);
    assert!(ops.estimated_bytes(&b) > 0);
    // Encoded like the rows they stand for.
    let bytes = ops.encode_batch(&b).unwrap();
    assert_eq!(bytes, ops.encode_batch(&Batch::new(expanded.clone())).unwrap());
    assert_eq!(rows_of(&ops.decode_batch(&bytes).unwrap()), expanded);
    // Rows split into pieces in order, every piece but the last full.
    let ten: Batch = Batch::new((0..10i64).map(|i| WindowedValue::timestamped(i, i)).collect::<Vec<_>>());
    let pieces = ten.split(3);
    assert_eq!(pieces.iter().map(Batch::len).collect::<Vec<_>>(), vec![3, 3, 3, 1]);
    let values: Vec<i64> = pieces.iter().flat_map(rows_of).map(|wv| wv.value).collect();
    assert_eq!(values, (0..10).collect::<Vec<_>>());
    // Split stays uniform; concat of parts with one metadata too, else rows.
    let parts = b.clone().split(2);
    assert_eq!(parts.len(), 2);
    assert!(parts.iter().all(|p| p.is::<UniformBatch<i64>>()));
    let joined = ops.concat(parts);
    assert_eq!(joined.downcast_ref::<UniformBatch<i64>>().map(|u| u.values.clone()), Some(vec![1, 2, 3]));
    let other: Batch = Batch::new(uniform(vec![4], 8, w));
    let mixed = ops.concat(vec![b.clone(), other, Batch::new(vec![WindowedValue::timestamped(5i64, 9)])]);
    let mut got: Vec<(i64, Timestamp)> = rows_of(&mixed).iter().map(|wv| (wv.value, wv.timestamp)).collect();
    got.sort();
    assert_eq!(got, vec![(1, 7), (2, 7), (3, 7), (4, 8), (5, 9)]);
    // One window: one group, kept uniform; partitioned whole.
    let groups = ops.group_by_window(b.clone());
    assert_eq!(groups.len(), 1);
    assert_eq!((groups[0].0, groups[0].1, groups[0].2.len()), (w, -1, 3));
    let (yes, no) = ops.partition_by_window(b.clone(), &mut |x| *x == w);
    assert_eq!((yes.len(), no.len()), (3, 0));
    let (yes, no) = ops.partition_by_window(b.clone(), &mut |x| *x != w);
    assert_eq!((yes.len(), no.len()), (0, 3));
    // An output buffer holding a uniform batch turns into rows in place.
    let mut out = b.clone();
    rows_mut::<i64>(&mut out).unwrap().push(WindowedValue::timestamped(9, 1));
    assert_eq!(rows_of(&out).len(), 4);
    assert!(rows_mut::<String>(&mut out).is_none());
    // Keys and values encode from either form alike.
    let kvs: Batch = Batch::new(UniformBatch {
        values: vec![KV::new(1i64, "a".to_string())],
        timestamp: 3,
        window: w,
        pane: PaneInfo::NO_FIRING,
    });
    let mut enc = EncodedKvBatch::default();
    enc.append::<i64, String>(kvs, &ElementCoder::new(), &ElementCoder::new()).unwrap();
    assert_eq!(rows(&enc), vec![(1, "a".to_string(), 9)]);
    assert_eq!(enc.rows[0].timestamp, 3);
}
