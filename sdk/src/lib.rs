//! # weir-sdk: the Beam model, typed, in Rust
//!
//! Pipeline authors build a [`Pipeline`] of typed [`PCollection`]s by applying transforms —
//! [`ParDo`] with a [`DoFn`], [`GroupByKey`], [`Flatten`], [`Window`], and a library of
//! composites built from them — and run it on any registered runner with `--runner NAME`.
//!
//! The one decision everything else follows (ARCHITECTURE.md, "Typed at the surface, erased per batch"): **typed at the surface, erased per
//! batch inside.** When a transform is applied, its element types are known, and the SDK builds
//! type-erased *kernels* for it ([`kernel`]): a ParDo's kernel processes a whole
//! `Vec<WindowedValue<T>>` behind `Box<dyn Any>`, a GroupByKey's kernel encodes a whole batch of
//! `KV<K, V>` into key and value bytes. A runner therefore never sees `T`, and pays one dynamic
//! call per batch, never per element. The graph ([`graph`]) keeps every transform with its URN,
//! payload and place in the composite hierarchy, and runners walk it with a
//! [`visitor::PipelineVisitor`].
//!
//! ```
//! use weir_sdk::prelude::*;
//!
//! let p = Pipeline::create();
//! let counts = p
//!     .apply("Create", Create::of(vec!["a".to_string(), "b".into(), "a".into()]))
//!     .apply("Count", Count::per_element());
//! assert_that(&counts).contains_in_any_order(vec![KV::new("a".to_string(), 2), KV::new("b".to_string(), 1)]);
//! assert!(p.validate().is_ok());
//! // p.run() executes it on the runner named by the options (`--runner direct` by default).
//! ```

#![deny(missing_docs)]

pub mod batch;
pub mod coders;
pub mod combine_fn;
pub mod do_fn;
pub mod error;
pub mod graph;
pub mod io;
pub mod kernel;
pub mod kv;
pub mod metrics;
pub mod options;
pub mod pane;
pub mod panic;
pub mod pipeline;
pub mod runner;
pub mod runner_api;
pub mod splittable;
pub mod state;
pub mod testing;
pub mod time;
pub mod transforms;
pub mod trigger;
pub mod urns;
pub mod view;
pub mod visitor;
pub mod window;
pub mod window_fn;
pub mod windowed_value;

pub use coders::{Coder, CoderRef, Element};
pub use do_fn::{DoFn, FinishBundleContext, ProcessContext, TupleTag};
pub use error::{Error, Result, UserError, UserResult, WithStep as WithStepExt};
pub use kv::KV;
pub use metrics::{Counter, Distribution, Gauge, MetricResults, Metrics, MetricsFilter};
pub use options::PipelineOptions;
pub use pipeline::{PBegin, PCollection, PCollectionList, PCollectionTuple, PDone, PTransform, Pipeline};
pub use runner::{PipelineResult, PipelineState, Runner};
pub use state::{ReadableState, StateAccess, TimeDomain};
pub use transforms::co_group_by_key::{CoGbkResult, CoGroupByKey, KeyedPCollectionTuple};
pub use transforms::combine::{Combine, CombineFn};
pub use transforms::combiners::{Count, Latest, Max, Mean, Min, Sample, Sum, Top};
pub use transforms::create::Create;
pub use transforms::deduplicate::Deduplicate;
pub use transforms::distinct::Distinct;
pub use transforms::flatten::Flatten;
pub use transforms::group_by_key::GroupByKey;
pub use transforms::group_into_batches::GroupIntoBatches;
pub use transforms::impulse::Impulse;
pub use transforms::keys::{Keys, KvSwap, Values, WithKeys};
pub use transforms::map::{Filter, FlatMap, Map, TryMap};
pub use transforms::par_do::{ErasedParDo, ErasedTupleTag, ParDo};
pub use transforms::partition::Partition;
pub use transforms::reify::{Reify, ValueInSingleWindow, WithTimestamps};
pub use transforms::reshuffle::Reshuffle;
pub use transforms::to_string::ToString;
pub use transforms::view::View;
pub use transforms::wait::Wait;
pub use transforms::window_into::Window;
pub use view::PCollectionView;
pub use windowed_value::{TimestampedValue, WindowedValue};

/// Everything a pipeline author usually needs.
pub mod prelude {
    pub use crate::io::TextIO;
    pub use crate::testing::{assert_that, assert_that_singleton, TestPipeline, TestStream};
    pub use crate::time::{Timestamp, GLOBAL_WINDOW_MAX_TIMESTAMP, MAX_TIMESTAMP, MIN_TIMESTAMP};
    pub use crate::trigger::{
        AccumulationMode, AfterAll, AfterEach, AfterFirst, AfterPane, AfterProcessingTime, AfterWatermark,
        ClosingBehavior, Never, OnTimeBehavior, Repeatedly, TimestampCombiner, Trigger,
    };
    pub use crate::window::IntervalWindow;
    pub use crate::window::{CustomWindow, Window as BoundedWindow};
    pub use crate::window_fn::{ElementWindowFn, FixedWindows, GlobalWindows, Sessions, SlidingWindows, WindowFn};
    pub use crate::*;
}
