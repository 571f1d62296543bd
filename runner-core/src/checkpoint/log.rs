//! The log entries of checkpoints, as every runner writes them: JSON envelopes with a format
//! version and a CRC-32 of their body, named by batch (or epoch) id in decimal. Any bytes read
//! back give an entry or an error naming the file, never a panic or a wrong entry.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use weir_sdk::time::Timestamp;
use weir_sdk::{Error, Result};

/// The envelope format this build writes and reads.
pub const VERSION: u32 = 1;

/// One source's entry in an offset log: its position before and after the batch, and how many
/// records it read from each split or reader, so that a replay reads exactly the same.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SourceOffsets {
    /// The source node.
    pub name: String,
    /// The position before the batch.
    pub start: Value,
    /// The position after it.
    pub end: Value,
    /// Records read per split or reader.
    pub counts: Vec<usize>,
}

/// What one unit of work of a source-reading operator decided at run time
/// ([`crate::operator::Operator::take_journal`]).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Journal {
    /// Each restriction run, in order, with the positions it claimed.
    pub runs: Vec<weir_sdk::splittable::ClaimRun>,
    /// The watermark hold after the unit; `None` when nothing was pending.
    pub hold: Option<Timestamp>,
}

impl Journal {
    /// The journal of a node from its partitions': every run, and the least hold.
    pub fn merge(parts: impl IntoIterator<Item = Journal>) -> Journal {
        parts.into_iter().fold(Journal::default(), |mut all, j| {
            all.runs.extend(j.runs);
            all.hold = match (all.hold, j.hold) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            all
        })
    }
}

/// One node's journal in an offset log: what its source-reading operator decided while the
/// batch ran, so that a replay repeats it ([`crate::operator::Operator::take_journal`]).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct NodeJournal {
    /// The plan node.
    pub name: String,
    /// Its partitions' journals, merged.
    pub journal: Journal,
}

#[derive(Serialize, Deserialize)]
struct Envelope {
    version: u32,
    crc32: u32,
    body: String,
}

/// An I/O error on checkpoint file `name`.
pub fn io(name: &str, e: impl std::fmt::Display) -> Error {
    Error::Io { path: name.to_string(), message: e.to_string() }
}

/// A checkpoint file that cannot be read as what it should be.
pub fn corrupt(name: &str, why: impl std::fmt::Display) -> Error {
    Error::Io { path: name.to_string(), message: format!("corrupt checkpoint file: {why}") }
}

/// A checkpoint that must not be resumed, with why.
pub fn refused(name: &str, why: impl std::fmt::Display) -> Error {
    Error::Checkpoint { path: name.to_string(), message: why.to_string() }
}

/// A log entry's bytes: the envelope around `value`; `name` names the file for errors.
pub fn encode_entry<T: Serialize>(name: &str, value: &T) -> Result<Vec<u8>> {
    let body = serde_json::to_string(value).map_err(|e| io(name, e))?;
    let env = Envelope { version: VERSION, crc32: crc32fast::hash(body.as_bytes()), body };
    serde_json::to_vec(&env).map_err(|e| io(name, e))
}

/// Parses a log entry's bytes: any bytes give an entry or an error naming `name`.
pub fn parse_entry<T: DeserializeOwned>(name: &str, bytes: &[u8]) -> Result<T> {
    let env: Envelope = serde_json::from_slice(bytes).map_err(|e| corrupt(name, e))?;
    if env.version != VERSION {
        return Err(corrupt(name, format!("format version {} (this build reads {VERSION})", env.version)));
    }
    if crc32fast::hash(env.body.as_bytes()) != env.crc32 {
        return Err(corrupt(name, "checksum mismatch"));
    }
    serde_json::from_str(&env.body).map_err(|e| corrupt(name, e))
}

/// What a file name in a log folder is: a batch id (decimal, no leading zeros), a temporary of
/// an interrupted write, or something the engine did not write.
pub enum LogName {
    /// A log entry of this batch.
    Batch(u64),
    /// A temporary left by an interrupted write: skipped silently.
    Temporary,
    /// Anything else (`0018`, `notes.txt`): ignored, with a warning naming it.
    Foreign,
}

/// Classifies a file name found in a log folder.
pub fn log_name(name: &str) -> LogName {
    match name.parse::<u64>() {
        Ok(id) if id.to_string() == name => LogName::Batch(id),
        _ if weir_sdk::runner_api::is_temporary(name) || name.ends_with(".tmp") => LogName::Temporary,
        _ => LogName::Foreign,
    }
}

/// The sorted batch ids among `names`, the entries of log folder `dir` (named with `name_of`
/// for the warnings about files the engine did not write).
pub fn batch_ids(names: impl IntoIterator<Item = String>, name_of: impl Fn(&str) -> String) -> Vec<u64> {
    let mut ids = Vec::new();
    for n in names {
        match log_name(&n) {
            LogName::Batch(id) => ids.push(id),
            LogName::Temporary => {}
            LogName::Foreign => {
                tracing::warn!(file = %name_of(&n), "ignoring a file the engine did not write in the checkpoint")
            }
        }
    }
    ids.sort_unstable();
    ids
}

/// Checks that `ids` (sorted) have no hole; the error names the first missing file
/// (`name_of(id)`).
pub fn check_contiguous(ids: &[u64], name_of: impl Fn(u64) -> String) -> Result<()> {
    for w in ids.windows(2) {
        if w[1] != w[0] + 1 {
            return Err(refused(
                &name_of(w[0] + 1),
                format!(
                    "missing: the log has a hole between {} and {}; a checkpoint with missing log entries \
                     cannot be resumed exactly once",
                    name_of(w[0]),
                    name_of(w[1])
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn entries_round_trip_and_damage_is_named() {
        let e = SourceOffsets { name: "Read".into(), start: Value::Null, end: serde_json::json!([1]), counts: vec![2] };
        let bytes = encode_entry("cp/offsets/3", &e).unwrap();
        assert_eq!(parse_entry::<SourceOffsets>("cp/offsets/3", &bytes).unwrap(), e);
        let mut bad = bytes.clone();
        let n = bad.len();
        bad[n / 2] ^= 1;
        if let Err(err) = parse_entry::<SourceOffsets>("cp/offsets/3", &bad) {
            assert!(err.to_string().contains("cp/offsets/3"), "{err}");
        }
        assert!(check_contiguous(&[1, 2, 4], |i| format!("log/{i}")).unwrap_err().to_string().contains("log/3"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]
        /// Any bytes give an entry or an error naming the file.
        #[test]
        fn parsing_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Err(e) = parse_entry::<SourceOffsets>("cp/x", &bytes) {
                prop_assert!(e.to_string().contains("cp/x"));
            }
        }
    }
}
