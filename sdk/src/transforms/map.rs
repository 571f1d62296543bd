//! Map, FlatMap and Filter: element-wise composites over ParDo.

use crate::coders::Element;
use crate::do_fn::{DoFn, ProcessContext};
use crate::error::UserResult;
use crate::pipeline::{PCollection, PTransform};
use crate::transforms::par_do::ParDo;
use std::marker::PhantomData;

macro_rules! element_wise {
    ($(#[$doc:meta])* $name:ident, $fn_name:ident, $bound:path, |$f:ident, $e:ident, $ctx:ident| $body:expr,
     |$vf:ident, $input:ident, $out:ident| $values:expr) => {
        $(#[$doc])*
        pub struct $name<F, I, O> {
            f: F,
            _t: PhantomData<fn(I) -> O>,
        }

        #[doc(hidden)]
        pub struct $fn_name<F, I, O> {
            f: F,
            _t: PhantomData<fn(I) -> O>,
        }

        impl<F: Clone, I, O> Clone for $fn_name<F, I, O> {
            fn clone(&self) -> Self {
                $fn_name { f: self.f.clone(), _t: PhantomData }
            }
        }

        impl<I: Element, O: Element, F: $bound + Clone + Send + 'static> DoFn for $fn_name<F, I, O> {
            type In = I;
            type Out = O;
            #[inline]
            fn process(&mut self, $e: I, $ctx: &mut ProcessContext<'_, O>) -> UserResult {
                let $f = &self.f;
                $body
            }
            #[inline]
            fn process_values(&mut self, $input: &mut Vec<I>, $out: &mut Vec<O>) -> Option<UserResult> {
                let $vf = &self.f;
                Some($values)
            }
        }

        impl<I: Element, O: Element, F: $bound + Clone + Send + 'static> PTransform<PCollection<I>> for $name<F, I, O> {
            type Output = PCollection<O>;
            fn expand(self, input: PCollection<I>) -> PCollection<O> {
                input.apply("ParDo", ParDo::of($fn_name { f: self.f, _t: PhantomData }))
            }
        }
    };
}

element_wise!(
    /// Applies a function to every element: `Map::new(|x: i64| x * 2)`.
    Map, MapFn, Fn(I) -> O, |f, e, ctx| {
        ctx.output(f(e));
        Ok(())
    },
    |f, input, out| {
        out.extend(input.drain(..).map(f));
        Ok(())
    }
);

element_wise!(
    /// Applies a function returning any number of outputs per element:
    /// `FlatMap::new(|line: String| line.split(' ').map(String::from).collect::<Vec<_>>())`.
    FlatMap, FlatMapFn, Fn(I) -> Vec<O>, |f, e, ctx| {
        for o in f(e) {
            ctx.output(o);
        }
        Ok(())
    },
    |f, input, out| {
        for e in input.drain(..) {
            out.extend(f(e));
        }
        Ok(())
    }
);

element_wise!(
    /// Applies a fallible function to every element; an error fails the pipeline with the step
    /// name: `TryMap::new(|s: String| s.parse::<i64>().map_err(Into::into))`.
    TryMap, TryMapFn, Fn(I) -> UserResult<O>, |f, e, ctx| {
        ctx.output(f(e)?);
        Ok(())
    },
    |f, input, out| {
        out.reserve(input.len());
        input.drain(..).try_for_each(|e| {
            out.push(f(e)?);
            Ok(())
        })
    }
);

/// Appends `values` to `out`, moving the buffer when `out` is empty (its own buffer goes back
/// for reuse).
fn append_values<O: Send + 'static>(out: &mut Vec<O>, mut values: Vec<O>) {
    if out.is_empty() {
        crate::kernel::recycle::give(std::mem::replace(out, values));
    } else {
        out.append(&mut values);
        crate::kernel::recycle::give(values);
    }
}

impl<F, I, O> Map<F, I, O> {
    /// Maps with `f`.
    pub fn new(f: F) -> Self {
        Map { f, _t: PhantomData }
    }
}

impl<F, I, O> FlatMap<F, I, O> {
    /// Flat-maps with `f`.
    pub fn new(f: F) -> Self {
        FlatMap { f, _t: PhantomData }
    }
}

impl<F, I, O> TryMap<F, I, O> {
    /// Maps with the fallible `f`.
    pub fn new(f: F) -> Self {
        TryMap { f, _t: PhantomData }
    }
}

/// Keeps the elements satisfying a predicate: `Filter::by(|x: &i64| *x > 0)`.
pub struct Filter<F, T> {
    f: F,
    _t: PhantomData<fn(T)>,
}

impl<F, T> Filter<F, T> {
    /// Keeps elements for which `f` is true.
    pub fn by(f: F) -> Self {
        Filter { f, _t: PhantomData }
    }
}

#[doc(hidden)]
pub struct FilterFn<F, T> {
    f: F,
    _t: PhantomData<fn(T)>,
}

impl<F: Clone, T> Clone for FilterFn<F, T> {
    fn clone(&self) -> Self {
        FilterFn { f: self.f.clone(), _t: PhantomData }
    }
}

impl<T: Element, F: Fn(&T) -> bool + Clone + Send + 'static> DoFn for FilterFn<F, T> {
    type In = T;
    type Out = T;
    #[inline]
    fn process(&mut self, e: T, ctx: &mut ProcessContext<'_, T>) -> UserResult {
        if (self.f)(&e) {
            ctx.output(e);
        }
        Ok(())
    }
    #[inline]
    fn process_values(&mut self, input: &mut Vec<T>, out: &mut Vec<T>) -> Option<UserResult> {
        let mut kept = std::mem::take(input);
        kept.retain(|e| (self.f)(e));
        append_values(out, kept);
        Some(Ok(()))
    }
}

impl<T: Element, F: Fn(&T) -> bool + Clone + Send + 'static> PTransform<PCollection<T>> for Filter<F, T> {
    type Output = PCollection<T>;
    fn expand(self, input: PCollection<T>) -> PCollection<T> {
        input.apply("ParDo", ParDo::of(FilterFn { f: self.f, _t: PhantomData }))
    }
}
