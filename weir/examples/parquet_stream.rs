//! Parquet files as they arrive in a directory, summed per city in one-minute event-time
//! windows, written as Parquet exactly once.
//!
//! Run with:
//! `cargo run -p weir --example parquet_stream -- --input in/ --output out/ --checkpoint-dir ck/`
//!
//! Each `*.parquet` file of `--input` (columns `city`, `fare`, `ts` in ms since the epoch) is
//! read once, also across restarts from `--checkpoint-dir`. With the default trigger
//! (available-now) the files there are read and the job stops; with
//! `--trigger processing-time --trigger-interval-ms 1000` the directory is watched until no
//! file has come for `--idle-secs` (default 60), or the job is drained. The windows close when
//! the watch ends, and each window's totals go to files named after it under `--output`,
//! committed once, with the list of committed files in `--output/_weir_metadata`.

use serde::{Deserialize, Serialize};
use std::time::Duration;
use weir::core::streaming::StreamingTrigger;
use weir::io::file_io::{Continuously, FileIO, Termination};
use weir::io::read_files::ReadFiles;
use weir::parquet::{ParquetFormat, ParquetIO};
use weir::prelude::*;

/// A row of the input.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Trip {
    city: String,
    fare: i64,
    ts: i64,
}

/// A row of the output: a city's fares in one window (the window is in the file's name).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct CityTotal {
    city: String,
    total: i64,
}

fn take_flag(args: &mut Vec<String>, name: &str) -> Option<String> {
    let i = args.iter().position(|a| a == name)?;
    if i + 1 >= args.len() {
        return None;
    }
    let v = args.remove(i + 1);
    args.remove(i);
    Some(v)
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    weir::register_with_logging();
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let input = take_flag(&mut args, "--input").ok_or("missing --input DIR")?;
    let output = take_flag(&mut args, "--output").ok_or("missing --output DIR")?;
    let idle: u64 = take_flag(&mut args, "--idle-secs").map(|s| s.parse()).transpose()?.unwrap_or(60);
    let options = PipelineOptions::from_args(args)?;
    let available_now =
        options.get::<weir::core::streaming::StreamingOptions>().trigger == StreamingTrigger::AvailableNow;
    let p = Pipeline::new(options);

    // Watch the directory: every new file once; the records' own times are the event times, so
    // the watch holds the watermark until it ends.
    let until = if available_now {
        Termination::after_iterations(1)
    } else {
        Termination::after_time_since_new_output(Duration::from_secs(idle))
    };
    let watch = Continuously::new(Duration::from_secs(1), until).hold_watermark(true);
    let pattern = format!("{}/*.parquet", input.trim_end_matches('/'));
    p.apply("Watch", FileIO::match_pattern(pattern).watching(watch))
        .apply("Read", ReadFiles::of(ParquetFormat::<Trip>::new()).with_timestamps(|t: &Trip| t.ts))
        .apply("Minutes", Window::into(FixedWindows::of(Duration::from_secs(60))))
        .apply("ByCity", Map::new(|t: Trip| KV::new(t.city, t.fare)))
        .apply("Sum", Sum::per_key())
        .apply("Rows", Map::new(|kv: KV<String, i64>| CityTotal { city: kv.key, total: kv.value }))
        .apply("Write", ParquetIO::write::<CityTotal>(output).windowed(true));
    let state = p.run()?.wait_until_finish(None)?;
    println!("{state:?}");
    Ok(())
}
