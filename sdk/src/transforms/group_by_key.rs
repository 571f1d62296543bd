//! GroupByKey: the grouping primitive.

use crate::coders::{Coder, CoderError, Element, ElementCoder};
use crate::graph::{Boundedness, Payload};
use crate::kernel::{Batch, EncodedGroup, EncodedKvBatch, GroupKernel};
use crate::kv::KV;
use crate::pipeline::{output_boundedness, PCollection, PTransform};
use crate::trigger::Trigger;
use crate::windowed_value::WindowedValue;
use std::marker::PhantomData;
use std::sync::Arc;

/// Groups `KV<K, V>` by key and window into `KV<K, Vec<V>>`. Keys are compared by their encoded
/// bytes, so the key coder must be deterministic.
///
/// ```
/// use weir_sdk::prelude::*;
/// let p = Pipeline::create();
/// let grouped: PCollection<KV<String, Vec<i64>>> = p
///     .apply("Create", Create::of(vec![KV::new("a".to_string(), 1i64)]))
///     .apply("Group", GroupByKey::create());
/// assert!(p.validate().is_ok());
/// ```
///
/// A GroupByKey of a collection that is not of `KV`s is rejected when the pipeline is compiled:
///
/// ```compile_fail
/// use weir_sdk::prelude::*;
/// let p = Pipeline::create();
/// p.apply("Create", Create::of(vec![1i64])).apply("Group", GroupByKey::create());
/// ```
pub struct GroupByKey<K, V> {
    /// Whether the windowing of its input is checked (as Beam checks it when a pipeline is
    /// built).
    checked: bool,
    _t: PhantomData<fn() -> (K, V)>,
}

impl<K: Element, V: Element> GroupByKey<K, V> {
    /// A GroupByKey.
    pub fn create() -> Self {
        GroupByKey { checked: true, _t: PhantomData }
    }

    /// A GroupByKey of a pipeline another Beam SDK built and checked, by its own rules (Beam
    /// Python lets a TestStream's output be grouped in the global window, say): the windowing
    /// of its input is taken as it is.
    pub fn as_submitted() -> Self {
        GroupByKey { checked: false, _t: PhantomData }
    }
}

impl<K: Element, V: Element> Default for GroupByKey<K, V> {
    fn default() -> Self {
        Self::create()
    }
}

pub(crate) struct GroupKernelImpl<K, V> {
    key: ElementCoder<K>,
    value: ElementCoder<V>,
}

impl<K: Element, V: Element> GroupKernelImpl<K, V> {
    pub(crate) fn new() -> Self {
        GroupKernelImpl { key: ElementCoder::new(), value: ElementCoder::new() }
    }
}

impl<K: Element, V: Element> GroupKernel for GroupKernelImpl<K, V> {
    fn encode(&self, input: Batch, out: &mut EncodedKvBatch) -> Result<(), CoderError> {
        out.append::<K, V>(input, &self.key, &self.value)
    }

    fn decode_groups(&self, groups: Vec<EncodedGroup>) -> Result<Batch, CoderError> {
        let mut out: Vec<WindowedValue<KV<K, Vec<V>>>> = Vec::with_capacity(groups.len());
        for g in groups {
            let key = self.key.decode_outer(&g.key)?;
            let mut values = Vec::with_capacity(g.count);
            let mut rest = g.values.as_slice();
            for _ in 0..g.count {
                values.push(self.value.decode(&mut rest)?);
            }
            out.push(WindowedValue {
                value: KV::new(key, values),
                timestamp: g.timestamp,
                window: g.window,
                pane: g.pane,
            });
        }
        Ok(Batch::new(out))
    }
}

/// GroupByKey's grouping kernel for `KV<K, V>` input (groups come out as `KV<K, Vec<V>>`), for
/// driving a grouping engine outside a pipeline.
pub fn kernel<K: Element, V: Element>() -> Arc<dyn GroupKernel> {
    Arc::new(GroupKernelImpl::<K, V>::new())
}

impl<K: Element, V: Element> PTransform<PCollection<KV<K, V>>> for GroupByKey<K, V> {
    type Output = PCollection<KV<K, Vec<V>>>;
    fn expand(self, input: PCollection<KV<K, V>>) -> Self::Output {
        group_by_key_primitive(input, Arc::new(GroupKernelImpl::<K, V>::new()), self.checked)
    }
}

/// The GroupByKey primitive over `input` with `kernel` building the groups' output (`O`):
/// checks the key coder and the windowing as Beam does, then adds the node.
pub(crate) fn group_by_key_primitive<K: Element, V: Element, O: Element>(
    input: PCollection<KV<K, V>>,
    kernel: Arc<dyn GroupKernel>,
    check_windowing: bool,
) -> PCollection<O> {
    let p = input.pipeline().clone();
    let step = p.current_step();
    if let Err(why) = ElementCoder::<K>::new().verify_deterministic() {
        p.record_error(&step, format!("the key coder of a GroupByKey must be deterministic: {why}"));
    }
    let windowing = input.windowing_strategy();
    let b = output_boundedness(&p, &[input.id()]);
    if check_windowing && b == Boundedness::Unbounded && windowing.is_global() && windowing.trigger == Trigger::Default
    {
        p.record_error(
            &step,
            "GroupByKey cannot be applied to non-bounded PCollection in the GlobalWindow without a \
             trigger. Use a Window.into or Window.triggering transform prior to GroupByKey.",
        );
    }
    if check_windowing && !windowing.trigger.is_safe(windowing.allowed_lateness_ms) {
        p.record_error(
            &step,
            format!(
                "Unsafe trigger '{:?}' may lose data, did you mean to wrap it in Repeatedly.forever(...)?",
                windowing.trigger
            ),
        );
    }
    let node = p.make_primitive(
        crate::urns::GROUP_BY_KEY,
        Payload::GroupByKey(kernel, Arc::new(crate::kernel::KvPartitioner::<K, V>::default())),
    );
    let mut out_windowing = windowing;
    out_windowing.already_merged = out_windowing.window_fn.is_merging();
    out_windowing.trigger = out_windowing.trigger.continuation();
    p.new_output(node, "out", b, out_windowing)
}
