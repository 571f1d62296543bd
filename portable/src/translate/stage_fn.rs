//! A fused stage as one operator of Weir's plan: an erased DoFn that gathers a bundle of its
//! input's elements in the stage's wire coder, sends it to an SDK harness, and emits what the
//! harness hands back, with the timestamps, windows and panes the harness gave them.
//!
//! Values cross Weir as the bytes of their wire encoding (see [`crate::preprocess::descriptor`]): Weir never
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

use crate::preprocess::wire::Wire;
use crate::proto::fn_execution::v1 as fapi;
use crate::worker::metrics::DataPlane;
use crate::worker::user_state::{release_sorted, Cells, Keyed, Residual, StageState, RESIDUAL_FAMILY, SORTED_FAMILY};
use crate::worker::{BundleOutput, FnServer, Port, SideInputs, Started, UserState};
use crate::Error;
use weir_sdk::state::TimeDomain;
use weir_sdk::state::{KeyedState, StateCell};

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
    pub by_key: Arc<crate::worker::ByKey>,
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
    pub metrics: Arc<crate::worker::metrics::JobMetrics>,
    /// A stateful stage's state and timers.
    pub state: Option<StageState>,
    /// A splittable DoFn's stage as a drain runs it: its restrictions truncated first.
    pub drain: Option<fapi::ProcessBundleDescriptor>,
}

impl StageRuntime {
    /// The ports whose output a bundle awaits: the data sinks, then the timer families.
    fn awaited(&self) -> Vec<Port> {
        let sinks = self.outputs.iter().map(|(s, _)| Port::Data(s.clone()));
        sinks.chain(self.state.iter().flat_map(StageState::ports)).collect()
    }

    /// A bundle's input: `data` to the main input, and to each timer family its timers in
    /// `timers` (or nothing); a timer of a family the stage does not declare is an error.
    fn input(&self, data: Vec<u8>, mut timers: BTreeMap<&str, Vec<u8>>) -> Result<Vec<(Port, Vec<u8>)>, UserError> {
        let mut input = vec![(Port::Data(self.input.0.clone()), data)];
        for port in self.state.iter().flat_map(StageState::ports) {
            let bytes = match &port {
                Port::Timers(_, f) => timers.remove(f.as_str()).unwrap_or_default(),
                Port::Data(_) => Vec::new(),
            };
            input.push((port, bytes));
        }
        match timers.keys().next() {
            Some(family) => Err(format!("a timer of family '{family}', which the stage does not declare").into()),
            None => Ok(input),
        }
    }
}

/// What a bundle gave, and the rests of a splittable DoFn's restrictions it handed back.
type Ran = (BundleOutput, Vec<Residual>);

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
    /// Whether the job is being drained (bundles then run as the drain descriptor says).
    draining: bool,
    /// A stateful stage's harness: every bundle of this instance goes there (its cached state
    /// stays valid), until it fails and another takes over.
    home: usize,
    /// The harness may cache this instance's user state under this token; a new one after the
    /// state changed behind the harness's back (a failed bundle undone).
    cache_token: Vec<u8>,
    /// Bundles that asked to be finalized, until their output is committed: the harness, the
    /// bundle's instruction, and the epoch it belongs to once sealed.
    unfinalized: Vec<(String, String, Option<u64>)>,
    /// A stage without state: its bundles running, oldest first.
    in_flight: std::collections::VecDeque<InFlight>,
}

/// Instances made so far, for unique cache tokens.
static INSTANCES: AtomicUsize = AtomicUsize::new(0);

/// A cache token no instance of any job of this process has had.
fn fresh_token() -> Vec<u8> {
    format!("weir-{}-{}", std::process::id(), INSTANCES.fetch_add(1, Ordering::Relaxed)).into_bytes()
}

impl StageFn {
    /// A fresh instance.
    pub fn new(rt: Arc<StageRuntime>) -> Self {
        StageFn {
            input: Vec::new(),
            sides: SideInputs::default(),
            windows: HashSet::new(),
            elements: 0,
            draining: false,
            home: rt.next.fetch_add(1, Ordering::Relaxed),
            cache_token: fresh_token(),
            unfinalized: Vec::new(),
            in_flight: std::collections::VecDeque::new(),
            rt,
        }
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
            crate::worker::state_key_window(&s.window_fn.side_input_window(window)?, &mut side_window);
            let key = (s.transform.clone(), s.local.clone(), side_window);
            self.sides.iterables.insert(key.clone(), view.elements.clone());
            self.sides.multimaps.insert(key, view.by_key.clone());
        }
        Ok(())
    }

    /// Runs the gathered bundle on a harness, with the state of `keyed` if the stage is
    /// stateful, and appends its output to `outputs`; a splittable DoFn's residuals are handed
    /// back (the stage defers them). A stage without state does not wait for it: it runs while
    /// the next is gathered, and its output comes when more than [`IN_FLIGHT`] are running or
    /// at the end of the operator's bundle.
    fn flush(&mut self, outputs: &mut [Batch], keyed: Option<&mut Keyed<'_>>) -> Result<Vec<Residual>, UserError> {
        if self.input.is_empty() {
            return Ok(Vec::new());
        }
        let input = std::mem::take(&mut self.input);
        let plane = &self.rt.metrics.data_plane;
        DataPlane::count(&plane.elements_out, std::mem::take(&mut self.elements));
        let sides = std::mem::take(&mut self.sides);
        self.windows.clear();
        let bundle = self.rt.input(input, BTreeMap::new())?;
        if self.rt.state.is_none() {
            let first = self.rt.next.fetch_add(1, Ordering::Relaxed);
            let sent = self.send(bundle, sides, first, 0)?;
            self.in_flight.push_back(sent);
            while self.in_flight.len() > IN_FLIGHT {
                self.finish_oldest(outputs)?;
            }
            return Ok(Vec::new());
        }
        let (got, residuals) = self.run(bundle, sides, keyed)?;
        self.emit(&got.outputs, outputs)?;
        self.deferrable(residuals)
    }

    /// Finishes the oldest bundle running without state, appending its output to `outputs`.
    fn finish_oldest(&mut self, outputs: &mut [Batch]) -> UserResult {
        let Some(sent) = self.in_flight.pop_front() else { return Ok(()) };
        let (got, residuals) = self.finish(sent, None)?;
        self.deferrable(residuals)?;
        self.emit(&got.outputs, outputs)
    }

    /// `residuals`, if the stage defers them (a splittable DoFn's stage); any other stage has
    /// nowhere to keep them, and fails rather than lose them.
    fn deferrable(&self, residuals: Vec<Residual>) -> Result<Vec<Residual>, UserError> {
        if residuals.is_empty() || self.rt.state.as_ref().is_some_and(|s| s.defers) {
            return Ok(residuals);
        }
        Err(format!(
            "stage {}: the harness handed back the rest of a bundle's work (a residual), which only a \
             splittable DoFn's stage can defer",
            self.rt.descriptor.id
        )
        .into())
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

    /// Runs one bundle on a harness: the next one in turn, or, if a harness is gone, the one
    /// after it, until every harness has been tried (the state a failed attempt touched is
    /// restored first). Its metrics count, the timers it set are kept, and it is finalized if
    /// it asks to be, once its output is in hand.
    fn run(
        &mut self,
        input: Vec<(Port, Vec<u8>)>,
        sides: SideInputs,
        keyed: Option<&mut Keyed<'_>>,
    ) -> Result<Ran, UserError> {
        // A stateful stage's bundles go to its harness, which may cache the state they read.
        let stateful = keyed.as_ref().is_some_and(|k| !k.stage.defers);
        let first = if stateful { self.home } else { self.rt.next.fetch_add(1, Ordering::Relaxed) };
        let sent = self.send(input, sides, first, 0)?;
        self.finish(sent, keyed)
    }

    /// Sends a bundle to harness `first + attempt` (of the stage's, in turn), or, if it is
    /// gone, to the next, until every harness has been tried.
    fn send(
        &mut self,
        mut input: Vec<(Port, Vec<u8>)>,
        sides: SideInputs,
        first: usize,
        attempt: usize,
    ) -> Result<InFlight, UserError> {
        let rt = self.rt.clone();
        let attempts = rt.workers.len();
        let bytes: usize = input.iter().map(|(_, b)| b.len()).sum();
        let stateful = rt.state.as_ref().is_some_and(|s| !s.defers);
        // Once the job drains, a splittable DoFn's restrictions are truncated first.
        let descriptor = match (&rt.drain, self.draining) {
            (Some(d), true) => d,
            _ => &rt.descriptor,
        };
        let mut last = None;
        for attempt in attempt..attempts {
            let at = (first + attempt) % attempts;
            // Only an attempt that may be followed by another sends a copy of the input.
            let last_try = attempt + 1 == attempts;
            let data = if last_try { std::mem::take(&mut input) } else { input.clone() };
            let cache_token = stateful.then(|| self.cache_token.clone());
            let began = std::time::Instant::now();
            let awaited = rt.awaited();
            match rt.server.begin_bundle(
                &rt.workers[at],
                descriptor,
                (data, sides.clone()),
                &awaited,
                cache_token,
                rt.timeout,
            ) {
                Ok(started) => {
                    let retry = (!last_try).then_some(input);
                    return Ok(InFlight { started, retry, sides, first, attempt, bytes, began });
                }
                Err(e) => {
                    tracing::warn!("bundle of stage {} not sent, trying another harness: {e}", rt.descriptor.id);
                    last = Some(e);
                }
            }
        }
        Err(last.map_or_else(|| "no SDK harness to run the stage".to_string(), |e| e.to_string()).into())
    }

    /// Waits for bundle `sent` to end, with the state of `keyed` at hand for its requests;
    /// if its harness is lost, it runs again on the next.
    fn finish(&mut self, mut sent: InFlight, mut keyed: Option<&mut Keyed<'_>>) -> Result<Ran, UserError> {
        let rt = self.rt.clone();
        loop {
            let InFlight { started, retry, sides, first, attempt, bytes, began } = sent;
            let worker = started.worker().to_string();
            let user_state = keyed.as_deref_mut().map(|k| k as &mut dyn UserState);
            let ran = rt.server.end_bundle(started, user_state, rt.timeout);
            let plane = &rt.metrics.data_plane;
            DataPlane::count(&plane.bundle_nanos, began.elapsed().as_nanos() as u64);
            DataPlane::count(&plane.bundles, 1);
            DataPlane::count(&plane.bytes_out, bytes as u64);
            tracing::debug!(stage = %rt.descriptor.id, worker, bytes, took = ?began.elapsed(), "bundle");
            let e = match ran {
                Ok(done) => {
                    DataPlane::count(&plane.state_requests, done.state_requests);
                    self.home = (first + attempt) % rt.workers.len();
                    if let Some(k) = keyed.as_deref_mut() {
                        k.set_timers(&done.timers).map_err(|e| format!("stage {}: {e}", rt.descriptor.id))?;
                        k.commit();
                    }
                    let residuals = self.residuals(&done.response)?;
                    rt.metrics.add(&done.response.monitoring_infos);
                    if done.response.requires_finalization {
                        // Finalized once the runner has committed the bundle's output.
                        self.unfinalized.push((worker, done.instruction.clone(), None));
                    }
                    return Ok((done, residuals));
                }
                // The user's code failed: retrying elsewhere would fail alike.
                Err(e @ Error::Bundle { .. }) => return Err(e.to_string().into()),
                Err(e) => e,
            };
            if let Some(k) = keyed.as_deref_mut() {
                // Undone behind the harnesses' backs: what they cached is stale.
                k.rollback();
                self.cache_token = fresh_token();
            }
            let Some(input) = retry else { return Err(e.to_string().into()) };
            tracing::warn!("bundle of stage {} failed, retrying on another harness: {e}", rt.descriptor.id);
            sent = self.send(input, sides, first, attempt + 1)?;
        }
    }
}

/// How many bundles of a stage without state one instance keeps running while it gathers the
/// next: the harness works on one while Weir encodes and sends another.
const IN_FLIGHT: usize = 2;

/// A bundle sent to a harness and not yet finished.
struct InFlight {
    started: Started,
    /// Its input again, while another harness is left to try it on.
    retry: Option<Vec<(Port, Vec<u8>)>>,
    sides: SideInputs,
    /// The harness tried first, and how many after it this one is.
    first: usize,
    attempt: usize,
    bytes: usize,
    began: std::time::Instant,
}

impl StageFn {
    /// The unprocessed rests a splittable DoFn handed back: their input's windowed values, in
    /// the wire coder the descriptor gives the input, with the delays they asked for and
    /// their watermark estimates.
    fn residuals(&self, response: &fapi::ProcessBundleResponse) -> Result<Vec<Residual>, UserError> {
        if response.residual_roots.is_empty() {
            return Ok(Vec::new());
        }
        let source = self.rt.descriptor.transforms.get(&self.rt.input.0);
        let input_pc = source.and_then(|t| t.outputs.values().next()).ok_or("internal error: no data source")?;
        let mut out = Vec::with_capacity(response.residual_roots.len());
        for r in &response.residual_roots {
            let a = r.application.as_ref().ok_or("a residual without its application")?;
            let reads = self.rt.descriptor.transforms.get(&a.transform_id).and_then(|t| t.inputs.get(&a.input_id));
            // Drained, the process transform reads the truncated restrictions (in the same coder).
            let truncated = self.draining && self.rt.state.as_ref().is_some_and(|s| s.transform == a.transform_id);
            if reads != Some(input_pc) && !truncated {
                return Err(format!(
                    "a residual for input '{}' of transform '{}', which does not read the stage's input",
                    a.input_id, a.transform_id
                )
                .into());
            }
            let millis =
                |seconds: i64, nanos: i32| seconds.saturating_mul(1000).saturating_add(i64::from(nanos) / 1_000_000);
            let delay_ms = r.requested_time_delay.map_or(0, |d| millis(d.seconds, d.nanos).max(0));
            let estimate = a.output_watermarks.values().map(|t| millis(t.seconds, t.nanos)).min();
            let timestamp = weir_sdk::coders::read_timestamp(&mut &a.element[..])
                .map_err(|e| format!("a residual whose element does not decode: {e}"))?;
            out.push(Residual { element: a.element.clone(), delay_ms, hold: estimate.unwrap_or(timestamp) });
        }
        Ok(out)
    }
}

impl StageFn {
    /// Finalizes `bundles` (their output is committed): each harness runs the callbacks its
    /// DoFns registered. Beam's finalization is best effort: a callback that fails is
    /// reported, and the output stands.
    fn finalize(&self, bundles: Vec<(String, String, Option<u64>)>) {
        for (worker, instruction, _) in bundles {
            if let Err(e) = self.rt.server.finalize_bundle(&worker, &instruction, self.rt.timeout) {
                tracing::warn!("finalizing a bundle of stage {} failed: {e}", self.rt.descriptor.id);
            }
        }
    }

    /// Runs every residual waiting in `state` (and what they hand back in turn), appending the
    /// output to `outputs`. Windows expire with residuals waiting only when the job drains
    /// (until then they hold their windows open), so they run at once, truncated.
    fn drain_residuals(
        &mut self,
        window: &Window,
        state: &mut KeyedState,
        outputs: &mut [Batch],
        sides: &dyn SideInputReader,
    ) -> UserResult {
        let mut waiting = std::collections::VecDeque::new();
        let ids: Vec<String> = state.cells.keys().filter(|k| k.starts_with(RESIDUAL_FAMILY)).cloned().collect();
        for id in ids {
            state.timers.remove(&(RESIDUAL_FAMILY.to_string(), id.clone()));
            if let Some(StateCell::Value(element)) = state.cells.remove(&id) {
                waiting.push_back(element);
            }
        }
        while let Some(element) = waiting.pop_front() {
            let input = self.rt.input(element, BTreeMap::new())?;
            let sides = self.sides_of(window, sides)?;
            let (got, residuals) = self.run(input, sides, None)?;
            self.emit(&got.outputs, outputs)?;
            waiting.extend(residuals.into_iter().map(|r| r.element));
        }
        Ok(())
    }

    /// The side inputs of one bundle of `window` alone (a timer's or a residual's), read from
    /// `reader`; the bundle being gathered keeps its own.
    fn sides_of(&mut self, window: &Window, reader: &dyn SideInputReader) -> Result<SideInputs, UserError> {
        self.sides_of_all(std::iter::once(window), reader)
    }

    /// The side inputs of one bundle of `windows` (timers fired together), read from `reader`;
    /// the bundle being gathered keeps its own.
    fn sides_of_all<'w>(
        &mut self,
        mut windows: impl Iterator<Item = &'w Window>,
        reader: &dyn SideInputReader,
    ) -> Result<SideInputs, UserError> {
        let (gathered, seen) = (std::mem::take(&mut self.sides), std::mem::take(&mut self.windows));
        let read = windows.try_for_each(|w| self.gather_sides(w, reader));
        let sides = std::mem::replace(&mut self.sides, gathered);
        self.windows = seen;
        read?;
        Ok(sides)
    }

    /// Adds one element to the bundle being gathered; whether the bundle is full.
    fn gather(&mut self, wv: WindowedValue<Vec<u8>>, sides: &dyn SideInputReader) -> Result<bool, UserError> {
        self.gather_sides(&wv.window, sides)?;
        // Beam's windowed value, as `port_coder` writes it, without a window list per element.
        if !self.rt.input.1.fits(&wv.window) {
            return Err(
                format!("window {} does not fit the stage's window coder {:?}", wv.window, self.rt.input.1).into()
            );
        }
        encode_element(&wv, &mut self.input);
        self.elements += 1;
        Ok(self.input.len() >= self.rt.bundle_bytes)
    }
}

/// Appends `wv` as a bundle's input carries it: Beam's windowed value, as the stage's port
/// coder writes it, with its one window.
fn encode_element(wv: &WindowedValue<Vec<u8>>, out: &mut Vec<u8>) {
    weir_sdk::coders::write_timestamp(wv.timestamp, out);
    out.extend_from_slice(&1i32.to_be_bytes());
    wv.window.encode(out);
    wv.pane.encode(out);
    out.extend_from_slice(&wv.value);
}

impl ErasedDoFn for StageFn {
    fn setup(&mut self) -> UserResult {
        Ok(())
    }
    fn start_bundle(&mut self) -> UserResult {
        Ok(())
    }
    fn process_batch(&mut self, input: Batch, outputs: &mut [Batch], sides: &dyn SideInputReader) -> UserResult {
        for wv in weir_sdk::kernel::downcast_batch::<Vec<u8>>(input)? {
            if self.gather(wv, sides)? {
                self.flush(outputs, None)?;
            }
        }
        Ok(())
    }
    /// A stateful stage: its bundles run while the operator's state is at hand, to answer the
    /// harness's state requests and keep the timers it sets.
    fn process_keyed(
        &mut self,
        input: Batch,
        outputs: &mut [Batch],
        sides: &dyn SideInputReader,
        env: &mut dyn KeyedStateEnv,
    ) -> UserResult {
        let rt = self.rt.clone();
        let Some(stage) = rt.state.as_ref() else { return self.process_batch(input, outputs, sides) };
        let mut keyed = Keyed::new(stage, Cells::Env(env));
        for wv in weir_sdk::kernel::downcast_batch::<Vec<u8>>(input)? {
            if stage.defers {
                self.draining |= keyed.draining(&wv.value, &wv.window)?;
                // One restriction per bundle: its residuals wait in its own state.
                let (key, window) = (wv.value.clone(), wv.window);
                keyed.holds(&window);
                self.gather(wv, sides)?;
                let residuals = self.flush(outputs, Some(&mut keyed))?;
                keyed.defer(&key, &window, residuals)?;
                keyed.commit();
            } else if let Some(lateness) = stage.sorted {
                // Time-sorted input waits in its key's state for the watermark (see
                // `StageState::sorted`); elements already too late are dropped, as in Beam.
                let key = stage.key_of(&wv.value)?;
                let mut element = Vec::with_capacity(wv.value.len() + 32);
                encode_element(&wv, &mut element);
                keyed.expires(&wv.value, &wv.window)?;
                if !keyed.sort(key, &wv.window, wv.timestamp, lateness, element)? {
                    tracing::debug!("stage {}: a time-sorted element later than allowed dropped", rt.descriptor.id);
                }
            } else {
                keyed.expires(&wv.value, &wv.window)?;
                keyed.holds(&wv.window);
                if self.gather(wv, sides)? {
                    self.flush(outputs, Some(&mut keyed))?;
                }
            }
        }
        self.flush(outputs, Some(&mut keyed)).map(drop)
    }
    /// A timer firing: a bundle of the one timer, in its family, with the state of its key and
    /// window; or a deferred residual due, run as the bundle's input. A window's expiry has
    /// nothing to run: the harness keeps no callback for it.
    fn on_timer(
        &mut self,
        key: &[u8],
        window: Window,
        firing: Option<&weir_sdk::state::TimerFiring>,
        outputs: &mut [Batch],
        state: &mut weir_sdk::state::KeyedState,
        time: weir_sdk::state::StateTime,
        sides: &dyn SideInputReader,
    ) -> UserResult {
        let rt = self.rt.clone();
        self.draining |= time.draining;
        let Some(stage) = rt.state.as_ref() else { return Ok(()) };
        let Some(firing) = firing else {
            // The input is done with the window (at the latest, the end of a bounded input):
            // residuals still waiting run now, after their delays, rather than be lost; a DoFn
            // with a window expiration callback gets it as a timer of its family.
            let Some(family) = stage.expiration.clone() else {
                return self.drain_residuals(&window, state, outputs, sides);
            };
            let end = window.max_timestamp();
            let expiry = weir_sdk::state::TimerFiring {
                family,
                id: String::new(),
                domain: TimeDomain::EventTime,
                fire_timestamp: end,
                output_timestamp: Some(end),
            };
            return self.on_timer(key, window, Some(&expiry), outputs, state, time, sides);
        };
        if firing.family == SORTED_FAMILY {
            let released = release_sorted(state, time.input_watermark, stage.sorted.unwrap_or(0));
            if released.is_empty() {
                return Ok(());
            }
            let input = rt.input(released.concat(), BTreeMap::new())?;
            let bundle_sides = self.sides_of(&window, sides)?;
            let mut keyed = Keyed::new(stage, Cells::One { key, window, state, time });
            let (got, _) = self.run(input, bundle_sides, Some(&mut keyed))?;
            keyed.commit();
            return self.emit(&got.outputs, outputs);
        }
        let input = if firing.family == RESIDUAL_FAMILY {
            match state.cells.remove(&firing.id) {
                Some(StateCell::Value(element)) => rt.input(element, BTreeMap::new())?,
                _ => return Err(format!("a residual '{}' that is not in its state", firing.id).into()),
            }
        } else {
            let mut timer = Vec::new();
            stage.codec.encode_firing(key, &window, firing, &mut timer);
            rt.input(Vec::new(), BTreeMap::from([(firing.family.as_str(), timer)]))?
        };
        let bundle_sides = self.sides_of(&window, sides)?;
        let mut keyed = Keyed::new(stage, Cells::One { key, window, state, time });
        let (got, residuals) = self.run(input, bundle_sides, Some(&mut keyed))?;
        if !stage.defers && !residuals.is_empty() {
            return Err("a timer callback handed back a residual, which Weir cannot run".into());
        }
        keyed.defer(key, &window, residuals)?;
        keyed.commit();
        self.emit(&got.outputs, outputs)
    }
    /// A stateful stage's due timers go to the harness together, in one bundle (a splittable
    /// DoFn's residuals run one a bundle, their own state at hand).
    fn fires_timers_together(&self) -> bool {
        self.rt.state.as_ref().is_some_and(|s| !s.defers && s.sorted.is_none())
    }
    fn on_timers(
        &mut self,
        firings: Vec<(Vec<u8>, Window, weir_sdk::state::TimerFiring)>,
        outputs: &mut [Batch],
        env: &mut dyn KeyedStateEnv,
        sides: &dyn SideInputReader,
    ) -> UserResult {
        let rt = self.rt.clone();
        let Some(stage) = rt.state.as_ref() else { return Ok(()) };
        if firings.is_empty() {
            return Ok(());
        }
        let bundle_sides = self.sides_of_all(firings.iter().map(|(_, w, _)| w), sides)?;
        let mut by_family: BTreeMap<&str, Vec<u8>> = BTreeMap::new();
        for (key, window, firing) in &firings {
            stage.codec.encode_firing(key, window, firing, by_family.entry(&firing.family).or_default());
        }
        let input = rt.input(Vec::new(), by_family)?;
        let mut keyed = Keyed::new(stage, Cells::Env(env));
        firings.iter().for_each(|(_, w, _)| keyed.holds(w));
        let (got, residuals) = self.run(input, bundle_sides, Some(&mut keyed))?;
        if !residuals.is_empty() {
            return Err("a timer callback handed back a residual, which Weir cannot run".into());
        }
        self.emit(&got.outputs, outputs)
    }
    fn on_committed(&mut self) {
        let done = std::mem::take(&mut self.unfinalized);
        self.finalize(done);
    }
    fn seal(&mut self, epoch: u64) {
        for (_, _, sealed) in &mut self.unfinalized {
            sealed.get_or_insert(epoch);
        }
    }
    fn on_committed_through(&mut self, epoch: u64) {
        let (done, waiting) =
            std::mem::take(&mut self.unfinalized).into_iter().partition(|b| b.2.is_some_and(|e| e < epoch));
        self.unfinalized = waiting;
        self.finalize(done);
    }
    fn finish_bundle(&mut self, outputs: &mut [Batch]) -> UserResult {
        self.flush(outputs, None)?;
        while !self.in_flight.is_empty() {
            self.finish_oldest(outputs)?;
        }
        Ok(())
    }
    fn teardown(&mut self) -> UserResult {
        Ok(())
    }
}
