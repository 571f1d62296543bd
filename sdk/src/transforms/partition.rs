//! Partition: split one PCollection into several by a function.

use crate::coders::Element;
use crate::do_fn::{DoFn, ProcessContext, TupleTag};
use crate::error::UserResult;
use crate::pipeline::{PCollection, PCollectionList, PTransform};
use crate::transforms::par_do::{ErasedTupleTag, ParDo};
use std::marker::PhantomData;

/// Splits a PCollection into `n` by `f(element, n) -> index`; an index outside `0..n` fails the
/// pipeline.
pub struct Partition<F, T> {
    n: usize,
    f: F,
    _t: PhantomData<fn(T)>,
}

impl<F, T> Partition<F, T> {
    /// `n` partitions chosen by `f`.
    pub fn of(n: usize, f: F) -> Self {
        Partition { n, f, _t: PhantomData }
    }
}

#[derive(Clone)]
struct PartitionFn<F, T> {
    n: usize,
    f: F,
    tags: Vec<TupleTag<T>>,
}

impl<T: Element, F: Fn(&T, usize) -> usize + Clone + Send + 'static> DoFn for PartitionFn<F, T> {
    type In = T;
    type Out = T;
    fn process(&mut self, e: T, ctx: &mut ProcessContext<'_, T>) -> UserResult {
        let i = (self.f)(&e, self.n);
        match i {
            0 => ctx.output(e),
            i if i < self.n => ctx.output_tagged(&self.tags[i], e)?,
            i => {
                return Err(
                    format!("Partition function returned out of bounds index: {i} not in [0..{})", self.n).into()
                )
            }
        }
        Ok(())
    }
}

impl<T: Element, F: Fn(&T, usize) -> usize + Clone + Send + Sync + 'static> PTransform<PCollection<T>>
    for Partition<F, T>
{
    type Output = PCollectionList<T>;
    fn expand(self, input: PCollection<T>) -> Self::Output {
        let p = input.pipeline().clone();
        if self.n == 0 {
            p.record_error(&p.current_step(), "Partition needs at least one partition");
            return PCollectionList::empty(&p);
        }
        let tags: Vec<TupleTag<T>> = (0..self.n).map(|i| TupleTag::new(format!("out{i}"))).collect();
        let additional: Vec<ErasedTupleTag> = tags[1..].iter().map(ErasedTupleTag::from).collect();
        let out = input.apply(
            "ParDo",
            ParDo::of(PartitionFn { n: self.n, f: self.f, tags: tags.clone() }).with_outputs(&tags[0], additional),
        );
        let items = tags.iter().filter_map(|t| out.get(t)).collect();
        PCollectionList::of(&p, items)
    }
}
