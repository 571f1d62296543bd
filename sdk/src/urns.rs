//! Every transform URN Weir knows, Beam's where Beam has one.

/// Impulse: emits one empty byte array in the global window.
pub const IMPULSE: &str = "beam:transform:impulse:v1";
/// Read from a bounded or unbounded source (composite: an impulse and a splittable DoFn over
/// the source's splits; runners with a native read translate it whole).
pub const READ: &str = "beam:transform:read:v1";
/// ParDo.
pub const PAR_DO: &str = "beam:transform:pardo:v1";
/// GroupByKey.
pub const GROUP_BY_KEY: &str = "beam:transform:group_by_key:v1";
/// Flatten.
pub const FLATTEN: &str = "beam:transform:flatten:v1";
/// Window.into (assign windows).
pub const WINDOW_INTO: &str = "beam:transform:window_into:v1";
/// TestStream: a test source of elements, watermark and processing-time events.
pub const TEST_STREAM: &str = "beam:transform:teststream:v1";
/// Combine.perKey (composite).
pub const COMBINE_PER_KEY: &str = "beam:transform:combine_per_key:v1";
/// Combine.globally (composite).
pub const COMBINE_GLOBALLY: &str = "beam:transform:combine_globally:v1";
/// Combine.groupedValues (composite).
pub const COMBINE_GROUPED_VALUES: &str = "beam:transform:combine_grouped_values:v1";
/// Reshuffle (composite).
pub const RESHUFFLE: &str = "beam:transform:reshuffle:v1";
/// ToString (composite; the Go SDK's URN).
pub const TO_STRING: &str = "beam:transform:to_string:v1";
/// WriteFiles (composite).
pub const WRITE_FILES: &str = "beam:transform:write_files:v1";
/// CoGroupByKey (composite; Weir's own URN).
pub const CO_GROUP_BY_KEY: &str = "weir:transform:co_group_by_key:v1";
/// Deduplicate (composite; runners may translate it natively).
pub const DEDUPLICATE: &str = "weir:transform:deduplicate:v1";
/// Writing JSON lines files (composite; exactly-once on the micro-batch runner).
pub const WRITE_JSON_LINES: &str = "weir:transform:write_json_lines:v1";
/// The exactly-once file sink of any format (`WriteFiles`).
pub const FILE_SINK: &str = "weir:transform:file_sink:v1";
/// A callback per batch of output (composite; per batch on the micro-batch runner).
pub const FOR_EACH_BATCH: &str = "weir:transform:for_each_batch:v1";
/// A sink of an external system that commits each batch exactly once (`WriteCommitted`).
pub const COMMIT_SINK: &str = "weir:transform:commit_sink:v1";
/// A splittable DoFn's processing step: restrictions through the DoFn, residuals kept.
pub const SPLITTABLE_PROCESS: &str = "beam:transform:sdf_process_sized_element_and_restrictions:v1";
/// Any other composite: runners expand it.
pub const COMPOSITE: &str = "weir:transform:composite:v1";

/// Every primitive URN: a runner must translate each of these or reject the pipeline.
pub const PRIMITIVES: &[&str] = &[IMPULSE, PAR_DO, GROUP_BY_KEY, FLATTEN, WINDOW_INTO, TEST_STREAM, SPLITTABLE_PROCESS];

/// Redistribute by key (Beam's `Redistribute.byKey`).
pub const REDISTRIBUTE_BY_KEY: &str = "beam:transform:redistribute_by_key:v1";
/// Redistribute arbitrarily (Beam's `Redistribute.arbitrarily`).
pub const REDISTRIBUTE_ARBITRARILY: &str = "beam:transform:redistribute_arbitrarily:v1";
/// A lifted combine's first part: combining values into accumulators before the grouping.
pub const COMBINE_PRECOMBINE: &str = "beam:transform:combine_per_key_precombine:v1";
/// A lifted combine's second part: merging the grouped accumulators.
pub const COMBINE_MERGE: &str = "beam:transform:combine_per_key_merge_accumulators:v1";
/// A lifted combine's last part: extracting outputs from merged accumulators.
pub const COMBINE_EXTRACT: &str = "beam:transform:combine_per_key_extract_outputs:v1";
/// Mapping main-input windows to side-input windows, in the SDK.
pub const MAP_WINDOWS: &str = "beam:transform:map_windows:v1";
/// Merging windows, in the SDK.
pub const MERGE_WINDOWS: &str = "beam:transform:merge_windows:v1";
/// A splittable DoFn's first step: each element paired with its initial restriction.
pub const SDF_PAIR_WITH_RESTRICTION: &str = "beam:transform:sdf_pair_with_restriction:v1";
/// A splittable DoFn's second step: restrictions split and sized.
pub const SDF_SPLIT_AND_SIZE: &str = "beam:transform:sdf_split_and_size_restrictions:v1";
/// A splittable DoFn's restrictions truncated, as a drain runs them.
pub const SDF_TRUNCATE_SIZED: &str = "beam:transform:sdf_truncate_sized_restrictions:v1";

/// Beam's standard coders, as the portable runner reads them.
pub mod coders {
    /// Bytes, length-prefixed when nested.
    pub const BYTES: &str = "beam:coder:bytes:v1";
    /// UTF-8 text, length-prefixed when nested.
    pub const STRING_UTF8: &str = "beam:coder:string_utf8:v1";
    /// A variable-length integer.
    pub const VARINT: &str = "beam:coder:varint:v1";
    /// A boolean, one byte.
    pub const BOOL: &str = "beam:coder:bool:v1";
    /// A big-endian IEEE 754 double.
    pub const DOUBLE: &str = "beam:coder:double:v1";
    /// A key and a value, one after the other.
    pub const KV: &str = "beam:coder:kv:v1";
    /// An iterable of its component.
    pub const ITERABLE: &str = "beam:coder:iterable:v1";
    /// Its component, length-prefixed.
    pub const LENGTH_PREFIX: &str = "beam:coder:length_prefix:v1";
    /// A value with its timestamp, windows and pane.
    pub const WINDOWED_VALUE: &str = "beam:coder:windowed_value:v1";
    /// A timer of a key and window.
    pub const TIMER: &str = "beam:coder:timer:v1";
    /// The global window.
    pub const GLOBAL_WINDOW: &str = "beam:coder:global_window:v1";
    /// An interval window.
    pub const INTERVAL_WINDOW: &str = "beam:coder:interval_window:v1";
    /// A window of another coder, after its last instant (its component: that coder).
    pub const CUSTOM_WINDOW: &str = "beam:coder:custom_window:v1";
    /// A Python value, pickled: only Beam Python reads it.
    pub const PICKLED_PYTHON: &str = "beam:coder:pickled_python:v1";
}

/// Beam's standard window functions.
pub mod window_fns {
    /// The global window.
    pub const GLOBAL: &str = "beam:window_fn:global_windows:v1";
    /// Fixed windows.
    pub const FIXED: &str = "beam:window_fn:fixed_windows:v1";
    /// Sliding windows.
    pub const SLIDING: &str = "beam:window_fn:sliding_windows:v1";
    /// Session windows (merging).
    pub const SESSIONS: &str = "beam:window_fn:session_windows:v1";
}

/// Pipeline requirements: what a pipeline says its runner must do.
pub mod requirements {
    /// Bundle finalization.
    pub const FINALIZATION: &str = "beam:requirement:pardo:finalization:v1";
    /// Splittable DoFns.
    pub const SPLITTABLE_DOFN: &str = "beam:requirement:pardo:splittable_dofn:v1";
    /// State and timers.
    pub const STATEFUL: &str = "beam:requirement:pardo:stateful:v1";
    /// Input in timestamp order (Beam Java's `@RequiresTimeSortedInput`).
    pub const TIME_SORTED_INPUT: &str = "beam:requirement:pardo:time_sorted_input:v1";
    /// A callback when a key's window expires (Beam Java's `@OnWindowExpiration`).
    pub const ON_WINDOW_EXPIRATION: &str = "beam:requirement:pardo:on_window_expiration:v1";
}

/// The State API's protocols of user state.
pub mod user_state {
    /// A bag.
    pub const BAG: &str = "beam:user_state:bag:v1";
    /// A multimap.
    pub const MULTIMAP: &str = "beam:user_state:multimap:v1";
    /// An ordered list, by timestamp.
    pub const ORDERED_LIST: &str = "beam:user_state:ordered_list:v1";
}

/// How a ParDo reads a side input.
pub mod side_inputs {
    /// All of it, as an iterable.
    pub const ITERABLE: &str = "beam:side_input:iterable:v1";
    /// By key.
    pub const MULTIMAP: &str = "beam:side_input:multimap:v1";
}

/// How a runner starts an SDK harness.
pub mod environments {
    /// One already running (LOOPBACK, or EXTERNAL): a worker pool the runner asks for workers.
    pub const EXTERNAL: &str = "beam:env:external:v1";
    /// A process the runner starts with a command.
    pub const PROCESS: &str = "beam:env:process:v1";
    /// A Docker container.
    pub const DOCKER: &str = "beam:env:docker:v1";
}

/// Artifacts an environment depends on (jars, wheels, files), and the roles they play.
pub mod artifacts {
    /// A file at a path the holder can read.
    pub const FILE: &str = "beam:artifact:type:file:v1";
    /// A file at a URL.
    pub const URL: &str = "beam:artifact:type:url:v1";
    /// A file whose bytes the payload carries.
    pub const EMBEDDED: &str = "beam:artifact:type:embedded:v1";
    /// Staged under a name the payload gives, for the harness to fetch.
    pub const STAGING_TO: &str = "beam:artifact:role:staging_to:v1";
}

/// The runner's ends of a bundle's data stream, in a bundle descriptor.
pub mod runner {
    /// Where a bundle's input comes from.
    pub const DATA_SOURCE: &str = "beam:runner:source:v1";
    /// Where a bundle's output goes.
    pub const DATA_SINK: &str = "beam:runner:sink:v1";
}

/// Metrics a harness reports as MonitoringInfos.
pub mod metrics {
    /// A sum of 64-bit integers.
    pub const SUM_INT64: &str = "beam:metrics:sum_int64:v1";
    /// A sum of doubles.
    pub const SUM_DOUBLE: &str = "beam:metrics:sum_double:v1";
    /// A distribution of 64-bit integers.
    pub const DISTRIBUTION_INT64: &str = "beam:metrics:distribution_int64:v1";
    /// The latest of 64-bit integers.
    pub const LATEST_INT64: &str = "beam:metrics:latest_int64:v1";
    /// A set of strings.
    pub const SET_STRING: &str = "beam:metrics:set_string:v1";
    /// A user's counter.
    pub const USER_COUNTER: &str = "beam:metric:user:sum_int64:v1";
    /// A user's distribution.
    pub const USER_DISTRIBUTION: &str = "beam:metric:user:distribution_int64:v1";
    /// A user's gauge.
    pub const USER_GAUGE: &str = "beam:metric:user:latest_int64:v1";
}
