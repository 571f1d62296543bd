//! `CombineFnWithContext`: combine functions that read side inputs, on `Combine.perKey` and
//! `Combine.globally` with `with_side_inputs(...)`, as in Beam.

use crate::coders::Element;
use crate::do_fn::{DoFn, ProcessContext};
use crate::error::{UserError, UserResult};
use crate::kernel::{SideInputReader, SideInputSpec};
use crate::kv::KV;
use crate::pipeline::{PCollection, PTransform};
use crate::transforms::group_by_key::GroupByKey;
use crate::transforms::keys::Values;
use crate::transforms::map::Map;
use crate::transforms::par_do::ParDo;
use crate::view::{PCollectionView, ViewValue};
use crate::window::Window;
use std::marker::PhantomData;

/// What a [`CombineFnWithContext`] sees besides its values: the window being combined (after
/// merging, for session windows) and the side inputs declared with `with_side_inputs`, read for
/// that window.
pub struct CombineContext<'a> {
    sides: &'a dyn SideInputReader,
    window: Window,
}

impl CombineContext<'_> {
    /// The window being combined.
    pub fn window(&self) -> &Window {
        &self.window
    }
    /// The value of a side input for the window being combined.
    pub fn side_input<V: ViewValue>(&self, view: &PCollectionView<V>) -> Result<V::Output, UserError> {
        V::from_any(self.sides.get(view.id(), &self.window)?)
    }
}

/// Beam's `CombineFnWithContext`: a [`crate::CombineFn`] whose steps see a [`CombineContext`],
/// and so the side inputs of the window being combined. Each step may fail (a side input that
/// is not there, for instance), failing the pipeline with the step's name.
pub trait CombineFnWithContext: Clone + Send + Sync + 'static {
    /// Input type.
    type In: Element;
    /// Accumulator type.
    type Accum: Element;
    /// Output type.
    type Out: Element;
    /// A fresh accumulator.
    fn create_accumulator(&self, ctx: &CombineContext<'_>) -> Result<Self::Accum, UserError>;
    /// Adds an input.
    fn add_input(&self, acc: &mut Self::Accum, input: Self::In, ctx: &CombineContext<'_>) -> UserResult;
    /// Merges accumulators into one.
    fn merge_accumulators(&self, accs: Vec<Self::Accum>, ctx: &CombineContext<'_>) -> Result<Self::Accum, UserError>;
    /// The output of an accumulator.
    fn extract_output(&self, acc: Self::Accum, ctx: &CombineContext<'_>) -> Result<Self::Out, UserError>;
}

/// Combines `values` in the context of `ctx`'s window: one accumulator per value, merged (the
/// merge step is exercised as a runner pre-combining would), then extracted.
fn combine<F: CombineFnWithContext>(
    fn_: &F,
    values: Vec<F::In>,
    ctx: &CombineContext<'_>,
) -> Result<F::Out, UserError> {
    let mut acc = fn_.create_accumulator(ctx)?;
    for v in values {
        fn_.add_input(&mut acc, v, ctx)?;
    }
    let merged = fn_.merge_accumulators(vec![acc], ctx)?;
    fn_.extract_output(merged, ctx)
}

/// Combines each grouped key's values with the context of its window.
struct CombineGroupedFn<K, F>(F, PhantomData<fn(K)>);

impl<K, F: Clone> Clone for CombineGroupedFn<K, F> {
    fn clone(&self) -> Self {
        CombineGroupedFn(self.0.clone(), PhantomData)
    }
}

impl<K: Element, F: CombineFnWithContext> DoFn for CombineGroupedFn<K, F> {
    type In = KV<K, Vec<F::In>>;
    type Out = KV<K, F::Out>;
    fn process(&mut self, kv: Self::In, ctx: &mut ProcessContext<'_, Self::Out>) -> UserResult {
        let cc = CombineContext { sides: ctx.sides, window: ctx.window };
        let out = combine(&self.0, kv.value, &cc)?;
        ctx.output(KV::new(kv.key, out));
        Ok(())
    }
}

/// `Combine.perKey` of a [`CombineFnWithContext`]; see [`CombinePerKeyWithContext::with_side_inputs`].
///
/// ```
/// use weir_sdk::prelude::*;
/// use weir_sdk::transforms::combine_with_context::{CombineContext, CombineFnWithContext, CombinePerKeyWithContext};
/// use weir_sdk::view::{PCollectionView, Singleton};
///
/// /// Sums values, each scaled by a factor read from a side input.
/// #[derive(Clone)]
/// struct ScaledSum(PCollectionView<Singleton<i64>>);
///
/// impl CombineFnWithContext for ScaledSum {
///     type In = i64;
///     type Accum = i64;
///     type Out = i64;
///     fn create_accumulator(&self, _: &CombineContext<'_>) -> Result<i64, UserError> {
///         Ok(0)
///     }
///     fn add_input(&self, acc: &mut i64, v: i64, ctx: &CombineContext<'_>) -> UserResult {
///         *acc += v * ctx.side_input(&self.0)?;
///         Ok(())
///     }
///     fn merge_accumulators(&self, accs: Vec<i64>, _: &CombineContext<'_>) -> Result<i64, UserError> {
///         Ok(accs.into_iter().sum())
///     }
///     fn extract_output(&self, acc: i64, _: &CombineContext<'_>) -> Result<i64, UserError> {
///         Ok(acc)
///     }
/// }
///
/// let p = Pipeline::create();
/// let factor = View::as_singleton(&p.apply("Factor", Create::of(vec![10i64])));
/// let sums: PCollection<KV<String, i64>> = p
///     .apply("Values", Create::of(vec![KV::new("a".to_string(), 1i64)]))
///     .apply("Sum", CombinePerKeyWithContext::of(ScaledSum(factor.clone())).with_side_inputs(vec![factor.spec().clone()]));
/// assert!(p.validate().is_ok());
/// ```
pub struct CombinePerKeyWithContext<K, F> {
    fn_: F,
    sides: Vec<SideInputSpec>,
    _k: PhantomData<fn(K)>,
}

impl<K: Element, F: CombineFnWithContext> CombinePerKeyWithContext<K, F> {
    /// Combines each key's values with `fn_`.
    pub fn of(fn_: F) -> Self {
        CombinePerKeyWithContext { fn_, sides: Vec::new(), _k: PhantomData }
    }
    /// Declares the side inputs the combine function reads through its context.
    pub fn with_side_inputs(mut self, views: Vec<SideInputSpec>) -> Self {
        self.sides.extend(views);
        self
    }
}

impl<K: Element, F: CombineFnWithContext> PTransform<PCollection<KV<K, F::In>>> for CombinePerKeyWithContext<K, F> {
    type Output = PCollection<KV<K, F::Out>>;
    fn expand(self, input: PCollection<KV<K, F::In>>) -> Self::Output {
        // Grouped first, so the context's window is the window after merging.
        input.apply("GroupByKey", GroupByKey::create()).apply(
            "Combine.GroupedValues",
            ParDo::of(CombineGroupedFn(self.fn_, PhantomData)).with_side_inputs(self.sides),
        )
    }
}

/// `Combine.globally` of a [`CombineFnWithContext`]: as [`crate::transforms::combine::CombineGlobally`],
/// the default for an empty global window is `extract_output(create_accumulator())`, computed
/// with the context of the global window.
pub struct CombineGloballyWithContext<F> {
    fn_: F,
    sides: Vec<SideInputSpec>,
    with_defaults: bool,
}

impl<F: CombineFnWithContext> CombineGloballyWithContext<F> {
    /// Combines all values with `fn_`.
    pub fn of(fn_: F) -> Self {
        CombineGloballyWithContext { fn_, sides: Vec::new(), with_defaults: true }
    }
    /// Declares the side inputs the combine function reads through its context.
    pub fn with_side_inputs(mut self, views: Vec<SideInputSpec>) -> Self {
        self.sides.extend(views);
        self
    }
    /// Emits nothing for an empty input instead of the default. Required outside the global
    /// window.
    pub fn without_defaults(self) -> Self {
        CombineGloballyWithContext { with_defaults: false, ..self }
    }
}

/// Emits the default for the impulse when the combined global window is empty.
struct DefaultWithContextFn<F: CombineFnWithContext> {
    fn_: F,
    combined: PCollectionView<crate::view::ListOf<F::Out>>,
}

impl<F: CombineFnWithContext> Clone for DefaultWithContextFn<F> {
    fn clone(&self) -> Self {
        DefaultWithContextFn { fn_: self.fn_.clone(), combined: self.combined.clone() }
    }
}

impl<F: CombineFnWithContext> DoFn for DefaultWithContextFn<F> {
    type In = Vec<u8>;
    type Out = F::Out;
    fn process(&mut self, _: Vec<u8>, ctx: &mut ProcessContext<'_, F::Out>) -> UserResult {
        if ctx.side_input(&self.combined)?.is_empty() {
            let cc = CombineContext { sides: ctx.sides, window: ctx.window };
            let out = combine(&self.fn_, Vec::new(), &cc)?;
            ctx.output(out);
        }
        Ok(())
    }
}

impl<F: CombineFnWithContext> PTransform<PCollection<F::In>> for CombineGloballyWithContext<F> {
    type Output = PCollection<F::Out>;
    fn expand(self, input: PCollection<F::In>) -> Self::Output {
        let combined = input
            .apply("WithKeys", Map::new(|v: F::In| KV::new((), v)))
            .apply(
                "Combine.perKey",
                CombinePerKeyWithContext::of(self.fn_.clone()).with_side_inputs(self.sides.clone()),
            )
            .apply("Values", Values::create());
        if !self.with_defaults {
            return combined;
        }
        let (fn_, mut sides) = (self.fn_, self.sides);
        crate::transforms::combine::insert_default_if_empty(&input, combined, |view| {
            sides.push(view.spec().clone());
            (DefaultWithContextFn { fn_, combined: view }, sides)
        })
    }
}
