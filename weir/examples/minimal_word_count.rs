//! Minimal word count over in-memory lines.
//!
//! Run with: `cargo run -p weir --example minimal_word_count -- --runner direct`

use weir::prelude::*;

fn main() -> Result<()> {
    weir::register_with_logging();
    let options = PipelineOptions::from_env_args()?;
    let p = Pipeline::new(options);
    let lines = vec![
        "To be, or not to be: that is the question:",
        "Whether 'tis nobler in the mind to suffer",
        "The slings and arrows of outrageous fortune,",
        "Or to take arms against a sea of troubles,",
    ];
    p.apply("Create", Create::of(lines.into_iter().map(String::from)))
        .apply(
            "ExtractWords",
            FlatMap::new(|line: String| {
                line.split(|c: char| !c.is_alphabetic() && c != '\'')
                    .filter(|w| !w.is_empty())
                    .map(|w| w.to_lowercase())
                    .collect::<Vec<_>>()
            }),
        )
        .apply("CountWords", Count::per_element())
        .apply("Format", Map::new(|kv: KV<String, i64>| format!("{}: {}", kv.key, kv.value)))
        .apply("Print", Map::new(|line: String| println!("{line}")));
    let state = p.run()?.wait_until_finish(None)?;
    eprintln!("pipeline finished: {state:?}");
    Ok(())
}
