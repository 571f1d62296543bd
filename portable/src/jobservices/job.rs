//! A submitted job: its plan, its state and messages as the Job API reports them, and its run
//! on a Weir runner.
//!
//! Prepare plans the pipeline (refusing what Weir cannot run) and makes a job in state STOPPED,
//! whose id is the preparation id, so a client may watch its state and messages before it runs,
//! as Beam's clients do. Run starts a thread that starts the Fn API services and the harnesses
//! of each environment the stages run in, builds the Weir pipeline ([`crate::translate`]) and
//! runs it on the configured runner: STARTING, RUNNING, then DONE, FAILED (with the error, a
//! harness's Python traceback say, as an error message first) or CANCELLED.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use prost::Message;
use tokio::sync::watch;
use weir_sdk::runner::{PipelineResult, PipelineState};
use weir_sdk::{Pipeline, PipelineOptions};

use crate::jobservices::artifacts::Staged;
use crate::preprocess::{plan, PortablePlan, StageKind};
use crate::proto::job_management::v1 as japi;
use crate::proto::pipeline::v1 as rapi;
use crate::translate::{translate, Harnessed};
use crate::worker::harness::{Harnesses, Launch};
use crate::worker::FnServer;
use crate::Error;

pub use super::options::{job_weir_args, option_name, several_processes, WEIR_OPTION_PREFIX};
pub use japi::job_message::MessageImportance as Importance;
pub use japi::job_state::Enum as JobState;

/// How the job server runs jobs.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Weir's own pipeline flags (`--runner`, `--parallelism`, ...), for every job.
    pub weir_args: Vec<String>,
    /// The Python that starts PROCESS harnesses.
    pub python: String,
    /// How many harnesses each environment gets.
    pub sdk_workers: usize,
    /// How long a harness may take to connect.
    pub connect_timeout: Duration,
    /// How many bytes of input make a bundle at most.
    pub bundle_bytes: usize,
    /// How long a bundle may take.
    pub bundle_timeout: Duration,
    /// Whether each job runs in processes of its own (a runner with several processes, each
    /// of which runs the same program).
    pub separate_process: bool,
    /// The job server's artifact retrieval service, where harnesses that Weir starts fetch
    /// their environment's dependencies.
    pub artifact_endpoint: Option<String>,
}

impl RunConfig {
    /// The flags that give a job's own process this configuration.
    fn subprocess_args(&self) -> Vec<String> {
        let mut args = vec!["--python".to_string(), self.python.clone()];
        args.extend(["--sdk-workers".to_string(), self.sdk_workers.to_string()]);
        if let Some(endpoint) = &self.artifact_endpoint {
            args.extend(["--artifact-endpoint".to_string(), endpoint.clone()]);
        }
        args.extend(self.weir_args.iter().cloned());
        args
    }
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            weir_args: Vec::new(),
            python: "python3".into(),
            sdk_workers: 1,
            connect_timeout: Duration::from_secs(60),
            bundle_bytes: 4 << 20,
            bundle_timeout: Duration::from_secs(24 * 3600),
            separate_process: false,
            artifact_endpoint: None,
        }
    }
}

/// One event of a job: a state change or a message.
#[derive(Debug, Clone)]
pub enum Event {
    /// The job entered a state.
    State(japi::JobStateEvent),
    /// A message about the job.
    Message(japi::JobMessage),
}

#[derive(Default)]
struct Log {
    events: Vec<Event>,
    state: i32,
    /// The run's result, while it runs (to cancel it, and read its metrics).
    result: Option<Arc<dyn PipelineResult>>,
    /// The Fn API services, while the job runs (a cancel ends the bundles waiting on them).
    server: Option<Arc<FnServer>>,
    /// The job's own process, while it runs in one.
    process: Option<Arc<Mutex<std::process::Child>>>,
    cancel_requested: bool,
    /// When the job ended, once it has.
    ended: Option<std::time::Instant>,
}

/// What a job was given, kept until it ends: the pipeline and its plan.
struct Submitted {
    pipeline: rapi::Pipeline,
    plan: PortablePlan,
}

/// A job the server knows.
pub struct Job {
    /// Its id (the preparation id).
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its options as submitted.
    pub options: prost_types::Struct,
    /// The pipeline and its plan, until the job ends: a finished job keeps only its state,
    /// messages and metrics, so the server's memory does not grow with every job it ran.
    submitted: Mutex<Option<Arc<Submitted>>>,
    log: Mutex<Log>,
    /// The number of events so far, for the streams waiting on more.
    changed: watch::Sender<usize>,
    /// The harnesses' metrics.
    pub metrics: Arc<crate::worker::metrics::JobMetrics>,
    /// What was staged for its environments, until it ends.
    staged: Mutex<Option<Staged>>,
}

fn now() -> prost_types::Timestamp {
    prost_types::Timestamp::from(SystemTime::now())
}

/// Whether `state` ends a job.
pub fn is_terminal(state: i32) -> bool {
    [JobState::Done, JobState::Failed, JobState::Cancelled, JobState::Drained].iter().any(|s| *s as i32 == state)
}

impl Job {
    /// Plans `pipeline` (an error names what Weir cannot run) and makes job `id` of it, STOPPED.
    pub fn prepare(
        id: String,
        name: String,
        pipeline: rapi::Pipeline,
        options: prost_types::Struct,
    ) -> Result<Arc<Job>, crate::Error> {
        let plan = plan(&pipeline)?;
        check_environments(&plan)?;
        let job = Arc::new(Job {
            id,
            name,
            options,
            submitted: Mutex::new(Some(Arc::new(Submitted { pipeline, plan }))),
            log: Mutex::new(Log::default()),
            changed: watch::channel(0).0,
            metrics: Arc::default(),
            staged: Mutex::new(None),
        });
        job.set_state(JobState::Stopped);
        Ok(job)
    }

    /// Pipeline option `name` as submitted (`beam:option:<name>:v1`), as text.
    pub fn option(&self, name: &str) -> Option<String> {
        use prost_types::value::Kind;
        let v = self.options.fields.get(&format!("beam:option:{name}:v1"))?;
        match v.kind.as_ref()? {
            Kind::StringValue(s) => Some(s.clone()),
            Kind::NumberValue(n) => Some(n.to_string()),
            Kind::BoolValue(b) => Some(b.to_string()),
            _ => None,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn submitted(&self) -> Option<Arc<Submitted>> {
        self.submitted.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The pipeline as submitted, until the job ends.
    pub fn pipeline(&self) -> Option<rapi::Pipeline> {
        self.submitted().map(|s| s.pipeline.clone())
    }

    /// Each environment's dependencies as the pipeline lists them, until the job ends.
    pub fn dependencies(&self) -> Option<Vec<(String, Vec<rapi::ArtifactInformation>)>> {
        let submitted = self.submitted()?;
        let c = submitted.pipeline.components.as_ref()?;
        Some(c.environments.iter().map(|(id, env)| (id.clone(), env.dependencies.clone())).collect())
    }

    /// Keeps what was staged for the job's environments, until the job ends.
    pub fn set_staged(&self, staged: Staged) -> Result<(), String> {
        if is_terminal(self.lock().state) {
            return Err(format!("job '{}' ended before its artifacts were staged", self.id));
        }
        *self.staged.lock().unwrap_or_else(|e| e.into_inner()) = Some(staged);
        Ok(())
    }

    /// Environment `env`'s dependencies as staged: files of the job server's artifact store.
    pub fn staged_dependencies(&self, env: &str) -> Vec<rapi::ArtifactInformation> {
        let staged = self.staged.lock().unwrap_or_else(|e| e.into_inner());
        staged.as_ref().and_then(|s| s.environments.get(env).cloned()).unwrap_or_default()
    }

    /// Gives each environment of `pipeline` its dependencies as staged (files of the job
    /// server's store), in place of what the client named.
    fn with_staged(&self, pipeline: &mut rapi::Pipeline) {
        let Some(c) = pipeline.components.as_mut() else { return };
        for (id, env) in c.environments.iter_mut() {
            let staged = self.staged_dependencies(id);
            if !staged.is_empty() {
                env.dependencies = staged;
            }
        }
    }

    /// When the job ended, if it has.
    pub fn ended(&self) -> Option<std::time::Instant> {
        self.lock().ended
    }

    fn push(&self, mut log: MutexGuard<'_, Log>, event: Event) {
        log.events.push(event);
        let n = log.events.len();
        drop(log);
        self.changed.send_replace(n);
    }

    /// Enters `state` (a terminal state is never left).
    pub fn set_state(&self, state: JobState) {
        let mut log = self.lock();
        if is_terminal(log.state) {
            return;
        }
        log.state = state as i32;
        if is_terminal(log.state) {
            log.result = None;
            log.server = None;
            log.ended = Some(std::time::Instant::now());
            // A run still going holds its own reference until it returns.
            *self.submitted.lock().unwrap_or_else(|e| e.into_inner()) = None;
            // The job's hold on its staged artifacts ends with it.
            *self.staged.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
        self.push(log, Event::State(japi::JobStateEvent { state: state as i32, timestamp: Some(now()) }));
    }

    /// Adds a message.
    pub fn message(&self, importance: Importance, text: impl Into<String>) {
        let log = self.lock();
        let m = japi::JobMessage {
            message_id: format!("{}-{}", self.id, log.events.len()),
            time: message_time(),
            importance: importance as i32,
            message_text: text.into(),
        };
        self.push(log, Event::Message(m));
    }

    /// The current state.
    pub fn state(&self) -> japi::JobStateEvent {
        self.state_and_seen().0
    }

    /// The current state, and how many events led to it.
    pub fn state_and_seen(&self) -> (japi::JobStateEvent, usize) {
        let log = self.lock();
        let at = log.events.iter().rev().find_map(|e| match e {
            Event::State(s) => s.timestamp,
            Event::Message(_) => None,
        });
        (japi::JobStateEvent { state: log.state, timestamp: at }, log.events.len())
    }

    /// The events from `from` on, and whether the job has ended.
    pub fn events(&self, from: usize) -> (Vec<Event>, bool) {
        let log = self.lock();
        (log.events.get(from..).unwrap_or_default().to_vec(), is_terminal(log.state))
    }

    /// A receiver told of every new event.
    pub fn watch(&self) -> watch::Receiver<usize> {
        self.changed.subscribe()
    }

    /// The run's result while it runs.
    pub fn result(&self) -> Option<Arc<dyn PipelineResult>> {
        self.lock().result.clone()
    }

    /// Cancels the job: a running pipeline is cancelled, one not started yet never starts.
    pub fn cancel(&self) -> i32 {
        let (result, process, server) = {
            let mut log = self.lock();
            if is_terminal(log.state) {
                return log.state;
            }
            log.cancel_requested = true;
            (log.result.clone(), log.process.clone(), log.server.clone())
        };
        if let Some(p) = process {
            self.set_state(JobState::Cancelling);
            if let Err(e) = p.lock().unwrap_or_else(|e| e.into_inner()).kill() {
                self.message(Importance::JobMessageWarning, format!("cancelling: {e}"));
            }
            return self.lock().state;
        }
        match result {
            Some(r) => {
                self.set_state(JobState::Cancelling);
                if let Err(e) = r.cancel() {
                    self.message(Importance::JobMessageWarning, format!("cancelling: {e}"));
                }
                // Bundles running on the harnesses end now, rather than when the user's code
                // is done with them.
                if let Some(server) = server {
                    server.abort("the job was cancelled");
                }
            }
            None if self.lock().state == JobState::Stopped as i32 => self.set_state(JobState::Cancelled),
            None => self.set_state(JobState::Cancelling),
        }
        self.lock().state
    }

    /// Drains the job: its sources stop, a splittable DoFn's open-ended rest is cut short, the
    /// watermark goes to the end of time so every window fires, and the job ends DONE. The
    /// job's state after asking; why it cannot be drained otherwise.
    pub fn drain(&self) -> Result<i32, String> {
        let (result, process) = {
            let log = self.lock();
            if is_terminal(log.state) {
                return Ok(log.state);
            }
            (log.result.clone(), log.process.clone())
        };
        if let Some(p) = process {
            // Its first process drains the run on every process of the cluster.
            let mut child = p.lock().unwrap_or_else(|e| e.into_inner());
            let stdin = child.stdin.as_mut().ok_or_else(|| format!("job '{}' cannot be told to drain", self.id))?;
            std::io::Write::write_all(stdin, format!("{DRAIN}\n").as_bytes())
                .and_then(|()| std::io::Write::flush(stdin))
                .map_err(|e| format!("telling job '{}' to drain: {e}", self.id))?;
            drop(child);
            self.set_state(JobState::Draining);
            self.message(Importance::JobMessageBasic, "draining: the sources stop, and every window fires");
            return Ok(self.lock().state);
        }
        let Some(result) = result else {
            return Err(format!("job '{}' is not running yet, so there is nothing to drain", self.id));
        };
        self.set_state(JobState::Draining);
        self.message(Importance::JobMessageBasic, "draining: the sources stop, and every window fires");
        result.drain().map_err(|e| format!("draining job '{}': {e}", self.id))?;
        Ok(self.lock().state)
    }

    /// Runs the job on a thread of its own, as `config` says.
    pub fn start(self: &Arc<Self>, config: Arc<RunConfig>) -> Result<(), String> {
        {
            let log = self.lock();
            if log.state != JobState::Stopped as i32 {
                return Err(format!("job '{}' has already run (it is {})", self.id, state_name(log.state)));
            }
        }
        self.set_state(JobState::Starting);
        let job = self.clone();
        let mut config = (*config).clone();
        // Weir flags the job gives (`--weir_runner=direct`) replace the server's.
        config.weir_args = job_weir_args(&config.weir_args, &self.options);
        config.separate_process = several_processes(&config.weir_args);
        // Beam's `--sdk_worker_parallelism` asks for more harnesses than the server's
        // `--sdk-workers` (its default, 1, asks for nothing).
        if let Some(n) = self.option("sdk_worker_parallelism").and_then(|v| v.parse::<usize>().ok()) {
            config.sdk_workers = config.sdk_workers.max(n);
        }
        std::thread::Builder::new()
            .name(format!("weir-job-{}", self.id))
            .spawn(move || job.execute(&config))
            .map(drop)
            .map_err(|e| format!("cannot start the job's thread: {e}"))
    }

    fn execute(&self, config: &RunConfig) {
        match self.run(config) {
            Ok(PipelineState::Done) => self.set_state(JobState::Done),
            Ok(PipelineState::Cancelled) => self.set_state(JobState::Cancelled),
            Ok(other) => {
                self.message(Importance::JobMessageError, format!("the pipeline ended {other:?}"));
                self.set_state(JobState::Failed)
            }
            Err(e) => {
                let cancelled = self.lock().cancel_requested;
                if cancelled {
                    self.set_state(JobState::Cancelled);
                } else {
                    tracing::error!("job {} failed: {e}", self.id);
                    self.message(Importance::JobMessageError, e);
                    self.set_state(JobState::Failed);
                }
            }
        }
    }

    fn run(&self, config: &RunConfig) -> Result<PipelineState, String> {
        let submitted = self.submitted().ok_or_else(|| format!("job '{}' has ended before it ran", self.id))?;
        if config.separate_process {
            let mut pipeline = submitted.pipeline.clone();
            self.with_staged(&mut pipeline);
            return self.run_in_process_group(config, &pipeline);
        }
        let mut plan = submitted.plan.clone();
        self.with_staged(&mut plan.pipeline);
        let say = |m: String| self.message(Importance::JobMessageBasic, m);
        let started = |result: Arc<dyn PipelineResult>, server: Arc<FnServer>| {
            let cancel_now = {
                let mut log = self.lock();
                log.result = Some(result.clone());
                log.server = Some(server.clone());
                log.cancel_requested
            };
            if cancel_now {
                let _ = result.cancel();
                server.abort("the job was cancelled");
            } else {
                self.set_state(JobState::Running);
            }
        };
        let run = Run {
            plan: &plan,
            options: &self.options,
            job: &self.id,
            name: &self.name,
            config,
            metrics: self.metrics.clone(),
        };
        run.execute(&say, &started)
    }

    /// Runs the job in processes of its own (`weir-job-server --run-job FILE`), for a runner
    /// whose processes each run the same program (timely's local cluster): each process reads
    /// the job from the file, starts its own harnesses and runs its part; the first reports
    /// to this one on its standard output, and every one leaves its harness metrics in a file
    /// beside the job's.
    fn run_in_process_group(&self, config: &RunConfig, pipeline: &rapi::Pipeline) -> Result<PipelineState, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("cannot make a directory for the job: {e}"))?;
        let file = dir.path().join(format!("{}.binpb", self.id));
        let request = japi::PrepareJobRequest {
            pipeline: Some(pipeline.clone()),
            pipeline_options: Some(self.options.clone()),
            job_name: self.name.clone(),
        };
        std::fs::write(&file, prost::Message::encode_to_vec(&request))
            .map_err(|e| format!("cannot write the job: {e}"))?;
        let exe = std::env::current_exe().map_err(|e| format!("cannot find weir-job-server: {e}"))?;
        let mut child = std::process::Command::new(exe)
            .arg("--run-job")
            .arg(&file)
            .args(config.subprocess_args())
            // Its standard input asks it to drain.
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start the job's process: {e}"))?;
        let stdout = child.stdout.take().ok_or("no output from the job's process")?;
        let child = Arc::new(Mutex::new(child));
        let cancelled = {
            let mut log = self.lock();
            log.process = Some(child.clone());
            log.cancel_requested
        };
        if cancelled {
            let _ = child.lock().unwrap_or_else(|e| e.into_inner()).kill();
        }
        let mut error = None;
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
            match line.split_once(' ') {
                Some((REPORT_RUNNING, _)) => self.set_state(JobState::Running),
                Some((REPORT_MESSAGE, m)) => self.message(Importance::JobMessageBasic, unescape(m)),
                Some((REPORT_ERROR, e)) => error = Some(unescape(e)),
                _ => {}
            }
        }
        // Its output ends as it exits (or is killed, cancelled).
        let status = loop {
            let status = child.lock().unwrap_or_else(|e| e.into_inner()).try_wait();
            match status {
                Ok(Some(status)) => break status,
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(format!("cannot wait for the job's process: {e}")),
            }
        };
        self.lock().process = None;
        for entry in std::fs::read_dir(dir.path()).map_err(|e| e.to_string())?.flatten() {
            if entry.file_name().to_string_lossy().starts_with("metrics-") {
                let bytes = std::fs::read(entry.path()).map_err(|e| e.to_string())?;
                let infos = japi::MetricResults::decode(bytes.as_slice()).map_err(|e| e.to_string())?;
                self.metrics.add(&infos.attempted);
            }
        }
        match (status.success(), error) {
            (true, _) => Ok(PipelineState::Done),
            (false, _) if self.lock().cancel_requested => Ok(PipelineState::Cancelled),
            (false, Some(e)) => Err(e),
            (false, None) => Err(format!("the job's process failed ({status})")),
        }
    }
}

/// A line a job's own process reports: the job runs.
const REPORT_RUNNING: &str = "weir-job:running";
/// What the job server writes to a process group's first process to drain the job.
const DRAIN: &str = "drain";
/// A line a job's own process reports: a message.
const REPORT_MESSAGE: &str = "weir-job:message";
/// A line a job's own process reports: why it failed.
const REPORT_ERROR: &str = "weir-job:error";

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('n') => out.push('\n'),
                Some(other) => out.push(other),
                None => {}
            },
            (c, false) => out.push(c),
        }
    }
    out
}

/// One run of a planned pipeline on Weir.
struct Run<'a> {
    plan: &'a PortablePlan,
    /// The job's pipeline options, for the harnesses.
    options: &'a prost_types::Struct,
    job: &'a str,
    name: &'a str,
    config: &'a RunConfig,
    metrics: Arc<crate::worker::metrics::JobMetrics>,
}

impl Run<'_> {
    /// The environments the harnesses run.
    fn environments(&self) -> BTreeSet<String> {
        let sdk = |k: &StageKind| match k {
            StageKind::Sdk { environment } => Some(environment.clone()),
            _ => None,
        };
        self.plan.stages.iter().filter_map(|s| sdk(&s.kind)).collect()
    }

    /// Starts the Fn API services and the harnesses, builds the Weir pipeline and runs it,
    /// telling `started` its result once it runs; its end state.
    fn execute(
        &self,
        say: &dyn Fn(String),
        started: &dyn Fn(Arc<dyn PipelineResult>, Arc<FnServer>),
    ) -> Result<PipelineState, String> {
        let server = Arc::new(FnServer::start().map_err(|e| e.to_string())?);
        server.set_pipeline_options(self.options.clone());
        server.set_artifact_endpoint(self.config.artifact_endpoint.clone());
        let services = server.clone();
        let components = self.plan.pipeline.components.as_ref().ok_or("the pipeline has no components")?;
        let mut workers = HashMap::new();
        let mut harnesses = Vec::new();
        // Harness ids are unique across the processes of a job (a worker pool serves them all).
        let process = std::process::id();
        for env in self.environments() {
            let e = components.environments.get(&env).ok_or_else(|| format!("no environment '{env}'"))?;
            let launch = Launch::of(e, &self.config.python)?;
            let n = self.config.sdk_workers.max(1);
            let ids: Vec<String> = (1..=n).map(|k| format!("{}-{env}-{k}-{process}", self.job)).collect();
            for id in &ids {
                server.set_dependencies(id, e.dependencies.clone());
            }
            say(format!("starting {} SDK harness(es) for {env}", ids.len()));
            let started = Harnesses::start(&launch, &server, &ids, self.config.connect_timeout);
            harnesses.push(started.map_err(|e| e.to_string())?);
            workers.insert(env, ids);
        }
        let mut options = PipelineOptions::from_args(&self.config.weir_args).map_err(|e| e.to_string())?;
        options.job_name = self.name.to_string();
        say(format!("running on Weir's {} runner", options.runner));
        let pipeline = Pipeline::new(options);
        let harnessed = Harnessed {
            server,
            workers,
            bundle_bytes: self.config.bundle_bytes,
            timeout: self.config.bundle_timeout,
            metrics: self.metrics.clone(),
        };
        translate(self.plan, &harnessed, &pipeline).map_err(|e| e.to_string())?;
        let began = std::time::Instant::now();
        let result: Arc<dyn PipelineResult> = Arc::from(pipeline.run().map_err(|e| e.to_string())?);
        started(result.clone(), services);
        let outcome = result.wait_until_finish(None).map_err(|e| e.to_string());
        let summary = self.metrics.data_plane.summary(began.elapsed().as_secs_f64());
        tracing::info!("job {}: {summary}", self.job);
        say(summary);
        // The harnesses stop only after the pipeline no longer needs them.
        drop(harnesses);
        outcome
    }
}

/// `weir-job-server --run-job FILE`: runs the job in `file` (a `PrepareJobRequest`) as one
/// process of a job's process group, reporting on standard output and leaving its harness
/// metrics beside the file; the exit status says whether it succeeded.
pub fn run_job_file(file: &std::path::Path, config: &RunConfig) -> i32 {
    let report = |tag: &str, text: &str| println!("{tag} {}", escape(text));
    let outcome = (|| -> Result<PipelineState, String> {
        let bytes = std::fs::read(file).map_err(|e| format!("cannot read job {}: {e}", file.display()))?;
        let request = japi::PrepareJobRequest::decode(bytes.as_slice()).map_err(|e| e.to_string())?;
        let pipeline = request.pipeline.ok_or("a job without a pipeline")?;
        let plan = plan(&pipeline).map_err(|e| e.to_string())?;
        let metrics = Arc::new(crate::worker::metrics::JobMetrics::default());
        let id = file.file_stem().map_or("job".into(), |n| n.to_string_lossy().to_string());
        let options = request.pipeline_options.clone().unwrap_or_default();
        let run =
            Run { plan: &plan, options: &options, job: &id, name: &request.job_name, config, metrics: metrics.clone() };
        // The job server asks for a drain on standard input (`drain`, a line).
        let running: Arc<Mutex<Option<Arc<dyn PipelineResult>>>> = Arc::default();
        let asked = running.clone();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::stdin().lock()).map_while(Result::ok) {
                let result = asked.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if let (DRAIN, Some(r)) = (line.trim(), result) {
                    if let Err(e) = r.drain() {
                        report(REPORT_MESSAGE, &format!("draining: {e}"));
                    }
                }
            }
        });
        let started = |result: Arc<dyn PipelineResult>, _: Arc<FnServer>| {
            *running.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
            report(REPORT_RUNNING, "")
        };
        let state = run.execute(&|m| report(REPORT_MESSAGE, &m), &started);
        let infos = japi::MetricResults { attempted: metrics.monitoring_infos(), committed: Vec::new() };
        let name = format!("metrics-{}", std::process::id());
        if let Some(dir) = file.parent() {
            std::fs::write(dir.join(name), prost::Message::encode_to_vec(&infos)).map_err(|e| e.to_string())?;
        }
        state
    })();
    match outcome {
        Ok(PipelineState::Done) => 0,
        Ok(other) => {
            report(REPORT_ERROR, &format!("the pipeline ended {other:?}"));
            1
        }
        Err(e) => {
            report(REPORT_ERROR, &e);
            1
        }
    }
}

/// A state's name, as Beam spells it.
pub fn state_name(state: i32) -> &'static str {
    JobState::try_from(state).map_or("UNKNOWN", |s| s.as_str_name())
}

/// The time now, as a job message's time: seconds and nanoseconds since the epoch.
fn message_time() -> String {
    let t = now();
    format!("{}.{:09}", t.seconds, t.nanos)
}

/// Checks that Weir can start every environment a stage of `plan` runs in (LOOPBACK, EXTERNAL
/// or PROCESS): a job server refuses any other at Prepare, naming a transform that needs it,
/// rather than when the job runs.
pub fn check_environments(plan: &crate::preprocess::PortablePlan) -> Result<(), Error> {
    let c = plan.pipeline.components.as_ref().ok_or_else(|| Error::Malformed("no components".into()))?;
    for stage in &plan.stages {
        let crate::preprocess::StageKind::Sdk { environment } = &stage.kind else { continue };
        let t = stage.transforms.first().and_then(|t| c.transforms.get(t));
        // A stage of no transforms only re-encodes, in an environment another stage runs in.
        let Some(t) = t else { continue };
        let env = c.environments.get(environment).ok_or_else(|| {
            Error::Malformed(format!(
                "transform '{}' runs in environment '{environment}', which the pipeline lacks",
                t.unique_name
            ))
        })?;
        if let Err(why) = crate::worker::harness::Launch::of(env, "python3") {
            return Err(crate::preprocess::unsupported(t, format!("it runs in environment '{environment}': {why}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost_types::{value::Kind, Value};

    #[test]
    fn a_job_s_weir_options_replace_the_server_s_flags() {
        weir::register();
        let text = |s: &str| Value { kind: Some(Kind::StringValue(s.into())) };
        let mut options = prost_types::Struct::default();
        options.fields.insert("beam:option:weir_parallelism:v1".into(), text("4"));
        options.fields.insert("beam:option:weir_explain:v1".into(), text("true"));
        options.fields.insert("beam:option:job_name:v1".into(), text("not Weir's"));
        let base: Vec<String> = ["--runner", "microbatch", "--parallelism", "2", "--max-batch-size=10"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let args = job_weir_args(&base, &options);
        assert_eq!(args, ["--runner", "microbatch", "--max-batch-size=10", "--explain", "--parallelism", "4"]);
        assert!(PipelineOptions::from_args(&args).is_ok(), "{args:?}");
        assert!(several_processes(&["--processes".into(), "2".into()]));
        assert!(!several_processes(&["--processes=1".into()]));
        assert_eq!(option_name("--max-batch-size"), "weir_max_batch_size");
    }
}
