//! Pipeline options, parsed once from kebab-case flags or built in code.
//!
//! As in Beam, the options of a pipeline are the core ones every pipeline has (the runner, the
//! job name, `--explain`, when metrics are pushed) plus *option groups* that the crates which
//! use them define: each runner its own (`--parallelism`, `--direct-seed`...), the metrics sinks
//! theirs (`--metrics-http-url`...). A group is a `clap::Args` struct; its crate registers it
//! with [`register_option_group`] (the `weir` facade's `register()` does it for every crate), and
//! code reads it with [`PipelineOptions::get`]. The SDK knows no runner and no sink: a flag
//! exists once the crate that reads it is registered, and an unknown flag is an error listing
//! the valid ones.

use crate::error::{Error, Result};
use std::any::Any;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, RwLock};

/// A group of options a runner or sink defines: flags (`clap::Args`) with defaults.
pub trait OptionGroup:
    clap::Args + clap::FromArgMatches + Clone + Default + std::fmt::Debug + PartialEq + Send + Sync + 'static
{
}

impl<T> OptionGroup for T where
    T: clap::Args + clap::FromArgMatches + Clone + Default + std::fmt::Debug + PartialEq + Send + Sync + 'static
{
}

/// A stored group, its type erased.
trait StoredGroup: Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn clone_box(&self) -> Box<dyn StoredGroup>;
    fn eq_dyn(&self, other: &dyn StoredGroup) -> bool;
    fn is_default(&self) -> bool;
    fn fmt_dyn(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result;
}

impl<G: OptionGroup> StoredGroup for G {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn clone_box(&self) -> Box<dyn StoredGroup> {
        Box::new(self.clone())
    }
    fn eq_dyn(&self, other: &dyn StoredGroup) -> bool {
        other.as_any().downcast_ref::<G>() == Some(self)
    }
    fn is_default(&self) -> bool {
        *self == G::default()
    }
    fn fmt_dyn(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// How a registered group is added to the command line and read back from it.
struct Registered {
    name: &'static str,
    /// The runners that read the group; empty: every runner (a sink's, say).
    runners: Vec<&'static str>,
    augment: fn(clap::Command) -> clap::Command,
    parse: fn(&clap::ArgMatches) -> std::result::Result<Box<dyn StoredGroup>, clap::Error>,
}

fn registry() -> &'static RwLock<Vec<Arc<Registered>>> {
    static GROUPS: OnceLock<RwLock<Vec<Arc<Registered>>>> = OnceLock::new();
    GROUPS.get_or_init(Default::default)
}

fn registered() -> Vec<Arc<Registered>> {
    registry().read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Makes the flags of group `G` part of every [`PipelineOptions`] parsed from now on.
/// Registering a group again does nothing.
pub fn register_option_group<G: OptionGroup>() {
    register_runner_option_group::<G>(&[]);
}

/// [`register_option_group`] for a group only `runners` read: a pipeline run on another runner
/// with one of its flags on the command line is refused, naming the flag and the runner, rather
/// than run as if the flag had not been given. A group several runners share (runner-core's
/// streaming options) is registered by each of them with its own name: the runners that read it
/// are every one that registered it.
pub fn register_runner_option_group<G: OptionGroup>(runners: &[&'static str]) {
    let name = std::any::type_name::<G>();
    let mut groups = registry().write().unwrap_or_else(|e| e.into_inner());
    if let Some(g) = groups.iter_mut().find(|g| g.name == name) {
        // A group for every runner stays one; a runner's group gains the runners added.
        if !g.runners.is_empty() && runners.iter().any(|r| !g.runners.contains(r)) {
            let mut merged = g.runners.clone();
            merged.extend(runners.iter().filter(|r| !g.runners.contains(r)));
            *g = Arc::new(Registered { name, runners: merged, augment: g.augment, parse: g.parse });
        }
        return;
    }
    groups.push(Arc::new(Registered {
        name,
        runners: runners.to_vec(),
        augment: G::augment_args,
        parse: |m| G::from_arg_matches(m).map(|g| Box::new(g) as Box<dyn StoredGroup>),
    }));
}

/// The option groups of one [`PipelineOptions`], by type.
#[derive(Default)]
struct Groups(BTreeMap<&'static str, Box<dyn StoredGroup>>);

impl Clone for Groups {
    fn clone(&self) -> Self {
        Groups(self.0.iter().map(|(k, v)| (*k, v.clone_box())).collect())
    }
}

impl PartialEq for Groups {
    /// A group that is absent equals its defaults.
    fn eq(&self, other: &Self) -> bool {
        let covers = |a: &Self, b: &Self| {
            a.0.iter().all(|(k, v)| match b.0.get(k) {
                Some(o) => v.eq_dyn(&**o),
                None => v.is_default(),
            })
        };
        covers(self, other) && covers(other, self)
    }
}

impl Eq for Groups {}

impl std::fmt::Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        struct Entry<'a>(&'a dyn StoredGroup);
        impl std::fmt::Debug for Entry<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt_dyn(f)
            }
        }
        f.debug_list().entries(self.0.values().map(|g| Entry(&**g))).finish()
    }
}

/// A parser of a count flag (`usize`) within `lo..=hi`: a value out of range is refused by
/// clap, naming the flag and the range. Every count flag has one, so that no value makes a
/// runner spawn threads or allocate without bound.
pub fn count_within(lo: u64, hi: u64) -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(lo..=hi)
}

/// A parser of a text flag that must not be empty (`--checkpoint-dir ""` would otherwise mean
/// the working directory).
pub fn non_empty() -> clap::builder::NonEmptyStringValueParser {
    clap::builder::NonEmptyStringValueParser::new()
}

/// When the MetricsPusher pushes, to which sinks (each sink's own settings are its group's).
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct MetricsOptions {
    /// A sink to push metrics to (repeatable): e.g. `jsonl`, `console`, `graphite`.
    #[arg(long = "metrics-sink", value_parser = non_empty())]
    pub sinks: Vec<String>,
    /// Seconds between pushes (the first is at once, a final one when the pipeline ends).
    #[arg(long = "metrics-push-period", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub push_period_secs: u64,
    /// Longest a network sink may take to connect and push, ms; it also bounds how long the end
    /// of a pipeline waits for the final push.
    #[arg(long = "metrics-push-timeout-ms", default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub push_timeout_ms: u64,
}

impl Default for MetricsOptions {
    fn default() -> Self {
        MetricsOptions { sinks: Vec::new(), push_period_secs: 5, push_timeout_ms: 2_000 }
    }
}

/// The live page of a streaming query (`--ui-port`, `--ui-host`): the micro-batch and timely
/// runners serve it; a runner without one refuses the flag.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct UiOptions {
    /// Serves the live page of the query (charts of its progress, its plan and metrics) and
    /// its JSON API on this port (0: any free port). Off when not given.
    #[arg(long = "ui-port")]
    pub port: Option<u16>,
    /// The address the live page listens on.
    #[arg(long = "ui-host", default_value = "127.0.0.1", value_parser = non_empty())]
    pub host: String,
}

impl Default for UiOptions {
    fn default() -> Self {
        UiOptions { port: None, host: "127.0.0.1".into() }
    }
}

/// How a runner executes a `Read` of a [`crate::io::BoundedSource`] or
/// [`crate::io::UnboundedSource`] (`--read-via`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadVia {
    /// The runner's own read of sources, with their offsets in its log (Beam's primitive
    /// read): the micro-batch and timely runners' default.
    Native,
    /// Beam's expansion: an impulse and a splittable DoFn over the source's splits, whose
    /// residuals are checkpointed with the operator's state. The direct runner's only way.
    Splittable,
}

/// How runners run a Combine.perKey whose windows never merge and fire once, at their end (the
/// default trigger, no allowed lateness, outputs at the end of the window):
/// `--window-aggregation`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WindowAggregation {
    /// As a hash aggregation per key and window with typed accumulators, each window fired
    /// whole when the watermark passes its end (Flink's and Spark's window aggregation).
    #[default]
    Hash,
    /// On the general GroupAlsoByWindow engine, as every other grouping: the same panes.
    General,
}

/// Where keyed state lives (`--state-backend`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StateBackendKind {
    /// In memory: every key's state in the operator's own maps.
    #[default]
    Memory,
    /// In memory up to `--state-memory-budget`, the least recently used keys beyond it in an
    /// embedded LSM store on local disk (`--state-local-dir`); batch grouping spills to it too.
    Disk,
}

/// A size in bytes, with an optional unit: `1048576`, `512k`, `64m`, `2g` (powers of 1024).
pub fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t.strip_suffix('b').unwrap_or(&t);
    let (digits, shift) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 10),
        Some('m') => (&t[..t.len() - 1], 20),
        Some('g') => (&t[..t.len() - 1], 30),
        Some('t') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n: u64 =
        digits.trim().parse().map_err(|_| format!("`{s}` is not a size in bytes (e.g. 1048576, 512k, 64m, 2g)"))?;
    n.checked_mul(1u64 << shift).ok_or_else(|| format!("`{s}` is too large"))
}

/// Where keyed state lives, and how much of it memory holds.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct StateOptions {
    /// Where keyed state lives: `memory`, or `disk` (memory up to the budget, the rest in an
    /// embedded LSM store on local disk).
    #[arg(long = "state-backend", value_enum, default_value = "memory")]
    pub backend: StateBackendKind,
    /// With `--state-backend disk`: the bytes of keyed state the job keeps in memory, shared
    /// among its stateful steps' partitions (e.g. `256m`, `2g`).
    #[arg(long = "state-memory-budget", default_value = "256m", value_parser = parse_bytes)]
    pub memory_budget: u64,
    /// With `--state-backend disk`: the directory the store lives in (a fresh folder in it per
    /// job, removed when the job ends); the system's temporary directory when not given.
    #[arg(long = "state-local-dir", value_parser = non_empty())]
    pub local_dir: Option<String>,
}

impl Default for StateOptions {
    fn default() -> Self {
        StateOptions { backend: StateBackendKind::Memory, memory_budget: 256 << 20, local_dir: None }
    }
}

/// The options every pipeline has.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
struct CoreOptions {
    /// The runner that executes the pipeline.
    #[arg(long, default_value = "microbatch", value_parser = non_empty())]
    runner: String,
    /// A name for the job, used in logs and metrics.
    #[arg(long = "job-name", default_value = "weir-job", value_parser = non_empty())]
    job_name: String,
    /// Print the runner's plan to standard output when the pipeline starts.
    #[arg(long = "explain", default_value_t = false)]
    explain: bool,
    /// How sources are read: natively or through splittable DoFns (the runner's default
    /// when not given).
    #[arg(long = "read-via", value_enum)]
    read_via: Option<ReadVia>,
    /// How a Combine.perKey whose windows each fire once, at their end, runs.
    #[arg(long = "window-aggregation", value_enum, default_value = "hash")]
    window_aggregation: WindowAggregation,
    #[command(flatten)]
    state: StateOptions,
    #[command(flatten)]
    metrics: MetricsOptions,
    #[command(flatten)]
    ui: UiOptions,
}

/// Every option of a pipeline: the core ones, and the groups of the registered runners and
/// sinks ([`PipelineOptions::get`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipelineOptions {
    /// The runner that executes the pipeline.
    pub runner: String,
    /// A name for the job, used in logs and metrics.
    pub job_name: String,
    /// Print the runner's plan to standard output when the pipeline starts.
    pub explain: bool,
    /// How sources are read; `None`: the runner's default.
    pub read_via: Option<ReadVia>,
    /// How a Combine.perKey whose windows each fire once, at their end, runs.
    pub window_aggregation: WindowAggregation,
    /// Where keyed state lives.
    pub state: StateOptions,
    /// When and where metrics are pushed.
    pub metrics: MetricsOptions,
    /// The live page of a streaming query.
    pub ui: UiOptions,
    groups: Groups,
    given: GivenFlags,
}

/// The flags of runner-specific groups given on the command line, with the runners that read
/// them. Not part of the options' value: options equal whether parsed or built.
#[derive(Clone, Debug, Default)]
struct GivenFlags(Vec<(String, Vec<&'static str>)>);

impl PartialEq for GivenFlags {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for GivenFlags {}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions {
            runner: "microbatch".into(),
            job_name: "weir-job".into(),
            explain: false,
            read_via: None,
            window_aggregation: WindowAggregation::Hash,
            state: StateOptions::default(),
            metrics: MetricsOptions::default(),
            ui: UiOptions::default(),
            groups: Groups::default(),
            given: GivenFlags::default(),
        }
    }
}

impl clap::FromArgMatches for PipelineOptions {
    fn from_arg_matches(m: &clap::ArgMatches) -> std::result::Result<Self, clap::Error> {
        let core = CoreOptions::from_arg_matches(m)?;
        let mut groups = Groups::default();
        let mut given = GivenFlags::default();
        for g in registered() {
            let command = (g.augment)(clap::Command::new("group"));
            // A group registered after this command line was built has no flags in it: its
            // defaults apply.
            if command.get_arguments().any(|arg| m.try_get_raw(arg.get_id().as_str()).is_err()) {
                continue;
            }
            groups.0.insert(g.name, (g.parse)(m)?);
            if g.runners.is_empty() {
                continue;
            }
            for arg in command.get_arguments() {
                let on_command_line =
                    m.value_source(arg.get_id().as_str()) == Some(clap::parser::ValueSource::CommandLine);
                if on_command_line {
                    let flag = arg.get_long().map_or_else(|| arg.get_id().to_string(), |l| format!("--{l}"));
                    given.0.push((flag, g.runners.clone()));
                }
            }
        }
        Ok(PipelineOptions {
            runner: core.runner,
            job_name: core.job_name,
            explain: core.explain,
            read_via: core.read_via,
            window_aggregation: core.window_aggregation,
            state: core.state,
            metrics: core.metrics,
            ui: core.ui,
            groups,
            given,
        })
    }
    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> std::result::Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl clap::Args for PipelineOptions {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        registered().iter().fold(CoreOptions::augment_args(cmd), |cmd, g| (g.augment)(cmd))
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// A pipeline flag as [`PipelineOptions::describe_flags`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlagDescription {
    /// The flag, e.g. `--runner`.
    pub flag: String,
    /// Whether it takes a value (`--runner direct`), or is a switch (`--explain`).
    pub takes_value: bool,
    /// Its help text.
    pub help: String,
}

impl PipelineOptions {
    /// The command line of pipeline options alone (no program name).
    fn command() -> clap::Command {
        use clap::Args;
        Self::augment_args(clap::Command::new("weir").no_binary_name(true).disable_help_subcommand(true))
    }

    /// Parses flags such as `["--runner", "direct", "--direct-seed", "7"]` (no program name).
    /// An unknown option is an error listing the valid ones.
    pub fn from_args<I, S>(args: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: Into<std::ffi::OsString> + Clone,
    {
        use clap::FromArgMatches;
        let parsed = Self::command().try_get_matches_from(args).and_then(|m| Self::from_arg_matches(&m));
        parsed.map_err(|e| {
            let valid = Self::valid_flags().join(", ");
            match e.kind() {
                clap::error::ErrorKind::UnknownArgument => {
                    let arg = e
                        .get(clap::error::ContextKind::InvalidArg)
                        .map(|a| a.to_string())
                        .unwrap_or_else(|| "?".into());
                    Error::Options(format!("unknown option '{arg}'; valid options: {valid}"))
                }
                _ => Error::Options(e.render().to_string().trim().to_string()),
            }
        })
    }

    /// Parses the process's command-line arguments (skipping the program name).
    pub fn from_env_args() -> Result<Self> {
        Self::from_args(std::env::args_os().skip(1))
    }

    /// Every valid flag, e.g. `--runner`.
    pub fn valid_flags() -> Vec<String> {
        Self::command()
            .get_arguments()
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .filter(|l| l != "--help")
            .collect()
    }

    /// Every flag with whether it takes a value and its help text, e.g. `("--runner", true,
    /// "...")`: what a client in another language declares to parse them itself.
    pub fn describe_flags() -> Vec<FlagDescription> {
        Self::command()
            .get_arguments()
            .filter_map(|a| {
                let long = a.get_long().filter(|l| *l != "help")?;
                Some(FlagDescription {
                    flag: format!("--{long}"),
                    takes_value: a.get_action().takes_values(),
                    help: a.get_help().map(|h| h.to_string()).unwrap_or_default(),
                })
            })
            .collect()
    }

    /// These options with another runner.
    pub fn with_runner(mut self, runner: impl Into<String>) -> Self {
        self.runner = runner.into();
        self
    }

    /// Option group `G`: as parsed or set, or its defaults.
    pub fn get<G: OptionGroup>(&self) -> std::borrow::Cow<'_, G> {
        match self.groups.0.get(std::any::type_name::<G>()).and_then(|g| g.as_any().downcast_ref::<G>()) {
            Some(g) => std::borrow::Cow::Borrowed(g),
            None => std::borrow::Cow::Owned(G::default()),
        }
    }

    /// Option group `G` to change in place (its defaults if it was not set).
    pub fn group_mut<G: OptionGroup>(&mut self) -> &mut G {
        let slot = self.groups.0.entry(std::any::type_name::<G>()).or_insert_with(|| Box::new(G::default()));
        if slot.as_any().downcast_ref::<G>().is_none() {
            *slot = Box::new(G::default());
        }
        slot.as_any_mut().downcast_mut::<G>().expect("the slot of G holds a G")
    }

    /// Refuses a flag given on the command line that belongs to another runner's options (say
    /// `--checkpoint-dir` with `--runner direct`): the runner would run as if it had not been
    /// given. [`crate::Pipeline::run`] checks this before the runner starts.
    pub fn check_flags_for_runner(&self) -> Result<()> {
        for (flag, runners) in &self.given.0 {
            if !runners.contains(&self.runner.as_str()) {
                let whose = runners.join(" and ");
                let s = if runners.len() > 1 { "s" } else { "" };
                return Err(Error::Options(format!(
                    "{flag} is an option of the {whose} runner{s}; the {} runner does not use it (leave it out, \
                     or run with --runner {})",
                    self.runner, runners[0]
                )));
            }
        }
        Ok(())
    }

    /// These options with group `G` replaced.
    pub fn with<G: OptionGroup>(mut self, group: G) -> Self {
        *self.group_mut::<G>() = group;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Args, Clone, Debug, PartialEq, Default)]
    struct TestGroup {
        /// A test flag.
        #[arg(long = "test-group-seed", default_value_t = 0)]
        seed: u64,
    }

    #[test]
    fn parses_core_flags_and_registered_groups() {
        register_option_group::<TestGroup>();
        register_option_group::<TestGroup>();
        let o = PipelineOptions::from_args(["--runner", "x", "--test-group-seed", "9", "--explain"]).unwrap();
        assert_eq!(o.runner, "x");
        assert!(o.explain);
        assert_eq!(o.get::<TestGroup>().seed, 9);
        let mut d = PipelineOptions::from_args(Vec::<String>::new()).unwrap();
        assert_eq!(d.get::<TestGroup>().seed, 0);
        d.group_mut::<TestGroup>().seed = 9;
        assert_eq!(d.get::<TestGroup>().seed, 9);
        assert_ne!(d, PipelineOptions::from_args(Vec::<String>::new()).unwrap());
        assert_eq!(PipelineOptions::from_args(Vec::<String>::new()).unwrap(), PipelineOptions::default());
    }

    #[derive(clap::Args, Clone, Debug, PartialEq, Default)]
    struct OwnedGroup {
        /// A flag only runner `a` reads.
        #[arg(long = "owned-group-depth", default_value_t = 0)]
        depth: u64,
    }

    #[test]
    fn a_flag_of_another_runner_is_refused() {
        register_runner_option_group::<OwnedGroup>(&["a"]);
        let on_a = PipelineOptions::from_args(["--runner", "a", "--owned-group-depth", "3"]).unwrap();
        assert!(on_a.check_flags_for_runner().is_ok());
        let on_b = PipelineOptions::from_args(["--runner", "b", "--owned-group-depth", "3"]).unwrap();
        let e = on_b.check_flags_for_runner().unwrap_err().to_string();
        assert!(e.contains("--owned-group-depth is an option of the a runner; the b runner does not use it"), "{e}");
        // Not given: nothing to refuse; given or not, the options are equal.
        let unset = PipelineOptions::from_args(["--runner", "b"]).unwrap();
        assert!(unset.check_flags_for_runner().is_ok());
        let mut built = PipelineOptions::default().with_runner("a");
        built.group_mut::<OwnedGroup>().depth = 3;
        assert_eq!(built, on_a);
    }

    #[derive(clap::Args, Clone, Debug, PartialEq, Default)]
    struct SharedGroup {
        /// A flag runners `c` and `d` read, each registering the group itself.
        #[arg(long = "shared-group-size", default_value_t = 0)]
        size: u64,
    }

    #[test]
    fn a_group_registered_by_two_runners_is_read_by_both() {
        register_runner_option_group::<SharedGroup>(&["c"]);
        register_runner_option_group::<SharedGroup>(&["d"]);
        register_runner_option_group::<SharedGroup>(&["c"]);
        for runner in ["c", "d"] {
            let o = PipelineOptions::from_args(["--runner", runner, "--shared-group-size", "3"]).unwrap();
            assert!(o.check_flags_for_runner().is_ok(), "{runner}");
            assert_eq!(o.get::<SharedGroup>().size, 3);
        }
        let on_e = PipelineOptions::from_args(["--runner", "e", "--shared-group-size", "3"]).unwrap();
        let e = on_e.check_flags_for_runner().unwrap_err().to_string();
        assert!(e.contains("--shared-group-size is an option of the c and d runners; the e runner"), "{e}");
    }

    #[test]
    fn unknown_option_lists_valid_ones() {
        register_option_group::<TestGroup>();
        let e = PipelineOptions::from_args(["--runnr", "direct"]).unwrap_err().to_string();
        assert!(e.contains("unknown option '--runnr'"), "{e}");
        assert!(e.contains("--runner") && e.contains("--test-group-seed"), "{e}");
        let e = PipelineOptions::from_args(["--test-group-seed", "abc"]).unwrap_err().to_string();
        assert!(e.contains("test-group-seed"), "{e}");
    }

    #[test]
    fn flags_are_described_with_whether_they_take_a_value() {
        register_option_group::<TestGroup>();
        let flags = PipelineOptions::describe_flags();
        let find = |f: &str| flags.iter().find(|d| d.flag == f).unwrap_or_else(|| panic!("{f} in {flags:?}")).clone();
        assert!(find("--runner").takes_value);
        assert!(find("--test-group-seed").takes_value);
        assert!(!find("--explain").takes_value);
        assert!(!find("--runner").help.is_empty());
        assert!(flags.iter().all(|d| d.flag != "--help"));
        let names: Vec<String> = flags.iter().map(|d| d.flag.clone()).collect();
        assert_eq!(names, PipelineOptions::valid_flags());
    }
}
