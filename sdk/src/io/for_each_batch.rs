//! Batch sinks: a callback per batch of output, and the collect and console sinks built on it.
//!
//! The micro-batch runner translates these natively: the callback runs when the batch commits,
//! once per batch with all of its elements, and a batch that is replayed after a restart calls it
//! again with the same batch id, so an idempotent callback gives exactly-once output (Spark's
//! `foreachBatch`). Other runners call it once per bundle, numbering bundles from 0.

use crate::coders::Element;
use crate::do_fn::{DoFn, FinishBundleContext, ProcessContext};
use crate::error::{UserError, UserResult};
use crate::kernel::{downcast_batch, Batch};
use crate::pipeline::{PCollection, PDone, PTransform};
use crate::transforms::par_do::ParDo;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

type Callback<T> = Arc<dyn Fn(u64, Vec<T>) -> UserResult + Send + Sync>;

/// Delivers a batch's elements to a typed callback (built by the SDK).
pub trait BatchSinkKernel: Send + Sync {
    /// Calls the callback with batch `batch_id` made of `batches`.
    fn write(&self, batch_id: u64, batches: Vec<Batch>) -> Result<(), UserError>;
}

struct Kernel<T> {
    f: Callback<T>,
}

impl<T: Element> BatchSinkKernel for Kernel<T> {
    fn write(&self, batch_id: u64, batches: Vec<Batch>) -> Result<(), UserError> {
        let mut all = Vec::new();
        for b in batches {
            all.extend(downcast_batch::<T>(b)?.into_iter().map(|wv| wv.value));
        }
        (self.f)(batch_id, all)
    }
}

/// The runner-visible payload of [`ForEachBatch`].
#[derive(Clone)]
pub struct ForEachBatchPayload {
    /// What the sink is, for plans and progress reports.
    pub description: String,
    /// Delivers batches.
    pub kernel: Arc<dyn BatchSinkKernel>,
}

/// Calls `f(batch_id, elements)` for every batch of output:
/// `pc.apply("Sink", ForEachBatch::new(|id, rows| { ...; Ok(()) }))`.
pub struct ForEachBatch<T> {
    description: String,
    f: Callback<T>,
}

impl<T: Element> ForEachBatch<T> {
    /// A sink calling `f`.
    pub fn new(f: impl Fn(u64, Vec<T>) -> UserResult + Send + Sync + 'static) -> Self {
        ForEachBatch { description: "ForEachBatch".into(), f: Arc::new(f) }
    }
    fn described(mut self, d: &str) -> Self {
        self.description = d.to_string();
        self
    }
}

struct PerBundleFn<T> {
    f: Callback<T>,
    counter: Arc<AtomicU64>,
    buffer: Vec<T>,
}

impl<T> Clone for PerBundleFn<T> {
    fn clone(&self) -> Self {
        PerBundleFn { f: self.f.clone(), counter: self.counter.clone(), buffer: Vec::new() }
    }
}

impl<T: Element> DoFn for PerBundleFn<T> {
    type In = T;
    type Out = ();
    fn process(&mut self, e: T, _: &mut ProcessContext<'_, ()>) -> UserResult {
        self.buffer.push(e);
        Ok(())
    }
    fn finish_bundle(&mut self, _: &mut FinishBundleContext<'_, ()>) -> UserResult {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let id = self.counter.fetch_add(1, Ordering::SeqCst);
        (self.f)(id, std::mem::take(&mut self.buffer))
    }
}

impl<T: Element> PTransform<PCollection<T>> for ForEachBatch<T> {
    type Output = PDone;
    fn expand(self, input: PCollection<T>) -> PDone {
        input.pipeline().set_composite_payload(Arc::new(ForEachBatchPayload {
            description: self.description,
            kernel: Arc::new(Kernel { f: self.f.clone() }),
        }));
        input.apply(
            "PerBundle",
            ParDo::of(PerBundleFn { f: self.f, counter: Arc::new(AtomicU64::new(0)), buffer: Vec::new() }),
        );
        PDone
    }
    fn composite_urn() -> Option<&'static str> {
        Some(crate::urns::FOR_EACH_BATCH)
    }
}

/// Where [`Collect`] puts elements: a shared list to read after (or while) the pipeline runs.
pub struct CollectHandle<T> {
    items: Arc<Mutex<Vec<T>>>,
}

impl<T> Clone for CollectHandle<T> {
    fn clone(&self) -> Self {
        CollectHandle { items: self.items.clone() }
    }
}

impl<T: Clone> CollectHandle<T> {
    /// An empty handle.
    pub fn new() -> Self {
        CollectHandle { items: Arc::new(Mutex::new(Vec::new())) }
    }
    /// What has been collected so far.
    pub fn items(&self) -> Vec<T> {
        self.items.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl<T: Clone> Default for CollectHandle<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Collects every element into a [`CollectHandle`] (for tests and notebooks).
pub struct Collect;

impl Collect {
    /// A sink appending to `handle`.
    pub fn into<T: Element>(handle: &CollectHandle<T>) -> ForEachBatch<T> {
        let items = handle.items.clone();
        ForEachBatch::new(move |_, rows| {
            items.lock().unwrap_or_else(|e| e.into_inner()).extend(rows);
            Ok(())
        })
        .described("Collect")
    }
}

/// Prints every batch to standard output, as Spark's console sink does.
pub struct Console;

impl Console {
    /// A sink printing each batch under a `Batch: N` header.
    pub fn sink<T: Element>() -> ForEachBatch<T> {
        ForEachBatch::new(|id, rows: Vec<T>| {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "-------------------------------------------\nBatch: {id}\n-------------------------------------------"
            )?;
            for r in rows {
                writeln!(out, "{r:?}")?;
            }
            Ok(())
        })
        .described("Console")
    }
}
