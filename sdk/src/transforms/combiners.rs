//! The standard combiners: Count, Sum, Min, Max, Mean, Top, Latest and Sample.

use crate::coders::Element;
use crate::do_fn::{DoFn, ProcessContext};
use crate::error::UserResult;
use crate::kv::KV;
use crate::pipeline::{PCollection, PTransform};
use crate::transforms::combine::{Combine, CombineFn, CombineGlobally, CombinePerKey};
use crate::transforms::map::{FlatMap, Map};
use crate::transforms::par_do::ParDo;
use crate::windowed_value::TimestampedValue;
use std::cmp::Ordering;
use std::marker::PhantomData;
use std::sync::Arc;

/// Counts inputs.
pub struct CountFn<T>(PhantomData<fn(T)>);

impl<T> Clone for CountFn<T> {
    fn clone(&self) -> Self {
        CountFn(PhantomData)
    }
}

impl<T> Default for CountFn<T> {
    fn default() -> Self {
        CountFn(PhantomData)
    }
}

impl<T: Element> CombineFn for CountFn<T> {
    type In = T;
    type Accum = i64;
    type Out = i64;
    fn create_accumulator(&self) -> i64 {
        0
    }
    fn add_input(&self, acc: &mut i64, _: T) {
        *acc += 1;
    }
    fn merge_accumulators(&self, accs: Vec<i64>) -> i64 {
        accs.into_iter().sum()
    }
    fn extract_output(&self, acc: i64) -> i64 {
        acc
    }
}

/// Count: globally, per key, per element.
pub struct Count;

impl Count {
    /// The number of elements (0 for an empty global window).
    pub fn globally<T: Element>() -> CombineGlobally<CountFn<T>> {
        Combine::globally(CountFn::default())
    }
    /// The number of values of each key.
    pub fn per_key<K: Element, V: Element>() -> CombinePerKey<K, CountFn<V>> {
        Combine::per_key(CountFn::default())
    }
    /// How often each distinct element occurs.
    pub fn per_element<T: Element>() -> CountPerElement<T> {
        CountPerElement(PhantomData)
    }
}

/// See [`Count::per_element`].
pub struct CountPerElement<T>(PhantomData<fn(T)>);

impl<T: Element> PTransform<PCollection<T>> for CountPerElement<T> {
    type Output = PCollection<KV<T, i64>>;
    fn expand(self, input: PCollection<T>) -> Self::Output {
        input.apply("Init", Map::new(|t: T| KV::new(t, ()))).apply("Count.perKey", Count::per_key())
    }
}

/// Numbers that Sum, Min, Max and Mean work on.
pub trait Numeric: Element + Copy + PartialOrd {
    /// The additive identity.
    const ZERO: Self;
    /// The largest value (identity of Min).
    const MAX: Self;
    /// The smallest value (identity of Max).
    const MIN: Self;
    /// Addition (wrapping for integers, as Java's).
    fn add(self, other: Self) -> Self;
    /// As a double, for Mean.
    fn to_f64(self) -> f64;
}

macro_rules! numeric_int {
    ($($t:ty),*) => {$(
        impl Numeric for $t {
            const ZERO: Self = 0;
            const MAX: Self = <$t>::MAX;
            const MIN: Self = <$t>::MIN;
            fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            fn to_f64(self) -> f64 { self as f64 }
        }
    )*};
}
numeric_int!(i32, i64, u32, u64, usize);

macro_rules! numeric_float {
    ($($t:ty),*) => {$(
        impl Numeric for $t {
            const ZERO: Self = 0.0;
            const MAX: Self = <$t>::INFINITY;
            const MIN: Self = <$t>::NEG_INFINITY;
            fn add(self, o: Self) -> Self { self + o }
            fn to_f64(self) -> f64 { self as f64 }
        }
    )*};
}
numeric_float!(f32, f64);

macro_rules! binary_fn {
    ($(#[$doc:meta])* $name:ident, $identity:ident, |$a:ident, $b:ident| $merge:expr) => {
        $(#[$doc])*
        pub struct $name<T>(PhantomData<fn(T)>);
        impl<T> Clone for $name<T> {
            fn clone(&self) -> Self {
                $name(PhantomData)
            }
        }
        impl<T> Default for $name<T> {
            fn default() -> Self {
                $name(PhantomData)
            }
        }
        impl<T: Numeric> CombineFn for $name<T> {
            type In = T;
            type Accum = T;
            type Out = T;
            fn create_accumulator(&self) -> T {
                T::$identity
            }
            fn add_input(&self, acc: &mut T, $b: T) {
                let $a = *acc;
                *acc = $merge;
            }
            fn merge_accumulators(&self, accs: Vec<T>) -> T {
                accs.into_iter().fold(T::$identity, |$a, $b| $merge)
            }
            fn extract_output(&self, acc: T) -> T {
                acc
            }
        }
    };
}

binary_fn!(
    /// Sums numbers (0 when empty).
    SumFn, ZERO, |a, b| a.add(b)
);
binary_fn!(
    /// The smallest number (the type's maximum when empty, as Beam's `Min.integersGlobally`).
    MinFn, MAX, |a, b| if b < a { b } else { a }
);
binary_fn!(
    /// The largest number (the type's minimum when empty).
    MaxFn, MIN, |a, b| if b > a { b } else { a }
);

macro_rules! numeric_combiner {
    ($(#[$doc:meta])* $name:ident, $fn_:ident) => {
        $(#[$doc])*
        pub struct $name;
        impl $name {
            /// Over all elements of each window.
            pub fn globally<T: Numeric>() -> CombineGlobally<$fn_<T>> {
                Combine::globally($fn_::default())
            }
            /// Over the values of each key.
            pub fn per_key<K: Element, T: Numeric>() -> CombinePerKey<K, $fn_<T>> {
                Combine::per_key($fn_::default())
            }
        }
    };
}

numeric_combiner!(
    /// Sum of numbers.
    Sum, SumFn
);
numeric_combiner!(
    /// Minimum of numbers.
    Min, MinFn
);
numeric_combiner!(
    /// Maximum of numbers.
    Max, MaxFn
);
numeric_combiner!(
    /// Arithmetic mean of numbers, as a double (NaN when empty).
    Mean, MeanFn
);

/// The mean of numbers: accumulator (count, sum).
pub struct MeanFn<T>(PhantomData<fn(T)>);

impl<T> Clone for MeanFn<T> {
    fn clone(&self) -> Self {
        MeanFn(PhantomData)
    }
}

impl<T> Default for MeanFn<T> {
    fn default() -> Self {
        MeanFn(PhantomData)
    }
}

impl<T: Numeric> CombineFn for MeanFn<T> {
    type In = T;
    type Accum = (i64, f64);
    type Out = f64;
    fn create_accumulator(&self) -> (i64, f64) {
        (0, 0.0)
    }
    fn add_input(&self, acc: &mut (i64, f64), v: T) {
        acc.0 += 1;
        acc.1 += v.to_f64();
    }
    fn merge_accumulators(&self, accs: Vec<(i64, f64)>) -> (i64, f64) {
        accs.into_iter().fold((0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1))
    }
    fn extract_output(&self, acc: (i64, f64)) -> f64 {
        if acc.0 == 0 {
            f64::NAN
        } else {
            acc.1 / acc.0 as f64
        }
    }
}

/// A comparator shared by Top's instances.
pub type Comparator<T> = Arc<dyn Fn(&T, &T) -> Ordering + Send + Sync>;

/// Keeps the `n` largest elements by a comparator, largest first.
pub struct TopFn<T> {
    n: usize,
    cmp: Comparator<T>,
}

impl<T> Clone for TopFn<T> {
    fn clone(&self) -> Self {
        TopFn { n: self.n, cmp: self.cmp.clone() }
    }
}

impl<T: Element> TopFn<T> {
    fn trim(&self, acc: &mut Vec<T>) {
        acc.sort_by(|a, b| (self.cmp)(b, a));
        acc.truncate(self.n);
    }
}

impl<T: Element> CombineFn for TopFn<T> {
    type In = T;
    type Accum = Vec<T>;
    type Out = Vec<T>;
    fn create_accumulator(&self) -> Vec<T> {
        Vec::new()
    }
    fn add_input(&self, acc: &mut Vec<T>, v: T) {
        acc.push(v);
        if acc.len() > self.n.saturating_mul(2).max(16) {
            self.trim(acc);
        }
    }
    fn merge_accumulators(&self, accs: Vec<Vec<T>>) -> Vec<T> {
        let mut all: Vec<T> = accs.into_iter().flatten().collect();
        self.trim(&mut all);
        all
    }
    fn extract_output(&self, mut acc: Vec<T>) -> Vec<T> {
        self.trim(&mut acc);
        acc
    }
}

/// A [`TopFn`] keeping the `n` largest elements by `cmp`.
pub fn top_fn<T: Element>(n: usize, cmp: impl Fn(&T, &T) -> Ordering + Send + Sync + 'static) -> TopFn<T> {
    TopFn { n, cmp: Arc::new(cmp) }
}

/// Top: the `n` largest or smallest elements, globally or per key, as one list (largest first,
/// or smallest first for `smallest`).
pub struct Top;

impl Top {
    /// The `n` largest elements by `cmp`.
    pub fn of<T: Element>(
        n: usize,
        cmp: impl Fn(&T, &T) -> Ordering + Send + Sync + 'static,
    ) -> CombineGlobally<TopFn<T>> {
        Combine::globally(TopFn { n, cmp: Arc::new(cmp) })
    }
    /// The `n` largest elements.
    pub fn largest<T: Element + Ord>(n: usize) -> CombineGlobally<TopFn<T>> {
        Self::of(n, T::cmp)
    }
    /// The `n` smallest elements, smallest first.
    pub fn smallest<T: Element + Ord>(n: usize) -> CombineGlobally<TopFn<T>> {
        Self::of(n, |a: &T, b: &T| b.cmp(a))
    }
    /// The `n` largest values of each key by `cmp`.
    pub fn per_key<K: Element, T: Element>(
        n: usize,
        cmp: impl Fn(&T, &T) -> Ordering + Send + Sync + 'static,
    ) -> CombinePerKey<K, TopFn<T>> {
        Combine::per_key(TopFn { n, cmp: Arc::new(cmp) })
    }
    /// The `n` largest values of each key.
    pub fn largest_per_key<K: Element, T: Element + Ord>(n: usize) -> CombinePerKey<K, TopFn<T>> {
        Self::per_key(n, T::cmp)
    }
    /// The `n` smallest values of each key.
    pub fn smallest_per_key<K: Element, T: Element + Ord>(n: usize) -> CombinePerKey<K, TopFn<T>> {
        Self::per_key(n, |a: &T, b: &T| b.cmp(a))
    }
}

/// Keeps the value with the latest timestamp.
pub struct LatestFn<T>(PhantomData<fn(T)>);

impl<T> Clone for LatestFn<T> {
    fn clone(&self) -> Self {
        LatestFn(PhantomData)
    }
}

fn later<T>(a: Option<TimestampedValue<T>>, b: Option<TimestampedValue<T>>) -> Option<TimestampedValue<T>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.timestamp > a.timestamp { b } else { a }),
        (a, None) => a,
        (None, b) => b,
    }
}

impl<T: Element> CombineFn for LatestFn<T> {
    type In = TimestampedValue<T>;
    type Accum = Option<TimestampedValue<T>>;
    type Out = Option<T>;
    fn create_accumulator(&self) -> Self::Accum {
        None
    }
    fn add_input(&self, acc: &mut Self::Accum, v: Self::In) {
        *acc = later(acc.take(), Some(v));
    }
    fn merge_accumulators(&self, accs: Vec<Self::Accum>) -> Self::Accum {
        accs.into_iter().fold(None, later)
    }
    fn extract_output(&self, acc: Self::Accum) -> Option<T> {
        acc.map(|t| t.value)
    }
}

/// Pairs every element with its timestamp (Beam's `Reify.timestamps`).
#[derive(Clone)]
pub struct ReifyTimestampsFn<T>(PhantomData<fn(T)>);

impl<T> Default for ReifyTimestampsFn<T> {
    fn default() -> Self {
        ReifyTimestampsFn(PhantomData)
    }
}

impl<T: Element> DoFn for ReifyTimestampsFn<T> {
    type In = T;
    type Out = TimestampedValue<T>;
    fn process(&mut self, v: T, ctx: &mut ProcessContext<'_, TimestampedValue<T>>) -> UserResult {
        let ts = ctx.timestamp();
        ctx.output(TimestampedValue::new(v, ts));
        Ok(())
    }
}

/// Latest: the element (or each key's value) with the greatest timestamp.
pub struct Latest;

impl Latest {
    /// The latest element of each window (`None` for an empty global window).
    pub fn globally<T: Element>() -> LatestGlobally<T> {
        LatestGlobally(PhantomData)
    }
    /// The latest value of each key.
    pub fn per_key<K: Element, V: Element>() -> LatestPerKey<K, V> {
        LatestPerKey(PhantomData)
    }
}

/// See [`Latest::globally`].
pub struct LatestGlobally<T>(PhantomData<fn(T)>);

impl<T: Element> PTransform<PCollection<T>> for LatestGlobally<T> {
    type Output = PCollection<Option<T>>;
    fn expand(self, input: PCollection<T>) -> Self::Output {
        input
            .apply("Reify", ParDo::of(ReifyTimestampsFn(PhantomData)))
            .apply("Latest", Combine::globally(LatestFn(PhantomData)))
    }
}

/// See [`Latest::per_key`].
pub struct LatestPerKey<K, V>(PhantomData<fn(K, V)>);

#[derive(Clone)]
struct ReifyValueTimestampsFn<K, V>(PhantomData<fn(K, V)>);

impl<K: Element, V: Element> DoFn for ReifyValueTimestampsFn<K, V> {
    type In = KV<K, V>;
    type Out = KV<K, TimestampedValue<V>>;
    fn process(&mut self, kv: KV<K, V>, ctx: &mut ProcessContext<'_, Self::Out>) -> UserResult {
        let ts = ctx.timestamp();
        ctx.output(KV::new(kv.key, TimestampedValue::new(kv.value, ts)));
        Ok(())
    }
}

impl<K: Element, V: Element> PTransform<PCollection<KV<K, V>>> for LatestPerKey<K, V> {
    type Output = PCollection<KV<K, V>>;
    fn expand(self, input: PCollection<KV<K, V>>) -> Self::Output {
        input
            .apply("Reify", ParDo::of(ReifyValueTimestampsFn(PhantomData)))
            .apply("Latest", Combine::per_key(LatestFn(PhantomData)))
            .apply(
                "Unwrap",
                FlatMap::new(|kv: KV<K, Option<V>>| kv.value.map(|v| KV::new(kv.key, v)).into_iter().collect()),
            )
    }
}

/// Collects every input into one list (Beam's `ToList`).
pub struct ToListFn<T>(PhantomData<fn(T)>);

impl<T> Default for ToListFn<T> {
    fn default() -> Self {
        ToListFn(PhantomData)
    }
}

impl<T> Clone for ToListFn<T> {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl<T: Element> CombineFn for ToListFn<T> {
    type In = T;
    type Accum = Vec<T>;
    type Out = Vec<T>;
    fn create_accumulator(&self) -> Vec<T> {
        Vec::new()
    }
    fn add_input(&self, acc: &mut Vec<T>, v: T) {
        acc.push(v);
    }
    fn merge_accumulators(&self, accs: Vec<Vec<T>>) -> Vec<T> {
        accs.into_iter().flatten().collect()
    }
    fn extract_output(&self, acc: Vec<T>) -> Vec<T> {
        acc
    }
}

/// Keeps any `n` inputs.
pub struct SampleAnyFn<T> {
    n: usize,
    _t: PhantomData<fn(T)>,
}

impl<T> Clone for SampleAnyFn<T> {
    fn clone(&self) -> Self {
        SampleAnyFn { n: self.n, _t: PhantomData }
    }
}

impl<T: Element> CombineFn for SampleAnyFn<T> {
    type In = T;
    type Accum = Vec<T>;
    type Out = Vec<T>;
    fn create_accumulator(&self) -> Vec<T> {
        Vec::new()
    }
    fn add_input(&self, acc: &mut Vec<T>, v: T) {
        if acc.len() < self.n {
            acc.push(v);
        }
    }
    fn merge_accumulators(&self, accs: Vec<Vec<T>>) -> Vec<T> {
        accs.into_iter().flatten().take(self.n).collect()
    }
    fn extract_output(&self, acc: Vec<T>) -> Vec<T> {
        acc
    }
}

/// Sample: a bounded number of elements.
pub struct Sample;

impl Sample {
    /// At most `n` arbitrary elements of the input.
    pub fn any<T: Element>(n: usize) -> SampleAny<T> {
        SampleAny { n, _t: PhantomData }
    }
}

/// See [`Sample::any`].
pub struct SampleAny<T> {
    n: usize,
    _t: PhantomData<fn(T)>,
}

impl<T: Element> PTransform<PCollection<T>> for SampleAny<T> {
    type Output = PCollection<T>;
    fn expand(self, input: PCollection<T>) -> Self::Output {
        input
            .apply("Sample", Combine::globally(SampleAnyFn { n: self.n, _t: PhantomData }))
            .apply("Flatten", FlatMap::new(|v: Vec<T>| v))
    }
}
