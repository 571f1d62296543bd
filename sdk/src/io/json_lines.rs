//! A JSON-lines file sink: one JSON object per element.
//!
//! On runners without batch-aware sinks it writes one file per bundle (temporary name, renamed
//! when the bundle finishes). The micro-batch runner translates it natively into an exactly-once
//! sink: one file per batch and partition, named by the batch id and committed with the batch,
//! so a replayed batch replaces its files instead of duplicating them.

use crate::coders::Element;
use crate::do_fn::{DoFn, FinishBundleContext, ProcessContext};
use crate::error::{UserError, UserResult};
use crate::kernel::{downcast_batch, Batch};
use crate::pipeline::{PCollection, PDone, PTransform};
use crate::transforms::par_do::ParDo;
use std::marker::PhantomData;
use std::sync::Arc;

/// Renders a batch as JSON lines (typed by the SDK).
pub trait JsonLinesKernel: Send + Sync {
    /// Appends one JSON object per element of `batch`, each followed by a newline.
    fn append(&self, batch: Batch, out: &mut Vec<u8>) -> Result<usize, UserError>;
}

struct Kernel<T>(PhantomData<fn(T)>);

impl<T: Element> JsonLinesKernel for Kernel<T> {
    fn append(&self, batch: Batch, out: &mut Vec<u8>) -> Result<usize, UserError> {
        let v = downcast_batch::<T>(batch)?;
        for wv in &v {
            serde_json::to_writer(&mut *out, &wv.value)?;
            out.push(b'\n');
        }
        Ok(v.len())
    }
}

/// The runner-visible payload of [`WriteJsonLines`].
#[derive(Clone)]
pub struct JsonLinesPayload {
    /// Output directory.
    pub dir: String,
    /// Renders elements.
    pub kernel: Arc<dyn JsonLinesKernel>,
}

/// Writes every element as a line of JSON into files under a directory:
/// `pc.apply("Out", WriteJsonLines::to("out/"))`.
pub struct WriteJsonLines<T> {
    dir: String,
    _t: PhantomData<fn(T)>,
}

impl<T: Element> WriteJsonLines<T> {
    /// Files go under `dir` (created if needed).
    pub fn to(dir: impl Into<String>) -> Self {
        WriteJsonLines { dir: dir.into(), _t: PhantomData }
    }
}

#[derive(Clone)]
struct WriteBundleFn<T> {
    dir: String,
    buffer: Vec<u8>,
    _t: PhantomData<fn(T)>,
}

impl<T: Element> DoFn for WriteBundleFn<T> {
    type In = T;
    type Out = ();
    fn process(&mut self, e: T, _: &mut ProcessContext<'_, ()>) -> UserResult {
        serde_json::to_writer(&mut self.buffer, &e)?;
        self.buffer.push(b'\n');
        Ok(())
    }
    fn finish_bundle(&mut self, _: &mut FinishBundleContext<'_, ()>) -> UserResult {
        if self.buffer.is_empty() {
            return Ok(());
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| format!("{}: {e}", self.dir))?;
        let name = format!("{}/bundle-{:016x}.jsonl", self.dir, rand::random::<u64>());
        let tmp = format!("{name}.tmp");
        std::fs::write(&tmp, &self.buffer).map_err(|e| format!("{tmp}: {e}"))?;
        std::fs::rename(&tmp, &name).map_err(|e| format!("{name}: {e}"))?;
        self.buffer.clear();
        Ok(())
    }
}

impl<T: Element> PTransform<PCollection<T>> for WriteJsonLines<T> {
    type Output = PDone;
    fn expand(self, input: PCollection<T>) -> PDone {
        input.pipeline().set_composite_payload(Arc::new(JsonLinesPayload {
            dir: self.dir.clone(),
            kernel: Arc::new(Kernel::<T>(PhantomData)),
        }));
        input.apply(
            "WriteBundles",
            ParDo::of(WriteBundleFn::<T> { dir: self.dir, buffer: Vec::new(), _t: PhantomData }),
        );
        PDone
    }
    fn composite_urn() -> Option<&'static str> {
        Some(crate::urns::WRITE_JSON_LINES)
    }
}
