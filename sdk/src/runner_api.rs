//! The SDK's surface for runners, in one place: what a runner needs from the transforms and IO
//! that the SDK defines (their payloads and the kernels they carry) beside the graph
//! ([`crate::graph`]), the URNs ([`crate::urns`]), batches ([`crate::batch`]) and kernels
//! ([`crate::kernel`]). A runner imports these from here, never from [`crate::transforms`] or
//! [`crate::io`], so what it depends on is this list.

/// The co-group's payload, and how it tags and encodes each input for the exchange.
pub use crate::transforms::co_group_by_key::{CoGroupByKeyPayload, UnionEncoder};
/// The combining kernel of a `CombineFn` over `KV<K, In>` elements.
pub use crate::transforms::combine::kernel as combine_kernel;
/// Deduplicate's payload and its kernel.
pub use crate::transforms::deduplicate::{DedupKernel, DeduplicatePayload};
/// The grouping kernel of `KV<K, V>` elements.
pub use crate::transforms::group_by_key::kernel as group_kernel;

/// Durable atomic writes, and the names of their temporary files.
pub use crate::io::atomic::{is_temporary, sync_dir, write_atomic, AtomicWriteError};
/// ForEachBatch's payload.
pub use crate::io::commit_sink::CommitSinkPayload;
/// The exactly-once file sink's payload.
pub use crate::io::file_sink::FileSinkPayload;
pub use crate::io::for_each_batch::ForEachBatchPayload;
/// How a sink claims its output directory for one query.
pub use crate::io::json_lines::claim_output_dir;
