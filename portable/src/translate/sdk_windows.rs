//! What only the SDK knows of windows, asked of a harness as Beam's portable protocol defines:
//!
//! - **Merging** (`beam:transform:merge_windows:v1`): a window function of the user's own whose
//!   windows merge (Beam Java's `WindowFn.mergeWindows`). Weir groups on the windows, and a
//!   bundle whose one element is `KV<nonce, Iterable<window>>` (one key's active windows) comes
//!   back as `KV<nonce, KV<Iterable<window>, Iterable<KV<window, Iterable<window>>>>>` (the
//!   windows left as they are, and each merge result with the windows it took in).
//! - **Side input windows** (`beam:transform:map_windows:v1`): which window of a side input a
//!   main input window reads is the SDK's own code (the side input's `window_mapping_fn`), run
//!   on `KV<nonce, main window>` to give `KV<nonce, side window>`. Weir asks once per main
//!   window and keeps the answer, so the window it reads for a bundle is the one the harness
//!   asks for.
//!
//! The windows must be coded as Beam's global or interval windows, which Weir reads; windows of
//! a coder of the SDK's own are refused when the pipeline is submitted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prost::Message;
use weir_sdk::coders::{read_bytes, read_varint, write_varint, CoderError, WindowCoderKind};
use weir_sdk::pane::PaneInfo;
use weir_sdk::time::Timestamp;
use weir_sdk::urns;
use weir_sdk::window::Window;
use weir_sdk::window_fn::WindowFn;

use crate::preprocess::windowing::SdkMerger;
use crate::preprocess::wire::WireWindowCoder;
use crate::proto::fn_execution::v1 as fapi;
use crate::proto::pipeline::v1 as rapi;
use crate::worker::FnServer;
use crate::Error;

const SOURCE: &str = "weir_sdk_windows_source";
const SINK: &str = "weir_sdk_windows_sink";

/// One transform of the SDK's own that a harness runs on `KV<nonce, value>`, giving
/// `KV<nonce, value>` back, on the harnesses of an environment.
struct HarnessCall {
    server: Arc<FnServer>,
    workers: Vec<String>,
    descriptor: fapi::ProcessBundleDescriptor,
    timeout: Duration,
    next: AtomicUsize,
    nonce: AtomicU64,
}

impl HarnessCall {
    /// Bundles of `descriptor` on `workers`, served by `h`.
    fn new(h: &super::Harnessed, workers: Vec<String>, descriptor: fapi::ProcessBundleDescriptor) -> Self {
        HarnessCall {
            server: h.server.clone(),
            workers,
            descriptor,
            timeout: h.timeout,
            next: AtomicUsize::new(0),
            nonce: AtomicU64::new(0),
        }
    }

    /// `value` (the encoded value of the input KV) through the transform: the encoded value
    /// of the output KV.
    fn call(&self, value: &[u8]) -> Result<Vec<u8>, String> {
        let nonce = self.nonce.fetch_add(1, Ordering::Relaxed).to_be_bytes();
        let mut input = Vec::new();
        // Beam's windowed value in the global window, of KV<bytes, value>.
        weir_sdk::coders::write_timestamp(weir_sdk::time::MIN_TIMESTAMP, &mut input);
        input.extend_from_slice(&1i32.to_be_bytes());
        PaneInfo::NO_FIRING.encode(&mut input);
        write_varint(nonce.len() as u64, &mut input);
        input.extend_from_slice(&nonce);
        input.extend_from_slice(value);
        let mut last = String::from("no SDK harness to ask");
        for attempt in 0..self.workers.len() {
            let worker = &self.workers[(self.next.fetch_add(1, Ordering::Relaxed) + attempt) % self.workers.len()];
            let bundle = (vec![(SOURCE.to_string(), input.clone())], Default::default());
            match self.server.process_bundle(worker, &self.descriptor, bundle, &[SINK.to_string()], self.timeout) {
                Ok(mut out) => {
                    let bytes = out.outputs.remove(SINK).unwrap_or_default();
                    return answer(&nonce, &bytes).map_err(|e| format!("the harness's answer: {e}"));
                }
                Err(e @ Error::Bundle { .. }) => return Err(e.to_string()),
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
    }
}

/// The output value in `bytes` (one windowed value in the global window, of KV<nonce, value>),
/// checked to answer `nonce`.
fn answer(nonce: &[u8], mut bytes: &[u8]) -> Result<Vec<u8>, CoderError> {
    let input = &mut bytes;
    weir_sdk::coders::read_timestamp(input)?;
    let n = i32::from_be_bytes(read_bytes(input, 4)?.try_into().unwrap_or_default());
    if n != 1 {
        return Err(CoderError::new(format!("an answer in {n} windows, not the global one")));
    }
    PaneInfo::decode(input)?;
    let len = read_varint(input)? as usize;
    if read_bytes(input, len)? != nonce {
        return Err(CoderError::new("an answer to another request"));
    }
    Ok(input.to_vec())
}

/// Merges one window function's windows on the harnesses of its environment.
pub struct HarnessMerger {
    call: HarnessCall,
    window: WindowCoderKind,
}

impl HarnessMerger {
    /// A merger of `window_fn`'s windows (coded by `window`) on `workers`, harnesses of
    /// environment `env` served by `h`; `id` names its descriptor.
    pub fn new(
        h: &super::Harnessed,
        env: (&str, &rapi::Environment),
        workers: Vec<String>,
        window_fn: &rapi::FunctionSpec,
        window: WireWindowCoder,
        id: String,
    ) -> Self {
        let w = window.id.as_str();
        let mut coders = window.coders.clone();
        coders.extend([
            ("weir_windows".to_string(), coder(urns::coders::ITERABLE, &[w])),
            ("weir_merge".to_string(), coder(urns::coders::KV, &[w, "weir_windows"])),
            ("weir_merges".to_string(), coder(urns::coders::ITERABLE, &["weir_merge"])),
            ("weir_merged".to_string(), coder(urns::coders::KV, &["weir_windows", "weir_merges"])),
        ]);
        let spec = rapi::FunctionSpec { urn: urns::MERGE_WINDOWS.into(), payload: window_fn.encode_to_vec() };
        let descriptor = describe(h.server.address(), env, spec, coders, ("weir_windows", "weir_merged"), id);
        let call = HarnessCall::new(h, workers, descriptor);
        HarnessMerger { call, window: window.kind }
    }

    /// The merges in the encoded `KV<Iterable<window>, Iterable<KV<window, Iterable<window>>>>`.
    fn merges(&self, mut bytes: &[u8]) -> Result<Vec<(Vec<Window>, Window)>, CoderError> {
        let input = &mut bytes;
        let window = self.window;
        // The windows left unmerged, then each merge: the result and the windows it took in.
        iterable(input, |i| window.decode(i).map(drop))?;
        let mut merges = Vec::new();
        iterable(input, |i| {
            let merged = window.decode(i)?;
            let mut sources = Vec::new();
            iterable(i, |j| {
                sources.push(window.decode(j)?);
                Ok(())
            })?;
            merges.push((sources, merged));
            Ok(())
        })?;
        if !input.is_empty() {
            return Err(CoderError::new("bytes left after a merge result"));
        }
        Ok(merges)
    }
}

impl SdkMerger for HarnessMerger {
    fn merge(&self, windows: &[Window]) -> Result<Vec<(Vec<Window>, Window)>, String> {
        if windows.len() < 2 {
            return Ok(Vec::new());
        }
        let mut value = (windows.len() as i32).to_be_bytes().to_vec();
        for w in windows {
            w.encode(&mut value);
        }
        let answer = self.call.call(&value)?;
        self.merges(&answer).map_err(|e| format!("the harness's merge result: {e}"))
    }
}

/// A side input's window function, but for which side window a main window reads: that the
/// SDK's mapping says, asked of a harness once per main window.
pub struct MappedBySdk {
    inner: Arc<dyn WindowFn>,
    call: HarnessCall,
    side: WindowCoderKind,
    mapped: Mutex<HashMap<Window, Window>>,
}

impl MappedBySdk {
    /// `inner` (the side input's window function), its side windows (coded by `side`) mapped
    /// from main windows (coded by `main`) by `mapping_fn` on `workers`, harnesses of `env`
    /// served by `h`; `id` names the descriptor.
    pub fn new(
        h: &super::Harnessed,
        (env, workers): ((&str, &rapi::Environment), Vec<String>),
        inner: Arc<dyn WindowFn>,
        mapping_fn: &rapi::FunctionSpec,
        (main, side): (WireWindowCoder, WireWindowCoder),
        id: String,
    ) -> Self {
        let coders = main.coders.iter().chain(&side.coders).cloned().collect();
        let spec = rapi::FunctionSpec { urn: urns::MAP_WINDOWS.into(), payload: mapping_fn.encode_to_vec() };
        let descriptor = describe(h.server.address(), env, spec, coders, (&main.id, &side.id), id);
        let call = HarnessCall::new(h, workers, descriptor);
        MappedBySdk { inner, call, side: side.kind, mapped: Mutex::new(HashMap::new()) }
    }
}

impl std::fmt::Debug for MappedBySdk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}, its side input windows mapped by the SDK", self.inner)
    }
}

impl WindowFn for MappedBySdk {
    fn assign_windows(&self, timestamp: Timestamp, window: &Window, out: &mut Vec<Window>) {
        self.inner.assign_windows(timestamp, window, out)
    }
    fn is_merging(&self) -> bool {
        self.inner.is_merging()
    }
    fn is_compatible(&self, other: &dyn WindowFn) -> bool {
        match other.as_any().downcast_ref::<MappedBySdk>() {
            Some(o) => self.inner.is_compatible(&*o.inner),
            None => self.inner.is_compatible(other),
        }
    }
    fn assigns_to_one_window(&self) -> bool {
        self.inner.assigns_to_one_window()
    }
    fn try_merge_windows(&self, windows: &[Window]) -> Result<Vec<(Vec<Window>, Window)>, String> {
        self.inner.try_merge_windows(windows)
    }
    fn output_time(&self, timestamp: Timestamp, window: &Window) -> Timestamp {
        self.inner.output_time(timestamp, window)
    }
    fn side_input_window(&self, main: &Window) -> Result<Window, String> {
        if let Some(w) = self.mapped.lock().unwrap_or_else(|e| e.into_inner()).get(main) {
            return Ok(*w);
        }
        let mut value = Vec::new();
        main.encode(&mut value);
        let answer = self.call.call(&value)?;
        let side = self.side.decode(&mut &answer[..]).map_err(|e| format!("the harness's side input window: {e}"))?;
        self.mapped.lock().unwrap_or_else(|e| e.into_inner()).insert(*main, side);
        Ok(side)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Reads one of Beam's iterables, each element with `element`: a count, or (-1) chunks each
/// with its count, ending with 0.
fn iterable(
    input: &mut &[u8],
    mut element: impl FnMut(&mut &[u8]) -> Result<(), CoderError>,
) -> Result<(), CoderError> {
    let n = i32::from_be_bytes(read_bytes(input, 4)?.try_into().unwrap_or_default());
    if n >= 0 {
        for _ in 0..n {
            element(input)?;
        }
        return Ok(());
    }
    loop {
        let chunk = read_varint(input)?;
        if chunk == 0 {
            return Ok(());
        }
        for _ in 0..chunk {
            element(input)?;
        }
    }
}

/// A coder of `urn` with `components` ([`crate::preprocess::wire::plain_coder`]).
fn coder(urn: &str, components: &[&str]) -> rapi::Coder {
    crate::preprocess::wire::plain_coder(urn, components.iter().map(|c| c.to_string()).collect())
}

/// The descriptor of a bundle of one transform `spec` of environment `env`: a data source of
/// `KV<bytes, in>`, the transform, a data sink of `KV<bytes, out>`, in the global window;
/// `coders` define `in` and `out` (`values`).
fn describe(
    address: &str,
    (env_id, env): (&str, &rapi::Environment),
    spec: rapi::FunctionSpec,
    mut coders: Vec<(String, rapi::Coder)>,
    (value_in, value_out): (&str, &str),
    id: String,
) -> fapi::ProcessBundleDescriptor {
    coders.extend([
        ("weir_nonce".to_string(), coder(urns::coders::BYTES, &[])),
        ("weir_global".to_string(), coder(urns::coders::GLOBAL_WINDOW, &[])),
        ("weir_in".to_string(), coder(urns::coders::KV, &["weir_nonce", value_in])),
        ("weir_out".to_string(), coder(urns::coders::KV, &["weir_nonce", value_out])),
        ("weir_in_wv".to_string(), coder(urns::coders::WINDOWED_VALUE, &["weir_in", "weir_global"])),
        ("weir_out_wv".to_string(), coder(urns::coders::WINDOWED_VALUE, &["weir_out", "weir_global"])),
    ]);
    // As an SDK writes a global windowing strategy (Beam Python reads every field).
    let global = rapi::WindowingStrategy {
        window_fn: Some(rapi::FunctionSpec { urn: urns::window_fns::GLOBAL.into(), payload: Vec::new() }),
        window_coder_id: "weir_global".into(),
        environment_id: env_id.into(),
        trigger: Some(rapi::Trigger { trigger: Some(rapi::trigger::Trigger::Default(Default::default())) }),
        merge_status: rapi::merge_status::Enum::NonMerging as i32,
        accumulation_mode: rapi::accumulation_mode::Enum::Discarding as i32,
        output_time: rapi::output_time::Enum::EndOfWindow as i32,
        closing_behavior: rapi::closing_behavior::Enum::EmitIfNonempty as i32,
        on_time_behavior: rapi::on_time_behavior::Enum::FireIfNonempty as i32,
        assigns_to_one_window: true,
        ..Default::default()
    };
    let pcollection = |coder: &str| rapi::PCollection {
        unique_name: coder.into(),
        coder_id: coder.into(),
        windowing_strategy_id: "weir_global_ws".into(),
        is_bounded: rapi::is_bounded::Enum::Bounded as i32,
        ..Default::default()
    };
    let port = |urn: &str, coder: &str| {
        let grpc = fapi::RemoteGrpcPort {
            api_service_descriptor: Some(rapi::ApiServiceDescriptor { url: address.into(), authentication: None }),
            coder_id: coder.into(),
        };
        rapi::FunctionSpec { urn: urn.into(), payload: grpc.encode_to_vec() }
    };
    let transform =
        |name: &str, spec: rapi::FunctionSpec, input: Option<&str>, output: Option<&str>| rapi::PTransform {
            unique_name: name.into(),
            spec: Some(spec),
            inputs: input.map(|pc| ("in".to_string(), pc.to_string())).into_iter().collect(),
            outputs: output.map(|pc| ("out".to_string(), pc.to_string())).into_iter().collect(),
            environment_id: if name == "sdk" { env_id.into() } else { String::new() },
            ..Default::default()
        };
    fapi::ProcessBundleDescriptor {
        id,
        transforms: [
            (SOURCE, transform(SOURCE, port(urns::runner::DATA_SOURCE, "weir_in_wv"), None, Some("in"))),
            ("sdk", transform("sdk", spec, Some("in"), Some("out"))),
            (SINK, transform(SINK, port(urns::runner::DATA_SINK, "weir_out_wv"), Some("out"), None)),
        ]
        .into_iter()
        .map(|(k, t)| (k.to_string(), t))
        .collect(),
        pcollections: [("in", pcollection("weir_in")), ("out", pcollection("weir_out"))]
            .into_iter()
            .map(|(k, p)| (k.to_string(), p))
            .collect(),
        windowing_strategies: [("weir_global_ws".to_string(), global)].into_iter().collect(),
        coders: coders.into_iter().collect(),
        environments: [(env_id.to_string(), env.clone())].into_iter().collect(),
        ..Default::default()
    }
}
