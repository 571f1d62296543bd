//! The worker side of the Fn API: the services an SDK harness connects to, the harnesses Weir
//! starts, and bundles sent to them.
//!
//! A harness (Beam Python's `sdk_worker_main`, started by Weir or by the submitting process)
//! opens a control stream, a data stream and a logging stream to the endpoint of [`FnServer`],
//! naming itself by the `worker_id` header. One file per service: [`control`] (instructions and
//! their answers), [`data`] (elements and timers), [`state`] (side inputs and user state),
//! [`logging`] (harness logs into Weir's `tracing` output) and [`provision`] (what a harness asks
//! for when it starts). [`bundle`] is one bundle's life: [`FnServer::process_bundle`] sends a
//! `ProcessBundleRequest` naming the stage's descriptor (which the harness fetches once with
//! `GetProcessBundleDescriptor`), the bundle's input bytes on the data stream, and waits for
//! every output's last byte and the harness's response. [`harness`] starts harnesses as a
//! pipeline's environment says, [`user_state`] serves a stateful stage's state and timers from
//! Weir's keyed state, and [`metrics`] sums the harnesses' MonitoringInfos for a job.
//!
//! The gRPC services run on a small tokio runtime of their own; the calls of this module block,
//! as an operator's do.

pub mod bounded_trie;
pub mod bundle;
pub mod control;
pub mod data;
pub mod harness;
pub mod logging;
pub mod metrics;
pub mod provision;
pub mod state;
pub mod user_state;

pub use bundle::{BundleInput, BundleOutput, BundleRequest, Port, Started};
pub use state::{get_response, state_key_window, ByKey, SideInputKey, SideInputs, UserState};

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use crate::proto::fn_execution::v1 as fapi;
use crate::Error;
use fapi::beam_fn_control_server::BeamFnControlServer;
use fapi::beam_fn_data_server::BeamFnDataServer;
use fapi::beam_fn_logging_server::BeamFnLoggingServer;
use fapi::beam_fn_state_server::BeamFnStateServer;
use fapi::provision_service_server::ProvisionServiceServer;

/// A gRPC service that takes and sends messages of any size, as Beam's own servers do (tonic
/// refuses messages over 4 MB by default: a harness's data message, or a pipeline with large
/// pickled functions, is bigger).
#[macro_export]
macro_rules! unlimited {
    ($service:expr) => {
        $service.max_decoding_message_size(usize::MAX).max_encoding_message_size(usize::MAX)
    };
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
    /// Where harnesses fetch their dependencies (the job server's artifact retrieval service).
    artifact_endpoint: Option<String>,
    /// Per worker id, the dependencies its environment staged, which it fetches when it starts.
    dependencies: HashMap<String, Vec<crate::proto::pipeline::v1::ArtifactInformation>>,
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
    ) -> Result<MutexGuard<'_, Links>, Error> {
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
                    return Err(Error::Gone { worker: worker.to_string(), why: why.clone() });
                }
                let left = Duration::from_secs(2).saturating_sub(since.elapsed()).max(Duration::from_millis(10));
                links = self.changed.wait_timeout(links, left).unwrap_or_else(|e| e.into_inner()).0;
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout { worker: worker.to_string(), what, secs: timeout.as_secs() });
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

impl FnServer {
    /// Starts the control, data and logging services on a free port of 127.0.0.1.
    pub fn start() -> Result<FnServer, Error> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("weir-fn-api")
            .enable_all()
            .build()
            .map_err(|e| Error::Start(e.to_string()))?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| Error::Start(e.to_string()))?;
        let address = listener.local_addr().map_err(|e| Error::Start(e.to_string()))?.to_string();
        listener.set_nonblocking(true).map_err(|e| Error::Start(e.to_string()))?;
        let shared = Arc::new(Shared::default());
        let services = Arc::new(Services(shared.clone()));
        let incoming = {
            let _in_runtime = runtime.enter();
            let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| Error::Start(e.to_string()))?;
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

    /// Harnesses fetch their dependencies from the artifact retrieval service at `endpoint`.
    pub fn set_artifact_endpoint(&self, endpoint: Option<String>) {
        self.shared.lock().artifact_endpoint = endpoint;
    }

    /// Where harnesses fetch their dependencies, if anywhere.
    pub fn artifact_endpoint(&self) -> Option<String> {
        self.shared.lock().artifact_endpoint.clone()
    }

    /// Harness `worker` fetches `dependencies` when it starts (the provision service says so).
    pub fn set_dependencies(&self, worker: &str, dependencies: Vec<crate::proto::pipeline::v1::ArtifactInformation>) {
        self.shared.lock().dependencies.insert(worker.to_string(), dependencies);
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
    pub fn wait_for_worker(&self, worker: &str, timeout: Duration) -> Result<(), Error> {
        self.shared.wait_for(worker, timeout, "did not connect", |l| l.control.contains_key(worker)).map(drop)
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
