//! Flatten: the union of PCollections of one type.

use crate::coders::Element;
use crate::graph::Payload;
use crate::pipeline::{output_boundedness, PCollection, PCollectionList, PInput, PTransform};
use crate::window_fn::WindowingStrategy;
use std::marker::PhantomData;

/// Merges a [`PCollectionList`] into one PCollection, keeping every element's window. All inputs
/// must have compatible windowing. Flattening an empty list gives an empty PCollection.
pub struct Flatten<T> {
    /// The output's windowing when the inputs' may differ ([`Flatten::into_windowing`]).
    windowing: Option<WindowingStrategy>,
    _t: PhantomData<fn() -> T>,
}

impl<T: Element> Flatten<T> {
    /// Flattens a list of PCollections.
    pub fn pcollections() -> Self {
        Flatten { windowing: None, _t: PhantomData }
    }

    /// Flattens a list of PCollections whose windowing may differ into one windowed by
    /// `windowing`, each element keeping the window it has, as Beam's Python SDK flattens
    /// differently windowed inputs (with a warning): what a later grouping does with those
    /// windows is the output strategy's to say. For a portable pipeline, whose proto gives the
    /// output's windowing; a Rust pipeline re-windows its inputs with `Window::into` instead.
    pub fn into_windowing(windowing: WindowingStrategy) -> Self {
        Flatten { windowing: Some(windowing), _t: PhantomData }
    }
}

impl<T: Element> PTransform<PCollectionList<T>> for Flatten<T> {
    type Output = PCollection<T>;
    fn expand(self, input: PCollectionList<T>) -> Self::Output {
        let p = input.pipeline().clone();
        let windowing = self.windowing.unwrap_or_else(|| common_windowing(&input));
        let ids = input.pcollection_ids();
        let node = p.make_primitive(crate::urns::FLATTEN, Payload::Flatten);
        let b = output_boundedness(&p, &ids);
        p.new_output(node, "out", b, windowing)
    }
}

/// The windowing of `inputs`' first, recording an error on the pipeline for any input whose
/// windowing is not compatible with it.
fn common_windowing<T: Element>(inputs: &PCollectionList<T>) -> WindowingStrategy {
    let p = inputs.pipeline();
    let windowing = inputs.get(0).map(|pc| pc.windowing_strategy()).unwrap_or_else(WindowingStrategy::global);
    for (i, pc) in inputs.all().iter().enumerate().skip(1) {
        let w = pc.windowing_strategy();
        if !windowing.is_compatible(&w) {
            p.record_error(
                &p.current_step(),
                format!(
                    "Flatten of incompatible windowing: input 0 is windowed by {:?} but input {i} by {:?}",
                    windowing.window_fn, w.window_fn
                ),
            );
        }
    }
    windowing
}
