//! Window.into: (re)assigns windows.

use crate::coders::Element;
use crate::error::UserError;
use crate::graph::Payload;
use crate::kernel::{downcast_batch, AssignKernel, Batch};
use crate::pipeline::{output_boundedness, PCollection, PTransform};
use crate::window_fn::{WindowFn, WindowingStrategy};
use crate::windowed_value::WindowedValue;
use std::marker::PhantomData;
use std::sync::Arc;

/// Assigns every element to the windows of a [`WindowFn`]: `Window::into(FixedWindows::of(..))`.
pub struct Window<T, W> {
    window_fn: W,
    _t: PhantomData<fn() -> T>,
}

impl<T: Element, W: WindowFn + Clone> Window<T, W> {
    /// Windows elements with `window_fn`.
    pub fn into(window_fn: W) -> Self {
        Window {
            window_fn,
            _t: PhantomData,
        }
    }
}

struct AssignKernelImpl<T, W> {
    window_fn: W,
    _t: PhantomData<fn() -> T>,
}

impl<T: Element, W: WindowFn> AssignKernel for AssignKernelImpl<T, W> {
    fn assign(&self, input: Batch) -> Result<Batch, UserError> {
        let input = downcast_batch::<T>(input)?;
        let mut out: Vec<WindowedValue<T>> = Vec::with_capacity(input.len());
        let mut windows = Vec::with_capacity(4);
        for wv in input {
            windows.clear();
            self.window_fn
                .assign_windows(wv.timestamp, &wv.window, &mut windows);
            if let Some((last, rest)) = windows.split_last() {
                for w in rest {
                    out.push(WindowedValue {
                        value: wv.value.clone(),
                        timestamp: wv.timestamp,
                        window: *w,
                        pane: wv.pane,
                    });
                }
                out.push(WindowedValue {
                    value: wv.value,
                    timestamp: wv.timestamp,
                    window: *last,
                    pane: wv.pane,
                });
            }
        }
        Ok(Box::new(out))
    }
}

impl<T: Element, W: WindowFn + Clone> PTransform<PCollection<T>> for Window<T, W> {
    type Output = PCollection<T>;
    fn expand(self, input: PCollection<T>) -> Self::Output {
        let p = input.pipeline().clone();
        let strategy = WindowingStrategy::of(Arc::new(self.window_fn.clone()));
        let node = p.make_primitive(
            crate::urns::WINDOW_INTO,
            Payload::WindowInto(Arc::new(AssignKernelImpl::<T, W> {
                window_fn: self.window_fn,
                _t: PhantomData,
            })),
        );
        let b = output_boundedness(&p, &[input.id()]);
        p.new_output(node, "out", b, strategy)
    }
}
