//! Windows only the SDK can merge: a window function of the user's own whose windows merge
//! (Beam Java's `WindowFn.mergeWindows`). Weir groups on the windows, and asks a harness to
//! merge them, as Beam's portable protocol defines (`beam:transform:merge_windows:v1`): a
//! bundle whose one element is `KV<nonce, Iterable<window>>` (one key's active windows) and
//! whose output is `KV<nonce, KV<Iterable<window>, Iterable<KV<window, Iterable<window>>>>>`
//! (the windows left as they are, and each merge result with the windows it took in).
//!
//! The windows must be coded as Beam's interval windows, which Weir reads; windows of a coder
//! of the SDK's own are refused when the pipeline is submitted.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use weir_sdk::coders::{read_bytes, read_varint, write_varint, CoderError, WindowCoderKind};
use weir_sdk::pane::PaneInfo;
use weir_sdk::urns;
use weir_sdk::window::Window;

use crate::preprocess::windowing::SdkMerger;
use crate::proto::fn_execution::v1 as fapi;
use crate::proto::pipeline::v1 as rapi;
use crate::worker::FnServer;
use crate::Error;

const SOURCE: &str = "weir_merge_source";
const SINK: &str = "weir_merge_sink";

/// Merges one window function's windows on the harnesses of its environment.
pub struct HarnessMerger {
    server: Arc<FnServer>,
    workers: Vec<String>,
    descriptor: fapi::ProcessBundleDescriptor,
    window: WindowCoderKind,
    timeout: Duration,
    next: AtomicUsize,
    nonce: AtomicU64,
}

impl HarnessMerger {
    /// A merger of `window_fn`'s windows (coded by `window_coder`, read as `window`) on
    /// `workers`, harnesses of environment `env` served by `h`; `id` names its descriptor.
    pub fn new(
        h: &super::Harnessed,
        (env_id, env): (&str, &rapi::Environment),
        workers: Vec<String>,
        window_fn: &rapi::FunctionSpec,
        (window_coder_id, window_coder): (&str, &rapi::Coder),
        window: WindowCoderKind,
        id: String,
    ) -> Self {
        let descriptor = describe(h.server.address(), (env_id, env), window_fn, (window_coder_id, window_coder), id);
        HarnessMerger {
            server: h.server.clone(),
            workers,
            descriptor,
            window,
            timeout: h.timeout,
            next: AtomicUsize::new(0),
            nonce: AtomicU64::new(0),
        }
    }

    fn input(&self, nonce: &[u8], windows: &[Window]) -> Vec<u8> {
        let mut out = Vec::new();
        // Beam's windowed value in the global window, of KV<bytes, Iterable<window>>.
        weir_sdk::coders::write_timestamp(weir_sdk::time::MIN_TIMESTAMP, &mut out);
        out.extend_from_slice(&1i32.to_be_bytes());
        PaneInfo::NO_FIRING.encode(&mut out);
        write_varint(nonce.len() as u64, &mut out);
        out.extend_from_slice(nonce);
        out.extend_from_slice(&(windows.len() as i32).to_be_bytes());
        for w in windows {
            w.encode(&mut out);
        }
        out
    }

    /// The merges in the harness's answer `bytes` to the request of `nonce`.
    fn merges(&self, nonce: &[u8], mut bytes: &[u8]) -> Result<Vec<(Vec<Window>, Window)>, CoderError> {
        let input = &mut bytes;
        weir_sdk::coders::read_timestamp(input)?;
        let n = i32::from_be_bytes(read_bytes(input, 4)?.try_into().unwrap_or_default());
        if n != 1 {
            return Err(CoderError::new(format!("a merge result in {n} windows, not the global one")));
        }
        PaneInfo::decode(input)?;
        let len = read_varint(input)? as usize;
        if read_bytes(input, len)? != nonce {
            return Err(CoderError::new("a merge result for another request"));
        }
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
        let nonce = self.nonce.fetch_add(1, Ordering::Relaxed).to_be_bytes();
        let mut last = String::from("no SDK harness to merge windows on");
        for attempt in 0..self.workers.len() {
            let worker = &self.workers[(self.next.fetch_add(1, Ordering::Relaxed) + attempt) % self.workers.len()];
            let input = (vec![(SOURCE.to_string(), self.input(&nonce, windows))], Default::default());
            match self.server.process_bundle(worker, &self.descriptor, input, &[SINK.to_string()], self.timeout) {
                Ok(mut out) => {
                    let bytes = out.outputs.remove(SINK).unwrap_or_default();
                    return self.merges(&nonce, &bytes).map_err(|e| format!("the harness's merge result: {e}"));
                }
                Err(e @ Error::Bundle { .. }) => return Err(e.to_string()),
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
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

/// The descriptor of a bundle that merges windows: a data source, the merge transform, a
/// data sink, in the global window.
fn describe(
    address: &str,
    (env_id, env): (&str, &rapi::Environment),
    window_fn: &rapi::FunctionSpec,
    (window_coder_id, window_coder): (&str, &rapi::Coder),
    id: String,
) -> fapi::ProcessBundleDescriptor {
    let coder = |urn: &str, components: &[&str]| rapi::Coder {
        spec: Some(rapi::FunctionSpec { urn: urn.into(), payload: Vec::new() }),
        component_coder_ids: components.iter().map(|c| c.to_string()).collect(),
    };
    let w = window_coder_id;
    let coders = [
        (w, window_coder.clone()),
        ("weir_merge_bytes", coder(urns::coders::BYTES, &[])),
        ("weir_merge_global", coder(urns::coders::GLOBAL_WINDOW, &[])),
        ("weir_merge_windows", coder(urns::coders::ITERABLE, &[w])),
        ("weir_merge_in", coder(urns::coders::KV, &["weir_merge_bytes", "weir_merge_windows"])),
        ("weir_merge_one", coder(urns::coders::KV, &[w, "weir_merge_windows"])),
        ("weir_merge_all", coder(urns::coders::ITERABLE, &["weir_merge_one"])),
        ("weir_merge_result", coder(urns::coders::KV, &["weir_merge_windows", "weir_merge_all"])),
        ("weir_merge_out", coder(urns::coders::KV, &["weir_merge_bytes", "weir_merge_result"])),
        ("weir_merge_in_wv", coder(urns::coders::WINDOWED_VALUE, &["weir_merge_in", "weir_merge_global"])),
        ("weir_merge_out_wv", coder(urns::coders::WINDOWED_VALUE, &["weir_merge_out", "weir_merge_global"])),
    ];
    let global = rapi::WindowingStrategy {
        window_fn: Some(rapi::FunctionSpec { urn: urns::window_fns::GLOBAL.into(), payload: Vec::new() }),
        window_coder_id: "weir_merge_global".into(),
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
        windowing_strategy_id: "weir_merge_ws".into(),
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
            environment_id: if name == "merge" { env_id.into() } else { String::new() },
            ..Default::default()
        };
    let merge_spec = rapi::FunctionSpec { urn: urns::MERGE_WINDOWS.into(), payload: window_fn.encode_to_vec() };
    fapi::ProcessBundleDescriptor {
        id,
        transforms: [
            (SOURCE, transform(SOURCE, port(urns::runner::DATA_SOURCE, "weir_merge_in_wv"), None, Some("windows"))),
            ("merge", transform("merge", merge_spec, Some("windows"), Some("merged"))),
            (SINK, transform(SINK, port(urns::runner::DATA_SINK, "weir_merge_out_wv"), Some("merged"), None)),
        ]
        .into_iter()
        .map(|(k, t)| (k.to_string(), t))
        .collect(),
        pcollections: [("windows", pcollection("weir_merge_in")), ("merged", pcollection("weir_merge_out"))]
            .into_iter()
            .map(|(k, p)| (k.to_string(), p))
            .collect(),
        windowing_strategies: [("weir_merge_ws".to_string(), global)].into_iter().collect(),
        coders: coders.into_iter().map(|(k, c)| (k.to_string(), c)).collect(),
        environments: [(env_id.to_string(), env.clone())].into_iter().collect(),
        ..Default::default()
    }
}
