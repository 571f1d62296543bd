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

use tokio::sync::watch;
use weir_sdk::runner::{PipelineResult, PipelineState};
use weir_sdk::{Pipeline, PipelineOptions};

use crate::fn_api::FnServer;
use crate::harness::{Harnesses, Launch};
use crate::plan::{plan, PortablePlan, StageKind};
use crate::proto::job_management::v1 as japi;
use crate::proto::pipeline::v1 as rapi;
use crate::translate::{translate, Harnessed};

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
    cancel_requested: bool,
}

/// A job the server knows.
pub struct Job {
    /// Its id (the preparation id).
    pub id: String,
    /// Its name.
    pub name: String,
    /// The pipeline as submitted.
    pub pipeline: rapi::Pipeline,
    /// Its options as submitted.
    pub options: prost_types::Struct,
    plan: PortablePlan,
    log: Mutex<Log>,
    /// The number of events so far, for the streams waiting on more.
    changed: watch::Sender<usize>,
    /// The harnesses' metrics.
    pub metrics: Arc<crate::metrics::JobMetrics>,
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
    ) -> Result<Arc<Job>, crate::plan::PlanError> {
        let plan = plan(&pipeline)?;
        let job = Arc::new(Job {
            id,
            name,
            pipeline,
            options,
            plan,
            log: Mutex::new(Log::default()),
            changed: watch::channel(0).0,
            metrics: Arc::default(),
        });
        job.set_state(JobState::Stopped);
        Ok(job)
    }

    fn lock(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
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
        }
        self.push(log, Event::State(japi::JobStateEvent { state: state as i32, timestamp: Some(now()) }));
    }

    /// Adds a message.
    pub fn message(&self, importance: Importance, text: impl Into<String>) {
        let log = self.lock();
        let m = japi::JobMessage {
            message_id: format!("{}-{}", self.id, log.events.len()),
            time: humantime_now(),
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
        let result = {
            let mut log = self.lock();
            if is_terminal(log.state) {
                return log.state;
            }
            log.cancel_requested = true;
            log.result.clone()
        };
        match result {
            Some(r) => {
                self.set_state(JobState::Cancelling);
                if let Err(e) = r.cancel() {
                    self.message(Importance::JobMessageWarning, format!("cancelling: {e}"));
                }
            }
            None if self.lock().state == JobState::Stopped as i32 => self.set_state(JobState::Cancelled),
            None => self.set_state(JobState::Cancelling),
        }
        self.lock().state
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

    /// The environments the harnesses run.
    fn environments(&self) -> BTreeSet<String> {
        let sdk = |k: &StageKind| match k {
            StageKind::Sdk { environment } => Some(environment.clone()),
            _ => None,
        };
        self.plan.stages.iter().filter_map(|s| sdk(&s.kind)).collect()
    }

    fn run(&self, config: &RunConfig) -> Result<PipelineState, String> {
        let server = Arc::new(FnServer::start().map_err(|e| e.to_string())?);
        let components = self.plan.pipeline.components.as_ref().ok_or("the pipeline has no components")?;
        let mut workers = HashMap::new();
        let mut harnesses = Vec::new();
        for env in self.environments() {
            let e = components.environments.get(&env).ok_or_else(|| format!("no environment '{env}'"))?;
            let launch = Launch::of(e, &config.python)?;
            let ids: Vec<String> = (1..=config.sdk_workers.max(1)).map(|k| format!("{}-{env}-{k}", self.id)).collect();
            self.message(Importance::JobMessageBasic, format!("starting {} SDK harness(es) for {env}", ids.len()));
            harnesses
                .push(Harnesses::start(&launch, &server, &ids, config.connect_timeout).map_err(|e| e.to_string())?);
            workers.insert(env, ids);
        }
        let mut options = PipelineOptions::from_args(&config.weir_args).map_err(|e| e.to_string())?;
        options.job_name = self.name.clone();
        let pipeline = Pipeline::new(options);
        let harnessed = Harnessed {
            server,
            workers,
            bundle_bytes: config.bundle_bytes,
            timeout: config.bundle_timeout,
            metrics: self.metrics.clone(),
        };
        translate(&self.plan, &harnessed, &pipeline).map_err(|e| e.to_string())?;
        let result: Arc<dyn PipelineResult> = Arc::from(pipeline.run().map_err(|e| e.to_string())?);
        let cancel_now = {
            let mut log = self.lock();
            log.result = Some(result.clone());
            log.cancel_requested
        };
        if cancel_now {
            let _ = result.cancel();
        } else {
            self.set_state(JobState::Running);
        }
        let outcome = result.wait_until_finish(None).map_err(|e| e.to_string());
        // The harnesses stop only after the pipeline no longer needs them.
        drop(harnesses);
        outcome
    }
}

/// A state's name, as Beam spells it.
pub fn state_name(state: i32) -> &'static str {
    JobState::try_from(state).map_or("UNKNOWN", |s| s.as_str_name())
}

/// The time now, as a job message's time: seconds and nanoseconds since the epoch.
fn humantime_now() -> String {
    let t = now();
    format!("{}.{:09}", t.seconds, t.nanos)
}
