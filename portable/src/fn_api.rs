//! The Fn API, server side: the services an SDK harness connects to, and bundles sent to it.
//!
//! A harness (Beam Python's `sdk_worker_main`, started by Weir or by the submitting process)
//! opens a control stream, a data stream and a logging stream to the endpoint of [`FnServer`],
//! naming itself by the `worker_id` header. [`FnServer::process_bundle`] then runs one bundle
//! on a harness: it sends a `ProcessBundleRequest` naming the stage's descriptor (which the
//! harness fetches once with `GetProcessBundleDescriptor`), the bundle's input bytes on the data
//! stream, and waits for every output's last byte and the harness's response. Harness logs go
//! to Weir's `tracing` output. The gRPC services run on a small tokio runtime of their own; the
//! calls of this module block, as an operator's do.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use crate::proto::fn_execution::v1 as fapi;
use fapi::beam_fn_control_server::{BeamFnControl, BeamFnControlServer};
use fapi::beam_fn_data_server::{BeamFnData, BeamFnDataServer};
use fapi::beam_fn_logging_server::{BeamFnLogging, BeamFnLoggingServer};
use fapi::beam_fn_state_server::{BeamFnState, BeamFnStateServer};
use fapi::provision_service_server::{ProvisionService, ProvisionServiceServer};

/// A gRPC service that takes and sends messages of any size, as Beam's own servers do (tonic
/// refuses messages over 4 MB by default: a harness's data message, or a pipeline with large
/// pickled functions, is bigger).
#[macro_export]
macro_rules! unlimited {
    ($service:expr) => {
        $service.max_decoding_message_size(usize::MAX).max_encoding_message_size(usize::MAX)
    };
}

/// A multimap side input's values: per encoded key, its values' encodings one after another.
pub type ByKey = std::collections::BTreeMap<Vec<u8>, Vec<u8>>;

/// Which side input, in which window: (transform id, side input id, encoded window).
pub type SideInputKey = (String, String, Vec<u8>);

/// A bundle's side inputs, as a harness asks for them through the State API: per
/// [`SideInputKey`], the concatenated encodings of the elements; for a multimap side input,
/// per encoded key, of the key's values.
#[derive(Debug, Clone, Default)]
pub struct SideInputs {
    /// Iterable side inputs.
    pub iterables: HashMap<SideInputKey, Arc<Vec<u8>>>,
    /// Multimap side inputs.
    pub multimaps: HashMap<SideInputKey, Arc<ByKey>>,
}

impl SideInputs {
    /// The answer to a state `Get` of `key`: the bytes, or why there are none.
    fn get(&self, key: &fapi::StateKey) -> Result<Vec<u8>, String> {
        use fapi::state_key::Type;
        let missing = |t: &str, s: &str| format!("no side input '{s}' of transform '{t}' in this bundle");
        match key.r#type.as_ref() {
            Some(Type::IterableSideInput(k)) => {
                let id = (k.transform_id.clone(), k.side_input_id.clone(), k.window.clone());
                let data = self.iterables.get(&id).ok_or_else(|| missing(&k.transform_id, &k.side_input_id))?;
                Ok(data.to_vec())
            }
            Some(Type::MultimapSideInput(k)) => {
                let id = (k.transform_id.clone(), k.side_input_id.clone(), k.window.clone());
                let map = self.multimaps.get(&id).ok_or_else(|| missing(&k.transform_id, &k.side_input_id))?;
                Ok(map.get(&k.key).cloned().unwrap_or_default())
            }
            Some(Type::MultimapKeysSideInput(k)) => {
                let id = (k.transform_id.clone(), k.side_input_id.clone(), k.window.clone());
                let map = self.multimaps.get(&id).ok_or_else(|| missing(&k.transform_id, &k.side_input_id))?;
                Ok(map.keys().flat_map(|k| k.iter().copied()).collect())
            }
            Some(other) => Err(format!("state of kind {other:?} is not supported by Weir's portable runner yet")),
            None => Err("a state request without a state key".into()),
        }
    }
}

/// A bundle's input as the data stream carries it: each port's bytes, then its end.
fn elements(id: &str, input: Vec<(Port, Vec<u8>)>) -> fapi::Elements {
    let mut e = fapi::Elements::default();
    for (port, bytes) in input {
        for (piece, is_last) in [(bytes, false), (Vec::new(), true)] {
            match &port {
                Port::Data(t) => e.data.push(fapi::elements::Data {
                    instruction_id: id.to_string(),
                    transform_id: t.clone(),
                    data: piece,
                    is_last,
                }),
                Port::Timers(t, f) => e.timers.push(fapi::elements::Timers {
                    instruction_id: id.to_string(),
                    transform_id: t.clone(),
                    timer_family_id: f.clone(),
                    timers: piece,
                    is_last,
                }),
            }
        }
    }
    e
}

/// The connections `listener` accepts, each sending small messages (a state request's answer,
/// a bundle's last data) at once rather than holding them back for a delayed acknowledgement
/// (Nagle's algorithm cost each state request tens of milliseconds).
pub fn without_delay(
    listener: tokio::net::TcpListener,
) -> impl tokio_stream::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    tokio_stream::wrappers::TcpListenerStream::new(listener).map(|accepted| {
        accepted.inspect(|stream| {
            let _ = stream.set_nodelay(true);
        })
    })
}

/// What went wrong talking to a harness.
#[derive(Debug, thiserror::Error)]
pub enum FnError {
    /// The services could not start.
    #[error("the Fn API services cannot start: {0}")]
    Start(String),
    /// A harness could not be started (what says why names it).
    #[error("{0}")]
    Launch(String),
    /// A harness did not connect, or did not answer, in time.
    #[error("SDK harness '{worker}' {what} within {secs} s")]
    Timeout {
        /// The harness's worker id.
        worker: String,
        /// What it did not do.
        what: &'static str,
        /// The time allowed.
        secs: u64,
    },
    /// The harness's control stream ended: it exited (`why` says how, when known) or lost
    /// its connection.
    #[error("SDK harness '{worker}' is gone: {why}")]
    Gone {
        /// The harness's worker id.
        worker: String,
        /// How: its exit status, or that its control stream ended.
        why: String,
    },
    /// The harness failed the bundle: the error it sent (a Python traceback, say).
    #[error("SDK harness '{worker}' failed the bundle: {error}")]
    Bundle {
        /// The harness's worker id.
        worker: String,
        /// Its error.
        error: String,
    },
}

type Outbound<T> = mpsc::UnboundedSender<Result<T, Status>>;

/// What the services and the blocking calls share.
#[derive(Default)]
struct Links {
    /// Per worker id, where its instructions go.
    control: HashMap<String, Outbound<fapi::InstructionRequest>>,
    /// Per worker id, where its input data goes.
    data: HashMap<String, Outbound<fapi::Elements>>,
    /// Workers gone, with how, and since when.
    gone: HashMap<String, (String, Instant)>,
    /// Workers whose process Weir watches: their exit status is on its way when their control
    /// stream ends.
    watched: std::collections::HashSet<String>,
    /// Responses, by instruction id, until taken.
    responses: HashMap<String, fapi::InstructionResponse>,
    /// Output data by instruction id, then port: the bytes, and whether the last came.
    outputs: HashMap<String, HashMap<Port, (Vec<u8>, bool)>>,
    /// User state requests by instruction id, with where each answer goes, until the
    /// operator running the bundle answers them.
    user_state: HashMap<String, Vec<(fapi::StateRequest, Outbound<fapi::StateResponse>)>>,
    /// The descriptors harnesses may ask for, by id.
    descriptors: HashMap<String, fapi::ProcessBundleDescriptor>,
    /// The side inputs of the bundles running, by instruction id.
    side_inputs: HashMap<String, Arc<SideInputs>>,
    /// Streams from harnesses still open (to close the services only once they have ended).
    open_streams: usize,
    /// The job's pipeline options, as the provision service gives them to harnesses.
    options: prost_types::Struct,
}

#[derive(Default)]
struct Shared {
    links: Mutex<Links>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Links> {
        self.links.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a stream from a harness open until the guard returned is dropped.
    fn stream_opened(self: &Arc<Self>) -> StreamGuard {
        self.lock().open_streams += 1;
        StreamGuard(self.clone())
    }

    /// Waits until `done` holds, the worker is gone, or `timeout` passes.
    fn wait_for(
        &self,
        worker: &str,
        timeout: Duration,
        what: &'static str,
        mut done: impl FnMut(&mut Links) -> bool,
    ) -> Result<MutexGuard<'_, Links>, FnError> {
        let deadline = Instant::now() + timeout;
        let mut links = self.lock();
        loop {
            if done(&mut links) {
                return Ok(links);
            }
            if let Some((why, since)) = links.gone.get(worker) {
                // A watched process's exit status says more than its stream's end: it comes
                // within moments.
                let exit_due = links.watched.contains(worker) && since.elapsed() < Duration::from_secs(2);
                if !exit_due {
                    return Err(FnError::Gone { worker: worker.to_string(), why: why.clone() });
                }
                let left = Duration::from_secs(2).saturating_sub(since.elapsed()).max(Duration::from_millis(10));
                links = self.changed.wait_timeout(links, left).unwrap_or_else(|e| e.into_inner()).0;
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(FnError::Timeout { worker: worker.to_string(), what, secs: timeout.as_secs() });
            }
            links = self.changed.wait_timeout(links, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

/// The worker id a harness names itself by.
fn worker_of<T>(request: &Request<T>) -> String {
    request.metadata().get("worker_id").and_then(|v| v.to_str().ok()).unwrap_or("").to_string()
}

struct Services(Arc<Shared>);

impl Services {
    /// Serves a stream a harness opened: `serve` gets the shared state, the harness's messages
    /// and where replies go (which it may register at once), and returns the work on the
    /// messages, which runs counted as an open stream until it ends.
    fn stream<In, Out, Work>(
        &self,
        request: Request<Streaming<In>>,
        serve: impl FnOnce(Arc<Shared>, Streaming<In>, Outbound<Out>) -> Work,
    ) -> Response<UnboundedReceiverStream<Result<Out, Status>>>
    where
        Work: std::future::Future<Output = ()> + Send + 'static,
    {
        let (to, from) = mpsc::unbounded_channel();
        let open = self.0.stream_opened();
        let work = serve(self.0.clone(), request.into_inner(), to);
        tokio::spawn(async move {
            let _open = open;
            work.await
        });
        Response::new(UnboundedReceiverStream::new(from))
    }
}

/// A stream from a harness, counted open while it lives.
struct StreamGuard(Arc<Shared>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.lock().open_streams -= 1;
        self.0.changed.notify_all();
    }
}

#[tonic::async_trait]
impl BeamFnControl for Services {
    type ControlStream = UnboundedReceiverStream<Result<fapi::InstructionRequest, Status>>;

    async fn control(
        &self,
        request: Request<Streaming<fapi::InstructionResponse>>,
    ) -> Result<Response<Self::ControlStream>, Status> {
        let worker = worker_of(&request);
        Ok(self.stream(request, |shared, mut inbound, to| {
            let mut links = shared.lock();
            links.gone.remove(&worker);
            links.control.insert(worker.clone(), to);
            drop(links);
            shared.changed.notify_all();
            async move {
                while let Some(Ok(response)) = inbound.next().await {
                    shared.lock().responses.insert(response.instruction_id.clone(), response);
                    shared.changed.notify_all();
                }
                let mut links = shared.lock();
                links.control.remove(&worker);
                links.gone.entry(worker).or_insert_with(|| ("its control stream ended".into(), Instant::now()));
                drop(links);
                shared.changed.notify_all();
            }
        }))
    }

    async fn get_process_bundle_descriptor(
        &self,
        request: Request<fapi::GetProcessBundleDescriptorRequest>,
    ) -> Result<Response<fapi::ProcessBundleDescriptor>, Status> {
        let id = request.into_inner().process_bundle_descriptor_id;
        match self.0.lock().descriptors.get(&id) {
            Some(d) => Ok(Response::new(d.clone())),
            None => Err(Status::not_found(format!("no process bundle descriptor '{id}'"))),
        }
    }
}

#[tonic::async_trait]
impl BeamFnData for Services {
    type DataStream = UnboundedReceiverStream<Result<fapi::Elements, Status>>;

    async fn data(&self, request: Request<Streaming<fapi::Elements>>) -> Result<Response<Self::DataStream>, Status> {
        let worker = worker_of(&request);
        Ok(self.stream(request, |shared, mut inbound, to| {
            shared.lock().data.insert(worker.clone(), to);
            shared.changed.notify_all();
            async move {
                let broken = loop {
                    let elements = match inbound.next().await {
                        Some(Ok(elements)) => elements,
                        Some(Err(status)) => break Some(status),
                        None => break None,
                    };
                    let mut links = shared.lock();
                    for d in elements.data {
                        let bundle = links.outputs.entry(d.instruction_id).or_default();
                        let (bytes, last) = bundle.entry(Port::Data(d.transform_id)).or_default();
                        bytes.extend_from_slice(&d.data);
                        *last |= d.is_last;
                    }
                    for t in elements.timers {
                        let bundle = links.outputs.entry(t.instruction_id).or_default();
                        let (bytes, last) = bundle.entry(Port::Timers(t.transform_id, t.timer_family_id)).or_default();
                        bytes.extend_from_slice(&t.timers);
                        *last |= t.is_last;
                    }
                    drop(links);
                    shared.changed.notify_all();
                };
                let mut links = shared.lock();
                links.data.remove(&worker);
                // A data stream that breaks loses the output of the bundles on it: they fail,
                // rather than wait for data that will not come.
                if let Some(status) = broken {
                    let why = format!("its data stream broke: {}", status.message());
                    links.gone.entry(worker).or_insert((why, Instant::now()));
                }
                drop(links);
                shared.changed.notify_all();
            }
        }))
    }
}

#[tonic::async_trait]
impl BeamFnState for Services {
    type StateStream = UnboundedReceiverStream<Result<fapi::StateResponse, Status>>;

    async fn state(
        &self,
        request: Request<Streaming<fapi::StateRequest>>,
    ) -> Result<Response<Self::StateStream>, Status> {
        Ok(self.stream(request, |shared, mut inbound, to| async move {
            while let Some(Ok(r)) = inbound.next().await {
                if r.state_key.as_ref().is_some_and(is_user_state) {
                    // User state lives with the operator running the bundle: its thread
                    // answers, in the order the harness asked.
                    let mut links = shared.lock();
                    if links.outputs.contains_key(&r.instruction_id) {
                        links.user_state.entry(r.instruction_id.clone()).or_default().push((r, to.clone()));
                        drop(links);
                        shared.changed.notify_all();
                        continue;
                    }
                    drop(links);
                    let error = format!("no bundle '{}' is running", r.instruction_id);
                    if to.send(Ok(fapi::StateResponse { id: r.id, error, response: None })).is_err() {
                        break;
                    }
                    continue;
                }
                let answer = match (&r.request, &r.state_key) {
                    (Some(fapi::state_request::Request::Get(_)), Some(key)) => {
                        let inputs = shared.lock().side_inputs.get(&r.instruction_id).cloned();
                        match inputs {
                            Some(inputs) => inputs.get(key).map(get_response),
                            None => Err(format!("no bundle '{}' is running", r.instruction_id)),
                        }
                    }
                    _ => Err("side inputs are read only".to_string()),
                };
                if to.send(Ok(state_response(r.id, answer))).is_err() {
                    break;
                }
            }
        }))
    }
}

/// Whether a state key names user state (kept by the operator running the bundle) rather than
/// a side input.
fn is_user_state(key: &fapi::StateKey) -> bool {
    use fapi::state_key::Type;
    matches!(
        key.r#type,
        Some(
            Type::BagUserState(_)
                | Type::MultimapUserState(_)
                | Type::MultimapKeysUserState(_)
                | Type::MultimapEntriesUserState(_)
                | Type::OrderedListUserState(_)
        )
    )
}

/// A `Get`'s answer: all of `data` at once.
pub fn get_response(data: Vec<u8>) -> fapi::state_response::Response {
    fapi::state_response::Response::Get(fapi::StateGetResponse { continuation_token: Vec::new(), data })
}

fn state_response(id: String, answer: Result<fapi::state_response::Response, String>) -> fapi::StateResponse {
    match answer {
        Ok(response) => fapi::StateResponse { id, error: String::new(), response: Some(response) },
        Err(error) => fapi::StateResponse { id, error, response: None },
    }
}

/// Keeps the user state of the bundles an operator runs, and answers the harness's requests
/// for it, on the operator's thread while the bundle runs.
pub trait UserState {
    /// The answer to `request` (a `Get`, `Append` or `Clear` of a user state key).
    fn serve(&mut self, request: &fapi::StateRequest) -> Result<fapi::state_response::Response, String>;
}

#[tonic::async_trait]
impl BeamFnLogging for Services {
    type LoggingStream = UnboundedReceiverStream<Result<fapi::LogControl, Status>>;

    async fn logging(
        &self,
        request: Request<Streaming<fapi::log_entry::List>>,
    ) -> Result<Response<Self::LoggingStream>, Status> {
        let worker = worker_of(&request);
        Ok(self.stream(request, |_, mut inbound, to| async move {
            // Held while the harness logs: the stream back stays open as long.
            let _to: Outbound<fapi::LogControl> = to;
            while let Some(Ok(list)) = inbound.next().await {
                for e in list.log_entries {
                    log(&worker, &e);
                }
            }
        }))
    }
}

#[tonic::async_trait]
impl ProvisionService for Services {
    async fn get_provision_info(
        &self,
        request: Request<fapi::GetProvisionInfoRequest>,
    ) -> Result<Response<fapi::GetProvisionInfoResponse>, Status> {
        let address = request.local_addr().map(|a| a.to_string()).unwrap_or_default();
        let here = Some(crate::proto::pipeline::v1::ApiServiceDescriptor { url: address, authentication: None });
        let info = fapi::ProvisionInfo {
            pipeline_options: Some(self.0.lock().options.clone()),
            logging_endpoint: here.clone(),
            control_endpoint: here,
            ..Default::default()
        };
        Ok(Response::new(fapi::GetProvisionInfoResponse { info: Some(info) }))
    }
}

/// A harness's log entry, at its severity, in Weir's `tracing` output.
fn log(worker: &str, e: &fapi::LogEntry) {
    use fapi::log_entry::severity::Enum as S;
    let (msg, trace, at) = (&e.message, &e.trace, &e.log_location);
    match S::try_from(e.severity).unwrap_or(S::Info) {
        S::Critical | S::Error => tracing::error!(target: "beam_harness", worker, at, "{msg}{trace}"),
        S::Warn => tracing::warn!(target: "beam_harness", worker, at, "{msg}{trace}"),
        S::Notice | S::Info => tracing::info!(target: "beam_harness", worker, at, "{msg}"),
        _ => tracing::debug!(target: "beam_harness", worker, at, "{msg}"),
    }
}

/// Where harness exits are reported ([`FnServer::exits`]).
#[derive(Clone)]
pub struct Exits(Arc<Shared>);

impl Exits {
    /// Harness `worker` exited, as `how` says.
    pub fn report(&self, worker: &str, how: String) {
        let mut links = self.0.lock();
        links.gone.insert(worker.to_string(), (how, Instant::now()));
        links.watched.remove(worker);
        drop(links);
        self.0.changed.notify_all();
    }

    /// Harness `worker` is a process whose exit will be reported.
    pub fn watching(&self, worker: &str) {
        self.0.lock().watched.insert(worker.to_string());
    }
}

/// The Fn API services on a port of 127.0.0.1, and bundles run on the harnesses connected.
pub struct FnServer {
    /// Runs the services; dropped with the server.
    _runtime: tokio::runtime::Runtime,
    address: String,
    shared: Arc<Shared>,
    next_instruction: AtomicU64,
}

/// One bundle's input: per data source transform of the descriptor, its encoded elements.
pub type BundleInput = Vec<(String, Vec<u8>)>;

/// Where a bundle's data comes from or goes: a data source or sink transform, or a timer
/// family of a transform (its timers on the data stream).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Port {
    /// A data source or sink transform.
    Data(String),
    /// Timer family `.1` of transform `.0`.
    Timers(String, String),
}

/// What a bundle gets and gives.
pub struct BundleRequest<'a> {
    /// Per port, its input bytes: data to data sources, timers to timer families. Every port
    /// the harness expects is named, with nothing if it has nothing.
    pub input: Vec<(Port, Vec<u8>)>,
    /// The side inputs its State API requests read.
    pub side_inputs: SideInputs,
    /// The ports whose output is awaited: data sinks, and the timer families the harness sets
    /// timers in.
    pub outputs: &'a [Port],
    /// Where its user state requests are answered, if it has user state.
    pub user_state: Option<&'a mut dyn UserState>,
    /// The token under which the harness may cache the user state it reads across bundles:
    /// valid while only bundles under it change that state.
    pub cache_token: Option<Vec<u8>>,
}

/// What a bundle gave back.
#[derive(Debug, Default)]
pub struct BundleOutput {
    /// The bundle's instruction id.
    pub instruction: String,
    /// Per data sink transform asked for, the bytes it sent.
    pub outputs: HashMap<String, Vec<u8>>,
    /// Per timer family asked for, the timers it set or cleared.
    pub timers: HashMap<(String, String), Vec<u8>>,
    /// The harness's response: metrics, residuals, whether it asks to be finalized.
    pub response: fapi::ProcessBundleResponse,
    /// How many user state requests it made.
    pub state_requests: u64,
}

impl FnServer {
    /// Starts the control, data and logging services on a free port of 127.0.0.1.
    pub fn start() -> Result<FnServer, FnError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("weir-fn-api")
            .enable_all()
            .build()
            .map_err(|e| FnError::Start(e.to_string()))?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| FnError::Start(e.to_string()))?;
        let address = listener.local_addr().map_err(|e| FnError::Start(e.to_string()))?.to_string();
        listener.set_nonblocking(true).map_err(|e| FnError::Start(e.to_string()))?;
        let shared = Arc::new(Shared::default());
        let services = Arc::new(Services(shared.clone()));
        let incoming = {
            let _in_runtime = runtime.enter();
            let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| FnError::Start(e.to_string()))?;
            without_delay(listener)
        };
        let server = tonic::transport::Server::builder()
            .add_service(unlimited!(BeamFnControlServer::from_arc(services.clone())))
            .add_service(unlimited!(BeamFnDataServer::from_arc(services.clone())))
            .add_service(unlimited!(BeamFnStateServer::from_arc(services.clone())))
            .add_service(unlimited!(BeamFnLoggingServer::from_arc(services.clone())))
            .add_service(unlimited!(ProvisionServiceServer::from_arc(services)))
            .serve_with_incoming(incoming);
        runtime.spawn(async move {
            if let Err(e) = server.await {
                tracing::error!("the Fn API services stopped: {e}");
            }
        });
        Ok(FnServer { _runtime: runtime, address, shared, next_instruction: AtomicU64::new(1) })
    }

    /// The services' address, `host:port`, for a harness's `ApiServiceDescriptor`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Sets the job's pipeline options, which harnesses get from the provision service (and
    /// harness processes Weir starts, in their environment).
    pub fn set_pipeline_options(&self, options: prost_types::Struct) {
        self.shared.lock().options = options;
    }

    /// The job's pipeline options as JSON (`{"beam:option:<name>:v1": value, ...}`), as Beam
    /// Python's harness reads them from `PIPELINE_OPTIONS`.
    pub fn pipeline_options_json(&self) -> String {
        fn json(v: &prost_types::Value) -> String {
            use prost_types::value::Kind;
            match v.kind.as_ref() {
                Some(Kind::NumberValue(n)) if n.is_finite() => n.to_string(),
                Some(Kind::StringValue(s)) => quote(s),
                Some(Kind::BoolValue(b)) => b.to_string(),
                Some(Kind::StructValue(s)) => object(s),
                Some(Kind::ListValue(l)) => format!("[{}]", l.values.iter().map(json).collect::<Vec<_>>().join(",")),
                _ => "null".into(),
            }
        }
        fn quote(s: &str) -> String {
            let mut out = String::from("\"");
            for c in s.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                    c => out.push(c),
                }
            }
            out.push('"');
            out
        }
        fn object(s: &prost_types::Struct) -> String {
            let mut fields: Vec<_> = s.fields.iter().collect();
            fields.sort_by(|a, b| a.0.cmp(b.0));
            let body: Vec<String> = fields.into_iter().map(|(k, v)| format!("{}:{}", quote(k), json(v))).collect();
            format!("{{{}}}", body.join(","))
        }
        object(&self.shared.lock().options)
    }

    /// Ends every bundle waiting on a harness, with `why` (a cancelled job).
    pub fn abort(&self, why: &str) {
        let mut links = self.shared.lock();
        let workers: Vec<String> = links.control.keys().cloned().collect();
        for w in workers {
            links.gone.insert(w.clone(), (why.to_string(), Instant::now()));
            links.watched.remove(&w);
        }
        drop(links);
        self.shared.changed.notify_all();
    }

    /// Records that harness `worker` exited, and how: a bundle waiting on it fails, naming it.
    pub fn worker_exited(&self, worker: &str, how: String) {
        self.exits().report(worker, how)
    }

    /// Where a thread watching a harness process reports its exit.
    pub fn exits(&self) -> Exits {
        Exits(self.shared.clone())
    }

    /// Runs `f` on the services' runtime (a gRPC client call, say) and waits for it.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self._runtime.block_on(f)
    }

    /// Waits until harness `worker` has opened its control stream (it opens its data stream
    /// when a bundle first needs one).
    pub fn wait_for_worker(&self, worker: &str, timeout: Duration) -> Result<(), FnError> {
        self.shared.wait_for(worker, timeout, "did not connect", |l| l.control.contains_key(worker)).map(drop)
    }

    /// Runs one bundle of the stage `descriptor` on harness `worker`: `input`'s bytes to the
    /// descriptor's data sources, `side_inputs` to its State API requests, then the bytes every
    /// one of `outputs` (data sink transform ids) sent back, once the harness has sent the last
    /// of each and answered.
    pub fn process_bundle(
        &self,
        worker: &str,
        descriptor: &fapi::ProcessBundleDescriptor,
        (input, side_inputs): (BundleInput, SideInputs),
        outputs: &[String],
        timeout: Duration,
    ) -> Result<BundleOutput, FnError> {
        let input = input.into_iter().map(|(t, bytes)| (Port::Data(t), bytes)).collect();
        let outputs: Vec<Port> = outputs.iter().cloned().map(Port::Data).collect();
        let request = BundleRequest { input, side_inputs, outputs: &outputs, user_state: None, cache_token: None };
        self.run(worker, descriptor, request, timeout)
    }

    /// Runs one bundle of the stage `descriptor` on harness `worker`, as `request` says; user
    /// state requests are answered on this thread while it waits.
    pub fn run(
        &self,
        worker: &str,
        descriptor: &fapi::ProcessBundleDescriptor,
        request: BundleRequest<'_>,
        timeout: Duration,
    ) -> Result<BundleOutput, FnError> {
        let id = self.instruction_id();
        let result = self.run_bundle(&id, worker, descriptor, request, timeout);
        let mut links = self.shared.lock();
        links.side_inputs.remove(&id);
        links.outputs.remove(&id);
        links.responses.remove(&id);
        links.user_state.remove(&id);
        result
    }

    fn run_bundle(
        &self,
        id: &str,
        worker: &str,
        descriptor: &fapi::ProcessBundleDescriptor,
        request: BundleRequest<'_>,
        timeout: Duration,
    ) -> Result<BundleOutput, FnError> {
        let BundleRequest { input, side_inputs, outputs, mut user_state, cache_token } = request;
        let cache_tokens = cache_token.into_iter().map(|token| fapi::process_bundle_request::CacheToken {
            token,
            r#type: Some(fapi::process_bundle_request::cache_token::Type::UserState(Default::default())),
        });
        let id = id.to_string();
        let gone = || FnError::Gone { worker: worker.to_string(), why: "it is not connected".into() };
        {
            let mut links = self.shared.lock();
            links.side_inputs.insert(id.clone(), Arc::new(side_inputs));
            links.descriptors.entry(descriptor.id.clone()).or_insert_with(|| descriptor.clone());
            links.outputs.insert(id.clone(), HashMap::new());
            let request = fapi::InstructionRequest {
                instruction_id: id.clone(),
                request: Some(fapi::instruction_request::Request::ProcessBundle(fapi::ProcessBundleRequest {
                    process_bundle_descriptor_id: descriptor.id.clone(),
                    cache_tokens: cache_tokens.collect(),
                    ..Default::default()
                })),
            };
            links.control.get(worker).ok_or_else(gone)?.send(Ok(request)).map_err(|_| gone())?;
        }
        {
            let links = self
                .shared
                .wait_for(worker, timeout, "did not open its data stream", |l| l.data.contains_key(worker))?;
            let elements = elements(&id, input);
            links.data.get(worker).ok_or_else(gone)?.send(Ok(elements)).map_err(|_| gone())?;
        }
        let finished = |l: &Links| {
            let failed = l.responses.get(&id).is_some_and(|r| !r.error.is_empty());
            let answered = l.responses.contains_key(&id);
            let all_sent =
                l.outputs.get(&id).is_some_and(|o| outputs.iter().all(|t| o.get(t).is_some_and(|(_, last)| *last)));
            failed || (answered && all_sent)
        };
        let mut state_requests = 0u64;
        let mut links = loop {
            let mut links = self.shared.wait_for(worker, timeout, "did not finish a bundle", |l| {
                finished(l) || l.user_state.get(&id).is_some_and(|q| !q.is_empty())
            })?;
            let asked = links.user_state.remove(&id).unwrap_or_default();
            if asked.is_empty() {
                break links;
            }
            drop(links);
            state_requests += asked.len() as u64;
            for (r, to) in asked {
                let answer = match user_state.as_mut() {
                    Some(state) => state.serve(&r),
                    None => Err(format!("stage '{}' has no user state", descriptor.id)),
                };
                // A harness gone fails the bundle when next waited on.
                let _ = to.send(Ok(state_response(r.id, answer)));
            }
        };
        let response = links.responses.remove(&id);
        let mut got = links.outputs.remove(&id).unwrap_or_default();
        drop(links);
        if let Some(r) = response.as_ref().filter(|r| !r.error.is_empty()) {
            return Err(FnError::Bundle { worker: worker.to_string(), error: r.error.clone() });
        }
        let response = match response.and_then(|r| r.response) {
            Some(fapi::instruction_response::Response::ProcessBundle(r)) => r,
            _ => fapi::ProcessBundleResponse::default(),
        };
        let mut out = BundleOutput { instruction: id, response, state_requests, ..Default::default() };
        for port in outputs {
            let bytes = got.remove(port).map(|(b, _)| b).unwrap_or_default();
            match port.clone() {
                Port::Data(t) => out.outputs.insert(t, bytes),
                Port::Timers(t, f) => out.timers.insert((t, f), bytes),
            };
        }
        Ok(out)
    }

    fn instruction_id(&self) -> String {
        format!("instruction-{}", self.next_instruction.fetch_add(1, Ordering::Relaxed))
    }

    /// Finalizes bundle `instruction` on harness `worker` (which asked for it in its response,
    /// once its output is committed): the harness runs the callbacks the DoFns registered.
    pub fn finalize_bundle(&self, worker: &str, instruction: &str, timeout: Duration) -> Result<(), FnError> {
        let id = self.instruction_id();
        let gone = || FnError::Gone { worker: worker.to_string(), why: "it is not connected".into() };
        let request = fapi::InstructionRequest {
            instruction_id: id.clone(),
            request: Some(fapi::instruction_request::Request::FinalizeBundle(fapi::FinalizeBundleRequest {
                instruction_id: instruction.to_string(),
            })),
        };
        self.shared.lock().control.get(worker).ok_or_else(gone)?.send(Ok(request)).map_err(|_| gone())?;
        let mut links =
            self.shared.wait_for(worker, timeout, "did not finalize a bundle", |l| l.responses.contains_key(&id))?;
        let response = links.responses.remove(&id).unwrap_or_default();
        drop(links);
        if response.error.is_empty() {
            Ok(())
        } else {
            Err(FnError::Bundle { worker: worker.to_string(), error: response.error })
        }
    }
}

impl Drop for FnServer {
    fn drop(&mut self) {
        // Ends every harness's control stream: a harness whose control stream ends closes its
        // other streams and exits. The services stay up until it has (for a few seconds at
        // most), so that it sees an orderly end rather than a connection reset.
        let mut links = self.shared.lock();
        links.control.clear();
        links.data.clear();
        let deadline = Instant::now() + Duration::from_secs(5);
        while links.open_streams > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            links = self.shared.changed.wait_timeout(links, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}
