//! What a reader does with a record it cannot parse: skip it and count it, fail the pipeline,
//! or keep it in a dead-letter file (Beam's dead-letter pattern, Spark's `mode` of
//! `PERMISSIVE`/`FAILFAST`/`DROPMALFORMED` with `badRecordsPath`).

use crate::error::UserResult;
use crate::metrics::Metrics;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// What happens to a record that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum BadRecordPolicy {
    /// Skip it: a warning names the file and the place, and a counter counts it.
    #[default]
    Skip,
    /// Fail the pipeline with an error naming the file and the place.
    Fail,
    /// Skip it as [`BadRecordPolicy::Skip`] does, and append the record verbatim, one per line,
    /// to this file, which is emptied when the pipeline starts reading.
    DeadLetter(PathBuf),
}

impl std::str::FromStr for BadRecordPolicy {
    type Err = String;
    /// `skip`, `fail` or `dead-letter=FILE`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "skip" => Ok(BadRecordPolicy::Skip),
            "fail" => Ok(BadRecordPolicy::Fail),
            _ => match s.strip_prefix("dead-letter=") {
                Some(file) if !file.is_empty() => Ok(BadRecordPolicy::DeadLetter(file.into())),
                _ => Err(format!("'{s}' is not one of skip, fail, dead-letter=FILE")),
            },
        }
    }
}

/// A policy in force for one read: every split of the read shares its dead-letter file.
#[derive(Clone, Debug)]
pub struct BadRecords {
    fail: bool,
    dead_letter: Option<Arc<DeadLetter>>,
    /// The counter of skipped records: namespace and name.
    counter: (String, String),
    /// What a record is called in messages ("CSV record", "Nexmark event").
    what: String,
    /// How to fail: named in the error so the user knows which switch made it fatal.
    fail_hint: String,
}

#[derive(Debug)]
struct DeadLetter {
    path: PathBuf,
    file: Mutex<Option<std::fs::File>>,
}

impl BadRecords {
    /// `policy` for records called `what`, counted as `namespace:name` when skipped.
    pub fn new(policy: BadRecordPolicy, what: &str, namespace: &str, name: &str) -> Self {
        let (fail, dead_letter) = match policy {
            BadRecordPolicy::Skip => (false, None),
            BadRecordPolicy::Fail => (true, None),
            BadRecordPolicy::DeadLetter(path) => (false, Some(Arc::new(DeadLetter { path, file: Mutex::new(None) }))),
        };
        BadRecords {
            fail,
            dead_letter,
            counter: (namespace.to_string(), name.to_string()),
            what: what.to_string(),
            fail_hint: "the bad-record policy is fail".to_string(),
        }
    }
    /// Names the switch that made bad records fatal, for the error (`--on-malformed fail`).
    pub fn with_fail_hint(mut self, hint: impl Into<String>) -> Self {
        self.fail_hint = hint.into();
        self
    }
    /// Handles the bad record `raw` found at `place` (`file:line`, `file, byte 1234`) because of
    /// `error`: an error under [`BadRecordPolicy::Fail`], otherwise a warning, the counter, and
    /// the dead-letter file when there is one.
    pub fn handle(&self, place: &str, raw: &[u8], error: &dyn std::fmt::Display) -> UserResult {
        let shown = printable(raw, 80);
        if self.fail {
            return Err(format!("{place}: malformed {} ({error}): {shown} ({})", self.what, self.fail_hint).into());
        }
        Metrics::counter(&self.counter.0, &self.counter.1)?.inc();
        tracing::warn!("{place}: skipping a malformed {} ({error}): {shown}", self.what);
        if let Some(d) = &self.dead_letter {
            d.append(raw)?;
        }
        Ok(())
    }
}

/// At most `max` characters of `raw` for a message, control characters escaped (`\u{1b}`, `\t`)
/// so that a bad record cannot move the cursor, recolour or clear the terminal showing it.
pub fn printable(raw: &[u8], max: usize) -> String {
    String::from_utf8_lossy(raw)
        .chars()
        .take(max)
        .flat_map(|c| {
            let escaped = c.is_control().then(|| c.escape_debug());
            escaped.into_iter().flatten().chain((!c.is_control()).then_some(c))
        })
        .collect()
}

impl DeadLetter {
    fn append(&self, record: &[u8]) -> UserResult {
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let err = |e: std::io::Error| format!("dead-letter file {}: {e}", self.path.display());
        if file.is_none() {
            *file = Some(std::fs::File::create(&self.path).map_err(err)?);
        }
        if let Some(f) = file.as_mut() {
            f.write_all(record).and_then(|_| f.write_all(b"\n")).map_err(err)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_records_are_shown_with_control_characters_escaped() {
        let raw = b"{\"a\":1}\x1b[2J\tend\x07";
        assert_eq!(printable(raw, 80), "{\"a\":1}\\u{1b}[2J\\tend\\u{7}");
        let fail = BadRecords::new(BadRecordPolicy::Fail, "event", "io", "bad");
        let err = fail.handle("f:1", raw, &"bad").unwrap_err().to_string();
        assert!(!err.contains('\x1b') && err.contains("\\u{1b}[2J"), "{err:?}");
    }

    #[test]
    fn policies_parse_and_act() {
        assert_eq!("skip".parse::<BadRecordPolicy>(), Ok(BadRecordPolicy::Skip));
        assert_eq!("fail".parse::<BadRecordPolicy>(), Ok(BadRecordPolicy::Fail));
        assert_eq!("dead-letter=x".parse::<BadRecordPolicy>(), Ok(BadRecordPolicy::DeadLetter("x".into())));
        assert!("dead-letter=".parse::<BadRecordPolicy>().unwrap_err().contains("skip, fail, dead-letter=FILE"));

        let fail = BadRecords::new(BadRecordPolicy::Fail, "CSV record", "io", "bad").with_fail_hint("--strict");
        let e = fail.handle("a.csv, byte 7", b"x,\"y", &"unclosed quote").unwrap_err().to_string();
        assert!(e.contains("a.csv, byte 7") && e.contains("CSV record") && e.contains("--strict"), "{e}");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dead.txt");
        let keep = BadRecords::new(BadRecordPolicy::DeadLetter(path.clone()), "row", "io", "bad");
        keep.handle("f:1", b"one", &"e").unwrap();
        keep.clone().handle("f:2", b"two", &"e").unwrap();
        assert_eq!(std::fs::read_to_string(path).unwrap(), "one\ntwo\n");
    }
}
