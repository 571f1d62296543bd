//! A job's Weir flags: the server's, with those a submitted pipeline's options give
//! (`--weir_<flag>`), and whether they ask for a runner of several processes.

use weir_sdk::PipelineOptions;

/// Whether Weir's flags ask for a runner of several processes, each running this program
/// (`--processes N` for N > 1, or a hostfile): each job then runs in processes of its own.
pub fn several_processes(weir_args: &[String]) -> bool {
    let mut args = weir_args.iter();
    while let Some(a) = args.next() {
        let value = match a.split_once('=') {
            Some((flag, v)) => (flag, Some(v.to_string())),
            None => (a.as_str(), None),
        };
        match value {
            ("--hostfile", _) => return true,
            ("--processes", v) => {
                let v = v.or_else(|| args.next().cloned()).unwrap_or_default();
                if v.parse::<usize>().is_ok_and(|n| n > 1) {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

/// The prefix of Weir's own flags among a submitted pipeline's options: Beam Python's
/// `--weir_parallelism=4` is Weir's `--parallelism 4` for that job.
pub const WEIR_OPTION_PREFIX: &str = "weir_";

/// The Beam option name of Weir flag `flag` (`--max-batch-size`: `weir_max_batch_size`).
pub fn option_name(flag: &str) -> String {
    format!("{WEIR_OPTION_PREFIX}{}", flag.trim_start_matches("--").replace('-', "_"))
}

/// `base` (the server's Weir flags) with the Weir flags a job's options give: each replaces the
/// server's value of its flag; `true` is a switch given, `false` one left out.
pub fn job_weir_args(base: &[String], options: &prost_types::Struct) -> Vec<String> {
    use prost_types::value::Kind;
    let mut given: Vec<(String, Option<String>)> = Vec::new();
    for flag in PipelineOptions::valid_flags() {
        let key = format!("beam:option:{}:v1", option_name(&flag));
        let value = match options.fields.get(&key).and_then(|v| v.kind.as_ref()) {
            Some(Kind::StringValue(s)) => s.clone(),
            Some(Kind::NumberValue(n)) => n.to_string(),
            Some(Kind::BoolValue(b)) => b.to_string(),
            _ => continue,
        };
        match value.as_str() {
            "true" => given.push((flag, None)),
            "false" => {}
            _ => given.push((flag, Some(value))),
        }
    }
    // The server's flags, less those the job gives (a flag and its value, or `--flag=value`).
    let mut args = Vec::new();
    let mut base = base.iter().peekable();
    while let Some(a) = base.next() {
        let flag = a.split_once('=').map_or(a.as_str(), |(f, _)| f);
        if given.iter().any(|(g, _)| g == flag) {
            if !a.contains('=') && base.peek().is_some_and(|v| !v.starts_with("--")) {
                base.next();
            }
            continue;
        }
        args.push(a.clone());
    }
    for (flag, value) in given {
        args.push(flag);
        args.extend(value);
    }
    args
}
