//! A fused stage as one operator of Weir's plan: an erased DoFn that gathers a bundle of its
//! input's elements in the stage's wire coder, sends it to an SDK harness, and emits what the
//! harness hands back, with the timestamps, windows and panes the harness gave them.
//!
//! Values cross Weir as the bytes of their wire encoding (see [`crate::stage`]): Weir never
//! decodes an SDK's values, it only finds where each ends ([`RawCoder`]). Side inputs are built
//! per side window from the same bytes ([`SideView`]) and served to the harness through the
//! State API for the windows of the bundle's elements.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weir_sdk::coders::{Coder, CoderError, FullWindowedValue, WindowCoderKind, WindowedValueCoder};
use weir_sdk::error::{UserError, UserResult};
use weir_sdk::kernel::{rows_mut, Batch, ErasedDoFn, KeyedStateEnv, SideInputReader, ViewKernel};
use weir_sdk::window::Window;
use weir_sdk::window_fn::WindowFn;
use weir_sdk::windowed_value::WindowedValue;

use crate::fn_api::{FnError, FnServer, SideInputs};
use crate::metrics::DataPlane;
use crate::proto::fn_execution::v1 as fapi;
use crate::stage::Wire;

/// A value's own bytes in its wire coder, read up to where [`Wire`] says it ends: how Weir
/// carries an SDK's values without decoding them.
pub struct RawCoder(pub Wire);

impl Coder<Vec<u8>> for RawCoder {
    fn encode(&self, value: &Vec<u8>, out: &mut Vec<u8>) -> Result<(), CoderError> {
        out.extend_from_slice(value);
        Ok(())
    }
    fn decode(&self, input: &mut &[u8]) -> Result<Vec<u8>, CoderError> {
        let n = self.0.skip(input).ok_or_else(|| CoderError::new("a value cut short in the data from the harness"))?;
        let (value, rest) = input.split_at(n);
        *input = rest;
        Ok(value.to_vec())
    }
    fn verify_deterministic(&self) -> Result<(), String> {
        Ok(())
    }
    fn name(&self) -> String {
        format!("wire({:?})", self.0)
    }
}

/// The windowed values of a data port: `wire` values in windows of `window`.
pub fn port_coder(wire: Wire, window: WindowCoderKind) -> WindowedValueCoder<Vec<u8>> {
    WindowedValueCoder { value: Arc::new(RawCoder(wire)), window }
}

/// A side input's value in one side window, as the harness reads it through the State API
/// (shared by every bundle that reads it, never copied per bundle).
#[derive(Debug, Default)]
pub struct SideView {
    /// Every element's bytes, one after another (an iterable side input).
    pub elements: Arc<Vec<u8>>,
    /// Per key's bytes, its values' bytes one after another (a multimap side input).
    pub by_key: Arc<crate::fn_api::ByKey>,
}

/// Builds [`SideView`]s; for a multimap side input, `kv` finds each element's key.
pub struct SideViewKernel {
    /// The elements' wire form, when they are KVs to index by key.
    pub kv: Option<Wire>,
}

impl ViewKernel for SideViewKernel {
    fn build(&self, elements: Vec<Batch>) -> Result<Arc<dyn std::any::Any + Send + Sync>, UserError> {
        let (mut all, mut by_key) = (Vec::new(), BTreeMap::<Vec<u8>, Vec<u8>>::new());
        for b in elements {
            let rows = weir_sdk::kernel::downcast_batch::<Vec<u8>>(b)?;
            for wv in rows {
                if let Some(kv) = &self.kv {
                    let (k, v) = kv.split_kv(&wv.value).ok_or("a side input element that is not a whole KV")?;
                    by_key.entry(k.to_vec()).or_default().extend_from_slice(v);
                }
                all.extend_from_slice(&wv.value);
            }
        }
        Ok(Arc::new(SideView { elements: Arc::new(all), by_key: Arc::new(by_key) }))
    }
}

/// One side input of a stage.
pub struct StageSide {
    /// The transform reading it, and its local name (as the harness's state keys name them).
    pub transform: String,
    /// Its local name.
    pub local: String,
    /// The Weir view's id.
    pub view_id: String,
    /// Maps a main window to the side window.
    pub window_fn: Arc<dyn WindowFn>,
}

/// What every instance of one stage's operator shares: the harnesses and the stage as they run
/// it.
pub struct StageRuntime {
    /// The Fn API services the harnesses are connected to.
    pub server: Arc<FnServer>,
    /// The harnesses' worker ids; bundles go to them in turn.
    pub workers: Vec<String>,
    /// The stage's descriptor.
    pub descriptor: fapi::ProcessBundleDescriptor,
    /// The data source transform of its main input, and the input's window coder.
    pub input: (String, WindowCoderKind),
    /// Per output, in the order of the operator's outputs: the data sink transform, and the
    /// coder of what it sends.
    pub outputs: Vec<(String, WindowedValueCoder<Vec<u8>>)>,
    /// The side inputs.
    pub sides: Vec<StageSide>,
    /// How many bytes of input make a bundle at most.
    pub bundle_bytes: usize,
    /// How long a bundle may take.
    pub timeout: Duration,
    /// Which harness the next bundle goes to.
    pub next: AtomicUsize,
    /// The job's harness metrics, which each bundle's add to.
    pub metrics: Arc<crate::metrics::JobMetrics>,
}

/// What a bundle gave: the bytes per data sink, and the input of a further bundle (a splittable
/// DoFn's residuals), if any.
type Ran = (HashMap<String, Vec<u8>>, Option<Vec<u8>>);

/// One instance of a stage's operator.
pub struct StageFn {
    rt: Arc<StageRuntime>,
    /// The bundle being gathered, in the input's wire coder.
    input: Vec<u8>,
    /// Its side inputs, for the windows of its elements so far.
    sides: SideInputs,
    /// The main windows whose side inputs are in `sides`.
    windows: HashSet<Window>,
    /// The elements gathered.
    elements: u64,
}

impl StageFn {
    /// A fresh instance.
    pub fn new(rt: Arc<StageRuntime>) -> Self {
        StageFn { rt, input: Vec::new(), sides: SideInputs::default(), windows: HashSet::new(), elements: 0 }
    }

    /// Reads the side inputs of elements in `window`, once per bundle.
    fn gather_sides(&mut self, window: &Window, reader: &dyn SideInputReader) -> UserResult {
        if self.rt.sides.is_empty() || !self.windows.insert(*window) {
            return Ok(());
        }
        for s in &self.rt.sides {
            let value = reader.get(&s.view_id, window)?;
            let view = value.downcast_ref::<SideView>().ok_or("internal error: a side input of another kind")?;
            let mut side_window = Vec::new();
            s.window_fn.side_input_window(window)?.encode(&mut side_window);
            let key = (s.transform.clone(), s.local.clone(), side_window);
            self.sides.iterables.insert(key.clone(), view.elements.clone());
            self.sides.multimaps.insert(key, view.by_key.clone());
        }
        Ok(())
    }

    /// Runs the gathered bundle on a harness and appends its output to `outputs`.
    fn flush(&mut self, outputs: &mut [Batch]) -> UserResult {
        if self.input.is_empty() {
            return Ok(());
        }
        let input = std::mem::take(&mut self.input);
        let plane = &self.rt.metrics.data_plane;
        DataPlane::count(&plane.elements_out, std::mem::take(&mut self.elements));
        let sides = std::mem::take(&mut self.sides);
        self.windows.clear();
        let mut input = Some(input);
        while let Some(bundle) = input.take() {
            let (got, residuals) = self.run(bundle, sides.clone())?;
            self.emit(&got, outputs)?;
            input = residuals;
        }
        Ok(())
    }

    /// Appends what a bundle's data sinks sent to `outputs`.
    fn emit(&self, got: &HashMap<String, Vec<u8>>, outputs: &mut [Batch]) -> UserResult {
        for (k, (sink, coder)) in self.rt.outputs.iter().enumerate() {
            let Some(mut bytes) = got.get(sink).map(Vec::as_slice) else { continue };
            let out = outputs.get_mut(k).and_then(rows_mut::<Vec<u8>>).ok_or("internal error: no output buffer")?;
            let plane = &self.rt.metrics.data_plane;
            DataPlane::count(&plane.bytes_in, bytes.len() as u64);
            while !bytes.is_empty() {
                DataPlane::count(&plane.elements_in, 1);
                let wv = coder.decode(&mut bytes).map_err(|e| format!("the harness sent {sink} bad data: {e}"))?;
                let FullWindowedValue { value, timestamp, windows, pane } = wv;
                // One copy per window after the first (a value in one window is moved).
                if let Some((last, rest)) = windows.split_last() {
                    for &window in rest {
                        out.push(WindowedValue { value: value.clone(), timestamp, window, pane });
                    }
                    out.push(WindowedValue { value, timestamp, window: *last, pane });
                }
            }
        }
        Ok(())
    }

    /// Sends one bundle to a harness: the next one in turn, or, if a harness is gone, the one
    /// after it, until every harness has been tried. Its metrics count, and it is finalized if
    /// it asks to be, once its output is in hand.
    fn run(&self, input: Vec<u8>, sides: SideInputs) -> Result<Ran, UserError> {
        let rt = &self.rt;
        let sinks: Vec<String> = rt.outputs.iter().map(|(s, _)| s.clone()).collect();
        let first = rt.next.fetch_add(1, Ordering::Relaxed);
        let mut last = None;
        let bytes = input.len();
        let mut input = Some(input);
        let attempts = rt.workers.len();
        for attempt in 0..attempts {
            let worker = &rt.workers[(first + attempt) % attempts];
            // Only an attempt that may be followed by another needs its own copy of the input.
            let data = if attempt + 1 == attempts { input.take() } else { input.clone() }.unwrap_or_default();
            let bundle = (vec![(rt.input.0.clone(), data)], sides.clone());
            let began = std::time::Instant::now();
            let ran = rt.server.process_bundle(worker, &rt.descriptor, bundle, &sinks, rt.timeout);
            let plane = &rt.metrics.data_plane;
            DataPlane::count(&plane.bundle_nanos, began.elapsed().as_nanos() as u64);
            DataPlane::count(&plane.bundles, 1);
            DataPlane::count(&plane.bytes_out, bytes as u64);
            tracing::debug!(stage = %rt.descriptor.id, worker, bytes, took = ?began.elapsed(), "bundle");
            match ran {
                Ok(done) => {
                    let residuals = self.residuals(&done.response)?;
                    rt.metrics.add(&done.response.monitoring_infos);
                    if done.response.requires_finalization {
                        // Beam's finalization is best effort: a callback that fails is
                        // reported, and the output stands.
                        if let Err(e) = rt.server.finalize_bundle(worker, &done.instruction, rt.timeout) {
                            tracing::warn!("finalizing a bundle of stage {} failed: {e}", rt.descriptor.id);
                        }
                    }
                    return Ok((done.outputs, residuals));
                }
                // The user's code failed: retrying elsewhere would fail alike.
                Err(e @ FnError::Bundle { .. }) => return Err(e.to_string().into()),
                Err(e) => {
                    tracing::warn!("bundle of stage {} failed, retrying on another harness: {e}", rt.descriptor.id);
                    last = Some(e);
                }
            }
        }
        Err(last.map_or_else(|| "no SDK harness to run the stage".to_string(), |e| e.to_string()).into())
    }
}

impl StageFn {
    /// The unprocessed rest a splittable DoFn handed back (its input's windowed values, in the
    /// wire coder, which the descriptor gives the input), after the delay it asked for: the
    /// input of a further bundle.
    fn residuals(&self, response: &fapi::ProcessBundleResponse) -> Result<Option<Vec<u8>>, UserError> {
        if response.residual_roots.is_empty() {
            return Ok(None);
        }
        let source = self.rt.descriptor.transforms.get(&self.rt.input.0);
        let input_pc = source.and_then(|t| t.outputs.values().next()).ok_or("internal error: no data source")?;
        let mut input = Vec::new();
        let mut delay = Duration::ZERO;
        for r in &response.residual_roots {
            let a = r.application.as_ref().ok_or("a residual without its application")?;
            let reads = self.rt.descriptor.transforms.get(&a.transform_id).and_then(|t| t.inputs.get(&a.input_id));
            if reads != Some(input_pc) {
                return Err(format!(
                    "a residual for input '{}' of transform '{}', which does not read the stage's input",
                    a.input_id, a.transform_id
                )
                .into());
            }
            input.extend_from_slice(&a.element);
            if let Some(d) = r.requested_time_delay {
                let d = Duration::from_secs(d.seconds.max(0) as u64) + Duration::from_nanos(d.nanos.max(0) as u64);
                delay = delay.max(d);
            }
        }
        std::thread::sleep(delay);
        Ok(Some(input))
    }
}

impl ErasedDoFn for StageFn {
    fn setup(&mut self) -> UserResult {
        Ok(())
    }
    fn start_bundle(&mut self) -> UserResult {
        Ok(())
    }
    fn process_batch(&mut self, input: Batch, outputs: &mut [Batch], sides: &dyn SideInputReader) -> UserResult {
        let rows = weir_sdk::kernel::downcast_batch::<Vec<u8>>(input)?;
        for wv in rows {
            self.gather_sides(&wv.window, sides)?;
            // Beam's windowed value, as `port_coder` writes it, without a window list per element.
            let fits = matches!(
                (self.rt.input.1, &wv.window),
                (WindowCoderKind::Global, Window::Global) | (WindowCoderKind::Interval, Window::Interval(_))
            );
            if !fits {
                return Err(format!(
                    "window {} does not fit the stage's window coder {:?}",
                    wv.window, self.rt.input.1
                )
                .into());
            }
            weir_sdk::coders::write_timestamp(wv.timestamp, &mut self.input);
            self.input.extend_from_slice(&1i32.to_be_bytes());
            wv.window.encode(&mut self.input);
            wv.pane.encode(&mut self.input);
            self.input.extend_from_slice(&wv.value);
            self.elements += 1;
            if self.input.len() >= self.rt.bundle_bytes {
                self.flush(outputs)?;
            }
        }
        Ok(())
    }
    fn process_keyed(
        &mut self,
        input: Batch,
        outputs: &mut [Batch],
        sides: &dyn SideInputReader,
        _env: &mut dyn KeyedStateEnv,
    ) -> UserResult {
        self.process_batch(input, outputs, sides)
    }
    fn on_timer(
        &mut self,
        _key: &[u8],
        _window: Window,
        _firing: Option<&weir_sdk::state::TimerFiring>,
        _outputs: &mut [Batch],
        _state: &mut weir_sdk::state::KeyedState,
        _time: weir_sdk::state::StateTime,
    ) -> UserResult {
        Err("a portable stage has no timers".into())
    }
    fn finish_bundle(&mut self, outputs: &mut [Batch]) -> UserResult {
        self.flush(outputs)
    }
    fn teardown(&mut self) -> UserResult {
        Ok(())
    }
}
