//! Events files in the three formats users have: Beam's JSON lines, CSV and Parquet.
//!
//! CSV and Parquet hold one row per event, with the union of the Person, Auction and Bid
//! fields under Beam's names, and nulls (empty CSV fields) where an event lacks a field: the
//! table DuckDB or Spark make of the JSON-lines export. An event's kind follows from which
//! fields are set: `auction` makes a Bid, `seller` an Auction, and `id` alone a Person. A text
//! field of the event's kind that is missing is empty (CSV writes an empty string and a null
//! alike).
//! Columns are found by name, in any order; other columns are ignored, and a file without one
//! of the number columns is refused, naming it (a missing text column reads as empty).
//!
//! [`EventFiles`] reads all three as one [`FileFormat`] of the SDK's splittable file reader,
//! choosing by each file's extension (`.csv`, `.parquet`, anything else is JSON lines): JSON
//! lines and CSV split by byte range, Parquet by row group. [`write_events`] writes any of them.

use crate::model::{Auction, Bid, Event, Person};
#[cfg(feature = "parquet")]
use arrow_array::cast::AsArray;
#[cfg(feature = "parquet")]
use arrow_array::types::Int64Type;
#[cfg(feature = "parquet")]
use arrow_array::{Array, ArrayRef, RecordBatch};
use std::sync::Arc;
#[cfg(feature = "parquet")]
use weir_parquet::RowGroups;
use weir_sdk::io::file_io::FileMetadata;
use weir_sdk::io::read_files::{read_lines, CsvOptions, FileFormat, Records};
use weir_sdk::splittable::{Claims, OffsetRange, OffsetRangeTracker};
use weir_sdk::UserResult;

/// The columns of the events table, in the order DuckDB gives them when it reads the
/// JSON-lines export (each kind's fields in the order of the first event of that kind).
pub const COLUMNS: [&str; 18] = [
    "id",
    "name",
    "emailAddress",
    "creditCard",
    "city",
    "state",
    "dateTime",
    "extra",
    "itemName",
    "description",
    "initialBid",
    "reserve",
    "expires",
    "seller",
    "category",
    "auction",
    "bidder",
    "price",
];

const INTEGER: [bool; 18] = [
    true, false, false, false, false, false, true, false, false, false, true, true, true, true, true, true, true, true,
];

/// The format of an events file, by its name's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventsFormat {
    /// Beam's JSON lines (any extension but the two below).
    JsonLines,
    /// `.csv`
    Csv,
    /// `.parquet`
    Parquet,
}

impl EventsFormat {
    /// The format of the file `path` names.
    pub fn of(path: &str) -> EventsFormat {
        let lower = path.to_ascii_lowercase();
        if lower.ends_with(".csv") {
            EventsFormat::Csv
        } else if lower.ends_with(".parquet") {
            EventsFormat::Parquet
        } else {
            EventsFormat::JsonLines
        }
    }
}

/// One row of the events table: a field of each column, any of them missing.
#[derive(Default)]
struct Row<'a> {
    ints: [Option<i64>; 18],
    strs: [Option<&'a str>; 18],
}

/// The event of a row whose cells `int` and `text` give (by column of [`COLUMNS`]); only the
/// cells the row's kind needs are asked for.
fn event_of<'a>(int: impl Fn(usize) -> Option<i64>, text: impl Fn(usize) -> Option<&'a str>) -> Result<Event, String> {
    let need = |i: usize| int(i).ok_or_else(|| format!("no {}", COLUMNS[i]));
    // A text field of the row's kind that is missing is empty (CSV writes "" and null alike).
    let text_of = |i: usize| text(i).unwrap_or("").to_string();
    let extra = || -> Arc<str> { text(7).unwrap_or("").into() };
    if let Some(auction) = int(15) {
        return Ok(Event::Bid(Bid {
            auction,
            bidder: need(16)?,
            price: need(17)?,
            date_time: need(6)?,
            extra: extra(),
        }));
    }
    if int(13).is_some() || text(8).is_some() {
        return Ok(Event::Auction(Box::new(Auction {
            id: need(0)?,
            item_name: text_of(8),
            description: text_of(9),
            initial_bid: need(10)?,
            reserve: need(11)?,
            date_time: need(6)?,
            expires: need(12)?,
            seller: need(13)?,
            category: need(14)?,
            extra: extra(),
        })));
    }
    if let Some(id) = int(0) {
        return Ok(Event::Person(Box::new(Person {
            id,
            name: text_of(1),
            email_address: text_of(2),
            credit_card: text_of(3),
            city: text_of(4),
            state: text_of(5),
            date_time: need(6)?,
            extra: extra(),
        })));
    }
    Err("neither a Person (id), an Auction (seller) nor a Bid (auction)".into())
}

impl Row<'_> {
    fn event(&self) -> Result<Event, String> {
        event_of(|i| self.ints[i], |i| self.strs[i])
    }
}

/// Reads events files of all three formats (see the module documentation).
#[derive(Clone, Default)]
pub struct EventFiles {
    #[cfg(feature = "parquet")]
    groups: RowGroups,
}

/// Whether this launcher reads and writes Parquet; else why not and how to build one that does.
pub fn require_parquet() -> Result<(), String> {
    crate::require_feature(cfg!(feature = "parquet"), "Parquet", "parquet")
}

impl FileFormat for EventFiles {
    type Out = Event;
    fn name(&self) -> &'static str {
        "Nexmark event"
    }
    fn units(&self, file: &FileMetadata) -> UserResult<i64> {
        match EventsFormat::of(&file.path) {
            #[cfg(feature = "parquet")]
            EventsFormat::Parquet => self.groups.count(file),
            #[cfg(not(feature = "parquet"))]
            EventsFormat::Parquet => Err(format!("{}: {}", file.path, require_parquet().unwrap_err()).into()),
            _ => Ok(file.size_bytes as i64),
        }
    }
    fn initial_splits(&self, file: &FileMetadata, whole: OffsetRange) -> UserResult<Vec<OffsetRange>> {
        match EventsFormat::of(&file.path) {
            EventsFormat::Parquet => Ok(whole.split(1)),
            _ => Ok(whole.split(16 << 20)),
        }
    }
    fn read(
        &mut self,
        file: &FileMetadata,
        tracker: &mut Claims<'_, OffsetRangeTracker>,
        out: &mut Records<'_, '_, Event>,
    ) -> UserResult {
        let path = &file.path;
        match EventsFormat::of(path) {
            EventsFormat::JsonLines => read_lines(path, tracker, |line, at| {
                if line.iter().all(u8::is_ascii_whitespace) {
                    return Ok(());
                }
                match crate::json::parse(line) {
                    Ok(e) => out.emit(e),
                    Err(e) => out.bad(&format!("{path}, byte {at}"), line, &e),
                }
            }),
            EventsFormat::Csv => read_csv(path, tracker, out),
            #[cfg(feature = "parquet")]
            EventsFormat::Parquet => self.groups.read(file, tracker, |batch, rg| read_batch(path, rg, &batch, out)),
            #[cfg(not(feature = "parquet"))]
            EventsFormat::Parquet => Err(format!("{path}: {}", require_parquet().unwrap_err()).into()),
        }
    }
}

/// Where each of [`COLUMNS`] is in a header or schema, if it is there.
fn positions<'a>(names: impl Iterator<Item = &'a str>) -> [Option<usize>; 18] {
    let mut at = [None; 18];
    for (i, name) in names.enumerate() {
        if let Some(c) = COLUMNS.iter().position(|c| *c == name) {
            at[c] = Some(i);
        }
    }
    at
}

/// The positions of [`COLUMNS`] in a file's header or schema, or an error naming the file and
/// the first column the reader needs that it lacks: every number column (an event of some kind
/// needs each); a missing text column reads as empty.
fn required_positions<'a>(path: &str, names: impl Iterator<Item = &'a str>) -> UserResult<[Option<usize>; 18]> {
    let at = positions(names);
    match (0..COLUMNS.len()).find(|&c| INTEGER[c] && at[c].is_none()) {
        None => Ok(at),
        Some(c) => Err(format!(
            "{path}: no column '{}': an events table needs the columns {}",
            COLUMNS[c],
            (0..COLUMNS.len()).filter(|&c| INTEGER[c]).map(|c| COLUMNS[c]).collect::<Vec<_>>().join(", ")
        )
        .into()),
    }
}

fn read_csv(path: &str, tracker: &mut Claims<'_, OffsetRangeTracker>, out: &mut Records<'_, '_, Event>) -> UserResult {
    let mut at: Option<[Option<usize>; 18]> = None;
    CsvOptions::default().read_records(path, tracker, |header, line, offset| {
        let place = || format!("{path}, byte {offset}");
        let at = match at {
            Some(ref at) => at,
            None => at.insert(required_positions(path, header.iter().map(|h| std::str::from_utf8(h).unwrap_or("")))?),
        };
        let record = match line.record() {
            Ok(r) => r,
            Err((raw, why)) => return out.bad(&place(), raw, &why),
        };
        let raw = || weir_sdk::io::read_files::record_text(record, b',');
        let mut row = Row::default();
        let mut bad = None;
        for (c, pos) in at.iter().enumerate() {
            let Some(cell) = pos.and_then(|p| record.get(p)).filter(|s| !s.is_empty()) else { continue };
            let Ok(cell) = std::str::from_utf8(cell) else {
                bad = Some(format!("{} is not UTF-8", COLUMNS[c]));
                continue;
            };
            if INTEGER[c] {
                match cell.parse::<i64>() {
                    Ok(v) => row.ints[c] = Some(v),
                    Err(e) => bad = Some(format!("{}: '{cell}' {e}", COLUMNS[c])),
                }
            } else {
                row.strs[c] = Some(cell);
            }
        }
        match bad.map_or_else(|| row.event(), Err) {
            Ok(e) => out.emit(e),
            Err(e) => out.bad(&place(), &raw(), &e),
        }
    })
}

#[cfg(feature = "parquet")]
fn int_column(batch: &RecordBatch, i: Option<usize>) -> Result<Option<ArrayRef>, String> {
    let Some(i) = i else { return Ok(None) };
    let col = batch.column(i);
    let cast = arrow_cast::cast(col, &arrow_schema::DataType::Int64)
        .map_err(|e| format!("column {} is not an integer: {e}", batch.schema().field(i).name()))?;
    Ok(Some(cast))
}

#[cfg(feature = "parquet")]
fn str_column(batch: &RecordBatch, i: Option<usize>) -> Result<Option<ArrayRef>, String> {
    let Some(i) = i else { return Ok(None) };
    let cast = arrow_cast::cast(batch.column(i), &arrow_schema::DataType::Utf8)
        .map_err(|e| format!("column {} is not text: {e}", batch.schema().field(i).name()))?;
    Ok(Some(cast))
}

/// The events of a record batch of the events table.
#[cfg(feature = "parquet")]
fn read_batch(path: &str, rg: i64, batch: &RecordBatch, out: &mut Records<'_, '_, Event>) -> UserResult {
    let schema = batch.schema();
    let at = required_positions(path, schema.fields().iter().map(|f| f.name().as_str()))?;
    let mut columns: Vec<Option<ArrayRef>> = Vec::with_capacity(18);
    for c in 0..18 {
        let col = if INTEGER[c] { int_column(batch, at[c]) } else { str_column(batch, at[c]) };
        columns.push(col.map_err(|e| format!("{path}, row group {rg}: {e}"))?);
    }
    let ints: Vec<Option<&arrow_array::Int64Array>> =
        (0..18).map(|c| columns[c].as_ref().filter(|_| INTEGER[c]).map(|a| a.as_primitive::<Int64Type>())).collect();
    let strs: Vec<Option<&arrow_array::StringArray>> =
        (0..18).map(|c| columns[c].as_ref().filter(|_| !INTEGER[c]).map(|a| a.as_string::<i32>())).collect();
    for r in 0..batch.num_rows() {
        let int = |c: usize| ints[c].filter(|a| a.is_valid(r)).map(|a| a.value(r));
        let text = |c: usize| strs[c].filter(|a| a.is_valid(r)).map(|a| a.value(r));
        match event_of(int, text) {
            Ok(e) => out.emit(e)?,
            Err(e) => {
                let raw = format!("row {r} of row group {rg}");
                out.bad(&format!("{path}, row group {rg}, row {r}"), raw.as_bytes(), &e)?;
            }
        }
    }
    Ok(())
}

/// The cells of an event's row: integers and texts by column, `None` where the kind lacks one.
fn cells(event: &Event) -> ([Option<i64>; 18], [Option<&str>; 18]) {
    let mut ints = [None; 18];
    let mut strs = [None; 18];
    match event {
        Event::Person(p) => {
            ints[0] = Some(p.id);
            strs[1] = Some(p.name.as_str());
            strs[2] = Some(p.email_address.as_str());
            strs[3] = Some(p.credit_card.as_str());
            strs[4] = Some(p.city.as_str());
            strs[5] = Some(p.state.as_str());
            ints[6] = Some(p.date_time);
            strs[7] = Some(&*p.extra);
        }
        Event::Auction(a) => {
            ints[0] = Some(a.id);
            ints[6] = Some(a.date_time);
            strs[7] = Some(&*a.extra);
            strs[8] = Some(a.item_name.as_str());
            strs[9] = Some(a.description.as_str());
            ints[10] = Some(a.initial_bid);
            ints[11] = Some(a.reserve);
            ints[12] = Some(a.expires);
            ints[13] = Some(a.seller);
            ints[14] = Some(a.category);
        }
        Event::Bid(b) => {
            ints[6] = Some(b.date_time);
            strs[7] = Some(&*b.extra);
            ints[15] = Some(b.auction);
            ints[16] = Some(b.bidder);
            ints[17] = Some(b.price);
        }
    }
    (ints, strs)
}

/// Rows per Parquet row group of an export: 16 groups of a 1M-event file, for 2 to 16 workers.
pub const ROW_GROUP_ROWS: usize = 65_536;

/// Writes `events` to `out` in `format`.
pub fn write_events(
    format: EventsFormat,
    events: impl Iterator<Item = Event>,
    out: &mut dyn std::io::Write,
) -> std::io::Result<u64> {
    let mut n = 0;
    match format {
        EventsFormat::JsonLines => {
            for e in events {
                out.write_all(e.to_json().as_bytes())?;
                out.write_all(b"\n")?;
                n += 1;
            }
        }
        EventsFormat::Csv => {
            let mut w = csv::Writer::from_writer(out);
            w.write_record(COLUMNS)?;
            let mut itoa = [const { String::new() }; 18];
            for e in events {
                let (ints, strs) = cells(&e);
                for c in 0..18 {
                    itoa[c].clear();
                    if let Some(v) = ints[c] {
                        itoa[c].push_str(&v.to_string());
                    }
                }
                w.write_record((0..18).map(|c| if INTEGER[c] { itoa[c].as_str() } else { strs[c].unwrap_or("") }))?;
                n += 1;
            }
            w.flush()?;
        }
        EventsFormat::Parquet => n = write_parquet(events, out)?,
    }
    Ok(n)
}

/// Writes `events` to `out` as a Parquet file (see [`write_events`]).
#[cfg(feature = "parquet")]
fn write_parquet(events: impl Iterator<Item = Event>, out: &mut dyn std::io::Write) -> std::io::Result<u64> {
    let mut n = 0;
    use arrow_array::builder::{Int64Builder, StringBuilder};
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    let fields: Vec<arrow_schema::Field> = (0..18)
        .map(|c| {
            let t = if INTEGER[c] { arrow_schema::DataType::Int64 } else { arrow_schema::DataType::Utf8 };
            arrow_schema::Field::new(COLUMNS[c], t, true)
        })
        .collect();
    let schema = Arc::new(arrow_schema::Schema::new(fields));
    let props = WriterProperties::builder()
        .set_compression(parquet::basic::Compression::SNAPPY)
        .set_max_row_group_size(ROW_GROUP_ROWS)
        .build();
    let mut bytes = Vec::new();
    let err = |e: parquet::errors::ParquetError| std::io::Error::other(e.to_string());
    let mut w = ArrowWriter::try_new(&mut bytes, schema.clone(), Some(props)).map_err(err)?;
    let mut events = events.peekable();
    while events.peek().is_some() {
        let mut ib: Vec<Int64Builder> = (0..18).map(|_| Int64Builder::new()).collect();
        let mut sb: Vec<StringBuilder> = (0..18).map(|_| StringBuilder::new()).collect();
        for e in events.by_ref().take(ROW_GROUP_ROWS) {
            let (ints, strs) = cells(&e);
            for c in 0..18 {
                if INTEGER[c] {
                    ib[c].append_option(ints[c]);
                } else {
                    sb[c].append_option(strs[c]);
                }
            }
            n += 1;
        }
        let columns: Vec<ArrayRef> =
            (0..18)
                .map(|c| {
                    if INTEGER[c] {
                        Arc::new(ib[c].finish()) as ArrayRef
                    } else {
                        Arc::new(sb[c].finish()) as ArrayRef
                    }
                })
                .collect();
        let batch = RecordBatch::try_new(schema.clone(), columns).map_err(std::io::Error::other)?;
        w.write(&batch).map_err(err)?;
    }
    w.close().map_err(err)?;
    out.write_all(&bytes)?;
    Ok(n)
}

/// Without the `parquet` feature: refused (see [`require_parquet`]).
#[cfg(not(feature = "parquet"))]
fn write_parquet(_: impl Iterator<Item = Event>, _: &mut dyn std::io::Write) -> std::io::Result<u64> {
    Err(std::io::Error::other(require_parquet().unwrap_err()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Events written in each format and read back in splits come out the same.
    #[test]
    fn every_format_round_trips_in_splits() {
        let config = crate::NexmarkConfig { num_events: 3_000, ..Default::default() };
        let mut events: Vec<Event> = crate::generator::split_events(&config).map(|n| n.event).collect();
        // Empty texts, which CSV cannot tell from nulls: the kind still follows from the rest.
        for e in events.iter_mut().take(60) {
            match e {
                Event::Auction(a) => a.item_name.clear(),
                Event::Person(p) => p.email_address.clear(),
                Event::Bid(b) => b.extra = "".into(),
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let mut formats = vec![("e.jsonl", EventsFormat::JsonLines), ("e.csv", EventsFormat::Csv)];
        if cfg!(feature = "parquet") {
            formats.push(("e.parquet", EventsFormat::Parquet));
        }
        for (name, format) in formats {
            let path = dir.path().join(name);
            let mut f = std::fs::File::create(&path).unwrap();
            assert_eq!(write_events(format, events.iter().cloned(), &mut f).unwrap(), events.len() as u64);
            drop(f);
            let meta = FileMetadata {
                path: path.to_string_lossy().into_owned(),
                size_bytes: std::fs::metadata(&path).unwrap().len(),
                last_modified_millis: 0,
            };
            assert_eq!(EventsFormat::of(&meta.path), format);
            let reader = EventFiles::default();
            let units = reader.units(&meta).unwrap();
            let mut got = Vec::new();
            for r in OffsetRange::new(0, units).split(777) {
                let read = weir_sdk::io::read_files::ReadFiles::of(reader.clone());
                got.extend(read.process_directly(meta.clone(), r, 500).unwrap().into_iter().map(|(e, _)| e));
            }
            assert!(got == events, "{name}: {} events read back", got.len());
        }
    }
}
