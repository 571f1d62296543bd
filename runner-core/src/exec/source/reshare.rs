//! Source positions re-divided when the number of shares changes (a rescaled restore).

use serde_json::{json, Value};
use weir_sdk::Result;

/// The splits of share `(index, count)` among `parts`: those at `i % count == index`.
pub(super) fn of_share<T>(parts: Vec<T>, (index, count): (usize, usize)) -> Vec<T> {
    parts.into_iter().enumerate().filter(|(i, _)| i % count == index).map(|(_, p)| p).collect()
}

/// The one list that shares `0..shares.len()` of a list took their parts of, as [`of_share`]
/// deals them (element `i` to share `i % shares.len()`); `None` if the parts cannot come from
/// one list.
pub(super) fn interleave<T: Clone>(shares: &[&[T]]) -> Option<Vec<T>> {
    let (w, n) = (shares.len(), shares.iter().map(|s| s.len()).sum::<usize>());
    if shares.iter().enumerate().any(|(k, s)| s.len() != (n + w - 1 - k) / w.max(1)) {
        return None;
    }
    Some((0..n).map(|i| shares[i % w][i / w].clone()).collect())
}

/// Records read per split, as share `share` reads them, from the counts that shares
/// `0..counts.len()` logged for one batch (a replay on another number of workers); `None` if
/// they do not fit together.
pub fn reshare_counts(counts: &[&[usize]], share: (usize, usize)) -> Option<Vec<usize>> {
    Some(of_share(interleave(counts)?, share))
}

/// The position of share `share` of a source whose shares `0..positions.len()` logged
/// `positions` at one point (a restart on another number of workers): the splits (or readers)
/// of all shares, as one list again, dealt anew. An impulse's or TestStream's position is share
/// 0's. An error names `step` when the positions do not fit together.
pub fn reshare(step: &str, positions: &[&Value], share: (usize, usize)) -> Result<Value> {
    let bad = |what: &str| weir_sdk::Error::Execution {
        step: step.to_string(),
        message: format!("the offset log entries of {} workers do not fit together: {what}", positions.len()),
    };
    let Some(first) = positions.first() else { return Err(bad("there are none")) };
    let (list, size) = match () {
        _ if first.get("splits").is_some() => ("splits", "split_bytes"),
        _ if first.get("readers").is_some() => ("readers", "desired"),
        _ => return Ok((*first).clone()),
    };
    let lists = positions
        .iter()
        .map(|p| p[list].as_array().map(Vec::as_slice).ok_or_else(|| bad(&format!("no '{list}' in {p}"))))
        .collect::<Result<Vec<_>>>()?;
    let sizes: Vec<&Value> = positions.iter().filter_map(|p| p.get(size)).filter(|v| !v.is_null()).collect();
    let mut out = if sizes.is_empty() && lists.iter().all(|l| l.is_empty()) {
        json!({ list: [] })
    } else {
        if sizes.len() != positions.len() || sizes.iter().any(|s| *s != sizes[0]) {
            return Err(bad(&format!("the workers split the source differently ('{size}')")));
        }
        let all = interleave(&lists).ok_or_else(|| bad(&format!("their '{list}' are not shares of one list")))?;
        json!({ list: of_share(all, share), size: sizes[0] })
    };
    if positions.iter().any(|p| p.get("drained").and_then(Value::as_bool) == Some(true)) {
        out["drained"] = json!(true);
    }
    Ok(out)
}
