//! Reshuffle: redistribute elements across workers, keeping timestamps and windows.

use crate::coders::Element;
use crate::do_fn::{DoFn, ProcessContext};
use crate::error::UserResult;
use crate::kv::KV;
use crate::pane::PaneInfo;
use crate::pipeline::{PCollection, PTransform};
use crate::time::Timestamp;
use crate::transforms::group_by_key::GroupByKey;
use crate::transforms::par_do::ParDo;
use crate::trigger::{AccumulationMode, TimestampCombiner, Trigger};
use crate::window::Window;
use crate::window_fn::{IdentityWindowFn, WindowingStrategy};
use crate::windowed_value::WindowedValue;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::marker::PhantomData;

/// Redistributes elements by a random key, a fusion break that changes no element, timestamp or
/// window.
pub struct Reshuffle<T> {
    buckets: Option<u32>,
    _t: PhantomData<fn(T)>,
}

impl<T: Element> Reshuffle<T> {
    /// Reshuffles by a random key.
    pub fn via_random_key() -> Self {
        Reshuffle { buckets: None, _t: PhantomData }
    }

    /// Beam's `withNumBuckets(n)`: random keys are drawn from `n` values only, bounding how many
    /// groups (and so workers) the shuffle spreads elements over. Runners that reshuffle
    /// natively (the micro-batch runner's round-robin exchange) place elements by partition
    /// and need no keys; the output is the same.
    pub fn with_num_buckets(self, n: u32) -> Self {
        Reshuffle { buckets: Some(n.max(1)), ..self }
    }
}

/// An element with its timestamp, window and pane, carried through a shuffle.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Reified<T> {
    value: T,
    timestamp: Timestamp,
    window: Window,
    pane: PaneInfo,
}

#[derive(Clone)]
struct AssignRandomKeyFn<T> {
    rng: Option<rand::rngs::SmallRng>,
    buckets: Option<u32>,
    _t: PhantomData<fn(T)>,
}

impl<T: Element> DoFn for AssignRandomKeyFn<T> {
    type In = T;
    type Out = KV<u32, Reified<T>>;
    fn process(&mut self, v: T, ctx: &mut ProcessContext<'_, Self::Out>) -> UserResult {
        let rng = self.rng.get_or_insert_with(|| rand::rngs::SmallRng::seed_from_u64(rand::random()));
        let key = match self.buckets {
            Some(n) => rng.random_range(0..n),
            None => rng.random::<u32>(),
        };
        let r = Reified { value: v, timestamp: ctx.timestamp(), window: *ctx.window(), pane: *ctx.pane() };
        ctx.output(KV::new(key, r));
        Ok(())
    }
}

#[derive(Clone)]
struct RestoreFn<T>(PhantomData<fn(T)>);

impl<T: Element> DoFn for RestoreFn<T> {
    type In = KV<u32, Vec<Reified<T>>>;
    type Out = T;
    fn process(&mut self, kv: Self::In, ctx: &mut ProcessContext<'_, T>) -> UserResult {
        for r in kv.value {
            ctx.output_windowed_value(WindowedValue {
                value: r.value,
                timestamp: r.timestamp,
                window: r.window,
                pane: r.pane,
            });
        }
        Ok(())
    }
}

impl<T: Element> PTransform<PCollection<T>> for Reshuffle<T> {
    type Output = PCollection<T>;
    fn expand(self, input: PCollection<T>) -> Self::Output {
        let windowing = input.windowing_strategy();
        let keyed = input
            .apply("AssignKey", ParDo::of(AssignRandomKeyFn { rng: None, buckets: self.buckets, _t: PhantomData }));
        // Beam's reshuffle strategy: windows kept as they are (sessions are not merged), a pane
        // per arrival, and no data ever late, so the shuffle changes nothing but placement, in
        // batch and in streaming.
        let mut strategy =
            WindowingStrategy::of(std::sync::Arc::new(IdentityWindowFn::new(windowing.window_fn.clone())));
        strategy.trigger = Trigger::Repeatedly(Box::new(Trigger::AfterCount(1)));
        strategy.accumulation_mode = AccumulationMode::Discarding;
        strategy.timestamp_combiner = TimestampCombiner::Earliest;
        strategy.allowed_lateness_ms = crate::time::GLOBAL_WINDOW_MAX_TIMESTAMP;
        keyed.set_windowing(strategy);
        let out = keyed.apply("GroupByKey", GroupByKey::create()).apply("Restore", ParDo::of(RestoreFn(PhantomData)));
        out.set_windowing(windowing);
        out
    }
    fn composite_urn() -> Option<&'static str> {
        Some(crate::urns::RESHUFFLE)
    }
}
