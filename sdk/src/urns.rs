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
