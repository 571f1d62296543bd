//! Beam's Job API over gRPC: what a Beam SDK's `PortableRunner` talks to.
//!
//! Prepare plans the submitted pipeline and refuses, naming the transform and URN, what Weir
//! cannot run, and offers this server's address as the artifact staging endpoint (the staging
//! and retrieval services of [`crate::jobservices::artifacts`] share the job service's port).
//! Run starts the prepared job; GetState,
//! GetStateStream (the current state at once, then every change until the job ends),
//! GetMessageStream (messages and state changes until the job ends), Cancel, GetJobMetrics,
//! GetJobs, GetPipeline and DescribePipelineOptions answer as Beam's job services do.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::jobservices::artifacts::{ArtifactStore, Retrieval, Staged, Staging, StagingTarget};
use crate::jobservices::job::{Event, Job, RunConfig};
use crate::proto::job_management::v1 as japi;
use crate::proto::pipeline::v1 as rapi;
use japi::artifact_retrieval_service_server::ArtifactRetrievalServiceServer;
use japi::artifact_staging_service_server::ArtifactStagingServiceServer;
use japi::job_service_server::{JobService, JobServiceServer};

/// How many finished jobs the service remembers by default, as Beam's job service does.
pub const MAX_FINISHED_JOBS: usize = 10;

/// How many bytes a GetJobs answer may take: gRPC's default message limit (4 MiB) less room for
/// the frame.
const GET_JOBS_BYTES: usize = (4 << 20) - (64 << 10);

/// The job service's state: the jobs not yet started or running, and the newest finished ones.
pub struct Jobs {
    jobs: Mutex<HashMap<String, Arc<Job>>>,
    next: AtomicU64,
    config: Arc<RunConfig>,
    max_finished: usize,
    /// The staged artifacts of every job.
    artifacts: Arc<ArtifactStore>,
    /// This server's address, for the artifact staging endpoint.
    endpoint: OnceLock<String>,
}

impl Jobs {
    /// A service running jobs as `config` says, with their artifacts in `artifacts`,
    /// remembering [`MAX_FINISHED_JOBS`] finished ones.
    pub fn new(config: RunConfig, artifacts: Arc<ArtifactStore>) -> Self {
        Self::remembering(config, artifacts, MAX_FINISHED_JOBS)
    }

    /// A service running jobs as `config` says, with their artifacts in `artifacts`,
    /// remembering the `max_finished` newest finished jobs (their state, messages and metrics;
    /// a job frees its pipeline and its artifacts when it ends).
    pub fn remembering(config: RunConfig, artifacts: Arc<ArtifactStore>, max_finished: usize) -> Self {
        Jobs {
            jobs: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            config: Arc::new(config),
            max_finished,
            artifacts,
            endpoint: OnceLock::new(),
        }
    }

    fn job(&self, id: &str) -> Result<Arc<Job>, Status> {
        let jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        jobs.get(id).cloned().ok_or_else(|| {
            Status::not_found(format!(
                "no job '{id}' (the job server remembers the {} newest finished jobs)",
                self.max_finished
            ))
        })
    }

    /// Forgets the finished jobs past the newest `max_finished`.
    fn forget_old(&self) {
        let mut jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        let mut finished: Vec<(std::time::Instant, String)> =
            jobs.iter().filter_map(|(id, j)| j.ended().map(|at| (at, id.clone()))).collect();
        if finished.len() <= self.max_finished {
            return;
        }
        finished.sort();
        let forget = finished.len() - self.max_finished;
        for (_, id) in finished.into_iter().take(forget) {
            jobs.remove(&id);
            tracing::debug!("forgot finished job {id}");
        }
    }

    /// The jobs, newest first.
    fn all(&self) -> Vec<Arc<Job>> {
        self.forget_old();
        let mut jobs: Vec<Arc<Job>> = self.jobs.lock().unwrap_or_else(|e| e.into_inner()).values().cloned().collect();
        let number = |j: &Job| j.id.trim_start_matches("job-").parse::<u64>().unwrap_or(0);
        jobs.sort_by_key(|j| std::cmp::Reverse(number(j)));
        jobs
    }
}

/// The jobs' infos for GetJobs, within gRPC's message limit: a job whose options would pass it
/// is listed without them (and the log says so).
fn job_infos(jobs: &[Arc<Job>]) -> Vec<japi::JobInfo> {
    use prost::Message;
    let mut infos = Vec::with_capacity(jobs.len());
    let mut bytes = 0;
    for j in jobs {
        let mut info = japi::JobInfo {
            job_id: j.id.clone(),
            job_name: j.name.clone(),
            pipeline_options: Some(j.options.clone()),
            state: j.state().state,
        };
        if bytes + info.encoded_len() + 8 > GET_JOBS_BYTES {
            tracing::warn!("GetJobs lists job {} without its pipeline options, which pass the message limit", j.id);
            info.pipeline_options = None;
        }
        if bytes + info.encoded_len() + 8 > GET_JOBS_BYTES {
            tracing::warn!(
                "GetJobs lists the {} newest jobs of {}: the rest pass the message limit",
                infos.len(),
                jobs.len()
            );
            break;
        }
        bytes += info.encoded_len() + 8;
        infos.push(info);
    }
    infos
}

type EventStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// The events of `job` from the `from`th on as a stream, each made into an item by `pick` (or
/// skipped), ending after the job ends.
fn follow<T: Send + 'static>(job: Arc<Job>, from: usize, pick: fn(Event) -> Option<T>) -> EventStream<T> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        let mut watch = job.watch();
        let mut seen = from;
        loop {
            let (events, ended) = job.events(seen);
            seen += events.len();
            for e in events {
                if let Some(item) = pick(e) {
                    if tx.send(Ok(item)).await.is_err() {
                        return;
                    }
                }
            }
            if ended || watch.changed().await.is_err() {
                return;
            }
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

#[tonic::async_trait]
impl JobService for Jobs {
    async fn prepare(
        &self,
        request: Request<japi::PrepareJobRequest>,
    ) -> Result<Response<japi::PrepareJobResponse>, Status> {
        let r = request.into_inner();
        let pipeline = r.pipeline.ok_or_else(|| Status::invalid_argument("a PrepareJobRequest without a pipeline"))?;
        let id = format!("job-{}", self.next.fetch_add(1, Ordering::Relaxed));
        let name = if r.job_name.is_empty() { id.clone() } else { r.job_name };
        let job = Job::prepare(id.clone(), name, pipeline, r.pipeline_options.unwrap_or_default())
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        self.forget_old();
        self.jobs.lock().unwrap_or_else(|e| e.into_inner()).insert(id.clone(), job);
        tracing::info!("prepared {id}");
        let url = self.endpoint.get().cloned().unwrap_or_default();
        Ok(Response::new(japi::PrepareJobResponse {
            preparation_id: id.clone(),
            artifact_staging_endpoint: Some(rapi::ApiServiceDescriptor { url, authentication: None }),
            staging_session_token: id,
        }))
    }

    async fn run(&self, request: Request<japi::RunJobRequest>) -> Result<Response<japi::RunJobResponse>, Status> {
        let id = request.into_inner().preparation_id;
        let job = self.job(&id)?;
        job.start(self.config.clone()).map_err(Status::failed_precondition)?;
        Ok(Response::new(japi::RunJobResponse { job_id: id }))
    }

    async fn get_jobs(&self, _: Request<japi::GetJobsRequest>) -> Result<Response<japi::GetJobsResponse>, Status> {
        Ok(Response::new(japi::GetJobsResponse { job_info: job_infos(&self.all()) }))
    }

    async fn get_state(
        &self,
        request: Request<japi::GetJobStateRequest>,
    ) -> Result<Response<japi::JobStateEvent>, Status> {
        Ok(Response::new(self.job(&request.into_inner().job_id)?.state()))
    }

    async fn get_pipeline(
        &self,
        request: Request<japi::GetJobPipelineRequest>,
    ) -> Result<Response<japi::GetJobPipelineResponse>, Status> {
        let job = self.job(&request.into_inner().job_id)?;
        let pipeline = job.pipeline().ok_or_else(|| {
            Status::failed_precondition(format!(
                "job '{}' has ended ({}), and the job server keeps no pipeline of a finished job",
                job.id,
                crate::jobservices::job::state_name(job.state().state)
            ))
        })?;
        Ok(Response::new(japi::GetJobPipelineResponse { pipeline: Some(pipeline) }))
    }

    async fn cancel(
        &self,
        request: Request<japi::CancelJobRequest>,
    ) -> Result<Response<japi::CancelJobResponse>, Status> {
        let job = self.job(&request.into_inner().job_id)?;
        let state =
            tokio::task::spawn_blocking(move || job.cancel()).await.map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(japi::CancelJobResponse { state }))
    }

    async fn drain(&self, request: Request<japi::DrainJobRequest>) -> Result<Response<japi::DrainJobResponse>, Status> {
        let job = self.job(&request.into_inner().job_id)?;
        let drained = tokio::task::spawn_blocking(move || job.drain()).await;
        match drained.map_err(|e| Status::internal(e.to_string()))? {
            Ok(state) => Ok(Response::new(japi::DrainJobResponse { state })),
            Err(why) => Err(Status::failed_precondition(why)),
        }
    }

    type GetStateStreamStream = EventStream<japi::JobStateEvent>;

    async fn get_state_stream(
        &self,
        request: Request<japi::GetJobStateRequest>,
    ) -> Result<Response<Self::GetStateStreamStream>, Status> {
        let job = self.job(&request.into_inner().job_id)?;
        // The current state at once, then each change after it.
        let (current, seen) = job.state_and_seen();
        let rest = follow(job, seen, |e| match e {
            Event::State(s) => Some(s),
            Event::Message(_) => None,
        });
        let first = tokio_stream::once(Ok(current));
        Ok(Response::new(Box::pin(tokio_stream::StreamExt::chain(first, rest))))
    }

    type GetMessageStreamStream = EventStream<japi::JobMessagesResponse>;

    async fn get_message_stream(
        &self,
        request: Request<japi::JobMessagesRequest>,
    ) -> Result<Response<Self::GetMessageStreamStream>, Status> {
        use japi::job_messages_response::Response as R;
        let job = self.job(&request.into_inner().job_id)?;
        let stream = follow(job, 0, |e| {
            let response = match e {
                Event::State(s) => R::StateResponse(s),
                Event::Message(m) => R::MessageResponse(m),
            };
            Some(japi::JobMessagesResponse { response: Some(response) })
        });
        Ok(Response::new(stream))
    }

    async fn get_job_metrics(
        &self,
        request: Request<japi::GetJobMetricsRequest>,
    ) -> Result<Response<japi::GetJobMetricsResponse>, Status> {
        let one_list = reads_metrics_as_one_list(request.metadata());
        let job = self.job(&request.into_inner().job_id)?;
        // In batch, every bundle counted is one whose output went on: attempted is committed.
        let infos = job.metrics.monitoring_infos();
        let metrics = if one_list {
            japi::MetricResults { attempted: infos, committed: Vec::new() }
        } else {
            japi::MetricResults { attempted: infos.clone(), committed: infos }
        };
        Ok(Response::new(japi::GetJobMetricsResponse { metrics: Some(metrics) }))
    }

    async fn describe_pipeline_options(
        &self,
        _: Request<japi::DescribePipelineOptionsRequest>,
    ) -> Result<Response<japi::DescribePipelineOptionsResponse>, Status> {
        // Weir's own flags, for each job: Beam Python adds them to its options, and submits
        // them as `beam:option:weir_<flag>:v1` (see `job::job_weir_args`).
        let options = weir_sdk::PipelineOptions::valid_flags()
            .into_iter()
            .map(|flag| japi::PipelineOptionDescriptor {
                name: crate::jobservices::job::option_name(&flag),
                r#type: japi::pipeline_option_type::Enum::String as i32,
                description: format!("Weir's {flag}, for this job (replaces the job server's)"),
                default_value: String::new(),
                group: "Weir".into(),
            })
            .collect();
        Ok(Response::new(japi::DescribePipelineOptionsResponse { options }))
    }
}

impl StagingTarget for Jobs {
    fn dependencies(&self, token: &str) -> Result<Vec<(String, Vec<rapi::ArtifactInformation>)>, Status> {
        let job = self.job(token)?;
        job.dependencies().ok_or_else(|| Status::failed_precondition(format!("job '{token}' has ended")))
    }

    fn staged(&self, token: &str, staged: Staged) -> Result<(), Status> {
        self.job(token)?.set_staged(staged).map_err(Status::failed_precondition)
    }
}

/// Serves the Job API for `jobs` on `listener` until the process ends, with the artifact
/// staging and retrieval services on the same port.
pub async fn serve(listener: tokio::net::TcpListener, jobs: Jobs) -> Result<(), String> {
    let address = listener.local_addr().map_err(|e| format!("the job service's address: {e}"))?;
    let url = if address.ip().is_unspecified() { format!("localhost:{}", address.port()) } else { address.to_string() };
    let _ = jobs.endpoint.set(url);
    let jobs = Arc::new(jobs);
    let staging = Staging::new(jobs.artifacts.clone(), jobs.clone());
    let retrieval = Retrieval::new(jobs.artifacts.clone());
    let incoming = crate::worker::without_delay(listener);
    tonic::transport::Server::builder()
        .add_service(crate::unlimited!(JobServiceServer::from_arc(jobs)))
        .add_service(crate::unlimited!(ArtifactStagingServiceServer::new(staging)))
        .add_service(crate::unlimited!(ArtifactRetrievalServiceServer::new(retrieval)))
        .serve_with_incoming(incoming)
        .await
        .map_err(|e| format!("the job service stopped: {e}"))
}

/// Binds the job service's address, naming it in the error.
pub async fn bind(address: SocketAddr) -> Result<tokio::net::TcpListener, String> {
    tokio::net::TcpListener::bind(address).await.map_err(|e| format!("cannot listen on {address}: {e}"))
}

/// Asks the job service at `address` to drain job `job`; the job's state after asking
/// (`DRAINING`, or the state it had ended in).
pub fn drain(address: std::net::SocketAddr, job: &str) -> Result<String, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a client: {e}"))?;
    runtime.block_on(async {
        let url = format!("http://{address}");
        let mut client = japi::job_service_client::JobServiceClient::connect(url)
            .await
            .map_err(|e| format!("cannot reach the job service at {address}: {e}"))?;
        let request = japi::DrainJobRequest { job_id: job.to_string() };
        let response = client.drain(request).await.map_err(|e| format!("draining job '{job}': {}", e.message()))?;
        let state = response.into_inner().state;
        Ok(japi::job_state::Enum::try_from(state).map_or_else(|_| state.to_string(), |s| s.as_str_name().to_string()))
    })
}

/// Whether the client reads GetJobMetrics' attempted and committed lists as one list. Beam
/// Java's `PortableMetrics` does (apache/beam#32001, open through 2.65): it concatenates both
/// lists and makes an attempted-only result of every entry, so a metric sent in both lists comes
/// back as two results of the same name, `MetricsReader` (Beam's Nexmark and IO tests) refuses
/// them as ambiguous, and a sum doubles. Beam's own Java job servers (Flink's, Spark's) send the
/// attempted list alone; Weir does the same for a Java client (grpc-java names itself in the
/// user agent), and sends both to the others (Python and Go read each list for itself).
fn reads_metrics_as_one_list(metadata: &tonic::metadata::MetadataMap) -> bool {
    metadata.get("user-agent").and_then(|v| v.to_str().ok()).is_some_and(|agent| agent.contains("grpc-java"))
}
