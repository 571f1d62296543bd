//! Word count over text files, written as sharded output.
//!
//! Run with:
//! `cargo run -p weir --example word_count -- --input 'README.md' --output /tmp/counts --runner direct`
//!
//! `--input` is a file or glob pattern, `--output` the prefix of the output shards,
//! `--shards` their number; every other flag is a pipeline option.

use weir::prelude::*;

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
    let input = take_flag(&mut args, "--input").ok_or("missing --input FILE_OR_GLOB")?;
    let output = take_flag(&mut args, "--output").ok_or("missing --output PREFIX")?;
    let shards: u32 = take_flag(&mut args, "--shards").map(|s| s.parse()).transpose()?.unwrap_or(3);
    let p = Pipeline::new(PipelineOptions::from_args(args)?);
    p.apply("ReadLines", TextIO::read().from(input))
        .apply(
            "ExtractWords",
            FlatMap::new(|line: String| {
                line.split(|c: char| !c.is_alphanumeric() && c != '\'')
                    .filter(|w| !w.is_empty())
                    .map(|w| w.to_lowercase())
                    .collect::<Vec<_>>()
            }),
        )
        .apply("CountWords", Count::per_element())
        .apply("Format", ToString::kvs(": "))
        .apply("WriteCounts", TextIO::write().to(output).with_suffix(".txt").with_num_shards(shards));
    let state = p.run()?.wait_until_finish(None)?;
    eprintln!("word count finished: {state:?}");
    Ok(())
}
