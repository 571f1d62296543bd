//! Artifact staging and retrieval: the jars, wheels and files a pipeline's environments need.
//!
//! Beam's clients stage through the *reverse* retrieval protocol: after Prepare, the client
//! opens `ArtifactStagingService.ReverseArtifactRetrievalService` with the staging token, and
//! the job server asks it, environment by environment, to resolve that environment's
//! dependencies and then to send each one it does not have yet. Beam Java stages its whole
//! classpath with every job (a hundred and more jars), so the store is content-addressed by
//! sha256: a jar any job staged before is not sent again (the client's file payloads carry their
//! sha256) and is kept once however many jobs use it.
//!
//! - [`ArtifactStore`]: the files, named by their sha256 under the job server's work
//!   directory, with the jobs that use each. A job's hold on its files ends when it ends; files
//!   no job holds stay as a cache until the store outgrows its bound, oldest use first.
//! - [`Staging`]: the staging service, which records what it stored per environment in the
//!   job ([`Staged`]).
//! - [`Retrieval`]: the retrieval service harnesses (Beam's boot programs) fetch them from,
//!   serving only files of the store.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use prost::Message;
use sha2::{Digest, Sha256};
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::proto::job_management::v1 as japi;
use crate::proto::pipeline::v1 as rapi;
use japi::artifact_request_wrapper::Request as Asked;
use japi::artifact_response_wrapper::Response as Answered;
use weir_sdk::urns::artifacts as urns;

/// The store's default bound: 2 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 2 << 30;

/// How many bytes one GetArtifact message carries.
const CHUNK: usize = 1 << 20;

/// One file of the store.
struct Entry {
    size: u64,
    /// When a job last staged or used it (a counter, for eviction oldest first).
    used: u64,
    /// How many staged jobs hold it.
    holders: usize,
}

#[derive(Default)]
struct Files {
    files: HashMap<String, Entry>,
    /// The files each job holds, by staging token.
    jobs: HashMap<String, Vec<String>>,
    bytes: u64,
    tick: u64,
}

/// Staged artifacts, content-addressed by sha256 in a directory of their own.
pub struct ArtifactStore {
    dir: PathBuf,
    max_bytes: u64,
    files: Mutex<Files>,
}

impl ArtifactStore {
    /// A store in `dir` (made if missing) of at most `max_bytes` of files no running job needs.
    /// Files an earlier server left there are kept, as a cache.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Arc<Self>, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot make the artifact store {}: {e}", dir.display()))?;
        let mut files = Files::default();
        let listing =
            std::fs::read_dir(dir).map_err(|e| format!("cannot read the artifact store {}: {e}", dir.display()))?;
        for entry in listing.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
            if is_sha256(&name) {
                files.bytes += size;
                files.files.insert(name, Entry { size, used: 0, holders: 0 });
            } else if name.starts_with(".part-") {
                // A staging cut short by an earlier server's end.
                let _ = std::fs::remove_file(entry.path());
            }
        }
        let store = Arc::new(ArtifactStore { dir: dir.to_path_buf(), max_bytes, files: Mutex::new(files) });
        store.evict(&mut store.lock());
        Ok(store)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Files> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where the file of `sha256` is (whether or not the store has it).
    pub fn path_of(&self, sha256: &str) -> PathBuf {
        self.dir.join(sha256)
    }

    /// How many files and bytes the store holds.
    pub fn usage(&self) -> (usize, u64) {
        let files = self.lock();
        (files.files.len(), files.bytes)
    }

    /// Has job `job` hold the file of `sha256`, if the store has it; whether it does.
    pub fn hold(&self, job: &str, sha256: &str) -> bool {
        let mut files = self.lock();
        let Files { files: f, jobs, tick, .. } = &mut *files;
        let Some(entry) = f.get_mut(sha256) else { return false };
        if !self.path_of(sha256).is_file() {
            return false;
        }
        *tick += 1;
        entry.used = *tick;
        entry.holders += 1;
        jobs.entry(job.to_string()).or_default().push(sha256.to_string());
        true
    }

    /// Starts writing a file for job `job`.
    pub fn writer(self: &Arc<Self>, job: &str) -> Result<ArtifactWriter, String> {
        let file = tempfile::Builder::new()
            .prefix(".part-")
            .tempfile_in(&self.dir)
            .map_err(|e| format!("cannot write to the artifact store {}: {e}", self.dir.display()))?;
        Ok(ArtifactWriter { store: self.clone(), job: job.to_string(), file, hash: Sha256::new(), size: 0 })
    }

    /// Ends job `job`'s hold on its files, and evicts what the bound says to.
    pub fn release(&self, job: &str) {
        let mut files = self.lock();
        for sha in files.jobs.remove(job).unwrap_or_default() {
            if let Some(e) = files.files.get_mut(&sha) {
                e.holders = e.holders.saturating_sub(1);
            }
        }
        self.evict(&mut files);
    }

    /// Removes files no job holds, oldest use first, until the store is within its bound.
    fn evict(&self, files: &mut Files) {
        while files.bytes > self.max_bytes {
            let oldest = files.files.iter().filter(|(_, e)| e.holders == 0).min_by_key(|(_, e)| e.used);
            let Some((sha, _)) = oldest else { break };
            let sha = sha.clone();
            if let Some(e) = files.files.remove(&sha) {
                files.bytes -= e.size;
                if let Err(err) = std::fs::remove_file(self.path_of(&sha)) {
                    tracing::warn!("cannot remove artifact {sha} from the store: {err}");
                }
            }
        }
    }

    /// Adds a written file of `size` bytes named `sha256`, held by `job`; an error when the
    /// files running jobs hold would exceed the bound.
    fn add(&self, job: &str, sha256: &str, size: u64) -> Result<(), String> {
        let mut files = self.lock();
        let f = &mut *files;
        f.tick += 1;
        let tick = f.tick;
        match f.files.get_mut(sha256) {
            Some(e) => {
                e.used = tick;
                e.holders += 1;
            }
            None => {
                f.files.insert(sha256.to_string(), Entry { size, used: tick, holders: 1 });
                f.bytes += size;
            }
        }
        f.jobs.entry(job.to_string()).or_default().push(sha256.to_string());
        self.evict(f);
        if f.bytes > self.max_bytes {
            return Err(format!(
                "the artifact store holds {} MB for the jobs staged or running, over its bound of {} MB \
                 (--artifact-store-max-bytes)",
                f.bytes >> 20,
                self.max_bytes >> 20
            ));
        }
        Ok(())
    }
}

/// A file being written to the store, hashed as it comes.
pub struct ArtifactWriter {
    store: Arc<ArtifactStore>,
    job: String,
    file: tempfile::NamedTempFile,
    hash: Sha256,
    size: u64,
}

impl ArtifactWriter {
    /// Appends `data`.
    pub fn write(&mut self, data: &[u8]) -> Result<(), String> {
        self.hash.update(data);
        self.size += data.len() as u64;
        self.file.write_all(data).map_err(|e| format!("cannot write to the artifact store: {e}"))
    }

    /// Ends the file: it is in the store under its sha256, held by the job; its sha256.
    pub fn finish(self) -> Result<String, String> {
        let sha: String = self.hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
        let path = self.store.path_of(&sha);
        if !path.is_file() {
            self.file.persist(&path).map_err(|e| format!("cannot keep artifact {sha} in the store: {e}"))?;
        }
        self.store.add(&self.job, &sha, self.size)?;
        Ok(sha)
    }
}

fn is_sha256(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A job's staged artifacts, per environment: file artifacts of the store. Dropping it (when
/// the job ends) ends the job's hold on them.
pub struct Staged {
    store: Arc<ArtifactStore>,
    token: String,
    /// Each environment's dependencies as staged.
    pub environments: HashMap<String, Vec<rapi::ArtifactInformation>>,
}

impl Drop for Staged {
    fn drop(&mut self) {
        self.store.release(&self.token);
    }
}

/// What the staging service needs of a job: its environments' dependencies, and where to keep
/// what was staged.
pub trait StagingTarget: Send + Sync {
    /// Each environment's dependencies as the pipeline lists them, for the job of `token`.
    fn dependencies(&self, token: &str) -> Result<Vec<(String, Vec<rapi::ArtifactInformation>)>, Status>;
    /// Keeps `staged` with the job of `token`.
    fn staged(&self, token: &str, staged: Staged) -> Result<(), Status>;
}

/// Beam's `ArtifactStagingService`: pulls each environment's dependencies from the client.
pub struct Staging<T> {
    store: Arc<ArtifactStore>,
    target: Arc<T>,
}

impl<T> Staging<T> {
    /// The staging service of `store`, for the jobs of `target`.
    pub fn new(store: Arc<ArtifactStore>, target: Arc<T>) -> Self {
        Staging { store, target }
    }
}

/// The sha256 a file or URL artifact's payload gives, if any.
fn given_sha256(a: &rapi::ArtifactInformation) -> Option<String> {
    let sha = match a.type_urn.as_str() {
        urns::FILE => rapi::ArtifactFilePayload::decode(a.type_payload.as_slice()).ok()?.sha256,
        urns::URL => rapi::ArtifactUrlPayload::decode(a.type_payload.as_slice()).ok()?.sha256,
        _ => return None,
    };
    let sha = sha.to_ascii_lowercase();
    is_sha256(&sha).then_some(sha)
}

/// The artifact as the store holds it: a file of the store, in the same role.
fn stored(store: &ArtifactStore, sha256: &str, like: &rapi::ArtifactInformation) -> rapi::ArtifactInformation {
    let payload =
        rapi::ArtifactFilePayload { path: store.path_of(sha256).display().to_string(), sha256: sha256.to_string() };
    rapi::ArtifactInformation {
        type_urn: urns::FILE.into(),
        type_payload: payload.encode_to_vec(),
        role_urn: like.role_urn.clone(),
        role_payload: like.role_payload.clone(),
    }
}

/// One staging session: the client's answers, and the requests sent to it.
struct Session {
    answers: Streaming<japi::ArtifactResponseWrapper>,
    asks: tokio::sync::mpsc::Sender<Result<japi::ArtifactRequestWrapper, Status>>,
}

impl Session {
    async fn ask(&mut self, request: Asked) -> Result<(), Status> {
        let wrapped = japi::ArtifactRequestWrapper { request: Some(request) };
        self.asks.send(Ok(wrapped)).await.map_err(|_| Status::cancelled("the client left the staging session"))
    }

    async fn answer(&mut self) -> Result<japi::ArtifactResponseWrapper, Status> {
        self.answers.message().await?.ok_or_else(|| Status::aborted("the client ended the staging session early"))
    }

    /// The client's resolution of `artifacts`.
    async fn resolve(
        &mut self,
        artifacts: Vec<rapi::ArtifactInformation>,
    ) -> Result<Vec<rapi::ArtifactInformation>, Status> {
        let preferred_urns = vec![urns::FILE.to_string(), urns::URL.to_string(), urns::EMBEDDED.to_string()];
        self.ask(Asked::ResolveArtifact(japi::ResolveArtifactsRequest { artifacts, preferred_urns })).await?;
        match self.answer().await?.response {
            Some(Answered::ResolveArtifactResponse(r)) => Ok(r.replacements),
            other => Err(Status::invalid_argument(format!(
                "a staging client answered a ResolveArtifacts request with {other:?}"
            ))),
        }
    }

    /// Fetches `artifact`'s bytes from the client into `writer`.
    async fn fetch(&mut self, artifact: &rapi::ArtifactInformation, writer: &mut ArtifactWriter) -> Result<(), Status> {
        let request = japi::GetArtifactRequest { artifact: Some(artifact.clone()) };
        self.ask(Asked::GetArtifact(request)).await?;
        loop {
            let answer = self.answer().await?;
            match answer.response {
                Some(Answered::GetArtifactResponse(r)) => writer.write(&r.data).map_err(Status::internal)?,
                None if answer.is_last => {}
                other => {
                    return Err(Status::invalid_argument(format!(
                        "a staging client answered a GetArtifact request with {other:?}"
                    )))
                }
            }
            if answer.is_last {
                return Ok(());
            }
        }
    }
}

/// Stages every environment's dependencies of the job of `token` into `store`.
async fn stage(
    store: Arc<ArtifactStore>,
    token: &str,
    dependencies: Vec<(String, Vec<rapi::ArtifactInformation>)>,
    session: &mut Session,
) -> Result<Staged, Status> {
    let mut staged = Staged { store: store.clone(), token: token.to_string(), environments: HashMap::new() };
    let (mut sent, mut reused) = (0, 0);
    for (env, wanted) in dependencies {
        let resolved = if wanted.is_empty() { Vec::new() } else { session.resolve(wanted).await? };
        let mut kept = Vec::with_capacity(resolved.len());
        for a in resolved {
            let sha = match given_sha256(&a) {
                Some(sha) if store.hold(token, &sha) => {
                    reused += 1;
                    sha
                }
                _ => {
                    let mut writer = store.writer(token).map_err(Status::internal)?;
                    if a.type_urn == urns::EMBEDDED {
                        let p = rapi::EmbeddedFilePayload::decode(a.type_payload.as_slice())
                            .map_err(|e| Status::invalid_argument(format!("an embedded artifact: {e}")))?;
                        writer.write(&p.data).map_err(Status::internal)?;
                    } else {
                        session.fetch(&a, &mut writer).await?;
                    }
                    sent += 1;
                    writer.finish().map_err(Status::resource_exhausted)?
                }
            };
            kept.push(stored(&store, &sha, &a));
        }
        staged.environments.insert(env, kept);
    }
    tracing::info!("staged {token}: {sent} artifacts sent, {reused} already in the store");
    Ok(staged)
}

type RequestStream = Pin<Box<dyn Stream<Item = Result<japi::ArtifactRequestWrapper, Status>> + Send>>;

#[tonic::async_trait]
impl<T: StagingTarget + 'static> japi::artifact_staging_service_server::ArtifactStagingService for Staging<T> {
    type ReverseArtifactRetrievalServiceStream = RequestStream;

    async fn reverse_artifact_retrieval_service(
        &self,
        request: Request<Streaming<japi::ArtifactResponseWrapper>>,
    ) -> Result<Response<RequestStream>, Status> {
        let (asks, rx) = tokio::sync::mpsc::channel(4);
        let mut session = Session { answers: request.into_inner(), asks };
        let (store, target) = (self.store.clone(), self.target.clone());
        tokio::spawn(async move {
            let outcome = async {
                let token = session.answer().await?.staging_token;
                let dependencies = target.dependencies(&token)?;
                let staged = stage(store, &token, dependencies, &mut session).await?;
                target.staged(&token, staged)
            }
            .await;
            if let Err(status) = outcome {
                tracing::warn!("artifact staging failed: {}", status.message());
                let _ = session.asks.send(Err(status)).await;
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }
}

/// Beam's `ArtifactRetrievalService`, serving the store's files to harnesses.
pub struct Retrieval {
    store: Arc<ArtifactStore>,
}

impl Retrieval {
    /// The retrieval service of `store`.
    pub fn new(store: Arc<ArtifactStore>) -> Self {
        Retrieval { store }
    }

    /// The store's file `artifact` names; an error for anything else.
    fn file_of(&self, artifact: &rapi::ArtifactInformation) -> Result<PathBuf, Status> {
        let refuse = |why: &str| Status::not_found(format!("artifact {} {why}", artifact.type_urn));
        if artifact.type_urn != urns::FILE {
            return Err(refuse("is not a file of this job server's artifact store"));
        }
        let p = rapi::ArtifactFilePayload::decode(artifact.type_payload.as_slice())
            .map_err(|e| Status::invalid_argument(format!("a file artifact whose payload does not decode: {e}")))?;
        let path = PathBuf::from(&p.path);
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if !is_sha256(&name) || path != self.store.path_of(&name) || !path.is_file() {
            return Err(refuse(&format!("at {} is not a file of this job server's artifact store", p.path)));
        }
        Ok(path)
    }
}

type DataStream = Pin<Box<dyn Stream<Item = Result<japi::GetArtifactResponse, Status>> + Send>>;

#[tonic::async_trait]
impl japi::artifact_retrieval_service_server::ArtifactRetrievalService for Retrieval {
    async fn resolve_artifacts(
        &self,
        request: Request<japi::ResolveArtifactsRequest>,
    ) -> Result<Response<japi::ResolveArtifactsResponse>, Status> {
        // What the store serves is resolved already: files of the store.
        Ok(Response::new(japi::ResolveArtifactsResponse { replacements: request.into_inner().artifacts }))
    }

    type GetArtifactStream = DataStream;

    async fn get_artifact(&self, request: Request<japi::GetArtifactRequest>) -> Result<Response<DataStream>, Status> {
        let artifact =
            request.into_inner().artifact.ok_or_else(|| Status::invalid_argument("no artifact asked for"))?;
        let path = self.file_of(&artifact)?;
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        tokio::task::spawn_blocking(move || {
            use std::io::Read;
            let mut file = match std::fs::File::open(&path) {
                Ok(f) => f,
                Err(e) => {
                    let _ = tx.blocking_send(Err(Status::not_found(format!("{}: {e}", path.display()))));
                    return;
                }
            };
            let mut buf = vec![0; CHUNK];
            loop {
                match file.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => {
                        if tx.blocking_send(Ok(japi::GetArtifactResponse { data: buf[..n].to_vec() })).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        let _ = tx.blocking_send(Err(Status::internal(format!("{}: {e}", path.display()))));
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(store: &Arc<ArtifactStore>, job: &str, data: &[u8]) -> String {
        let mut w = store.writer(job).unwrap();
        w.write(data).unwrap();
        w.finish().unwrap()
    }

    #[test]
    fn files_are_kept_once_by_content_and_evicted_oldest_first_once_no_job_holds_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::open(dir.path(), 10).unwrap();
        let a = write(&store, "job-1", b"abcdef");
        assert_eq!(a, "bef57ec7f53a6d40beb640a780a639c83bc29ac8a9816f1fc6c5c6dcd93c4721");
        assert_eq!(write(&store, "job-2", b"abcdef"), a, "the same content, the same file");
        assert_eq!(store.usage(), (1, 6));
        assert!(store.hold("job-3", &a));
        assert!(!store.hold("job-3", &"0".repeat(64)), "a file the store lacks");
        // Over the bound while running jobs hold everything: refused, naming the flag.
        let mut w = store.writer("job-4").unwrap();
        w.write(b"0123456789").unwrap();
        let err = w.finish().unwrap_err();
        assert!(err.contains("--artifact-store-max-bytes"), "{err}");
        for job in ["job-1", "job-2", "job-3", "job-4"] {
            store.release(job);
        }
        // Nothing held: the oldest goes first, until within the bound.
        assert_eq!(store.usage(), (1, 10));
        assert!(!store.path_of(&a).exists());
        // A new server over the same directory finds what is there.
        drop(store);
        let store = ArtifactStore::open(dir.path(), 100).unwrap();
        assert_eq!(store.usage(), (1, 10));
    }

    #[test]
    fn retrieval_serves_only_files_of_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::open(&dir.path().join("store"), 1 << 20).unwrap();
        let sha = write(&store, "job-1", b"jar");
        let retrieval = Retrieval::new(store.clone());
        let file = |path: &str| rapi::ArtifactInformation {
            type_urn: urns::FILE.into(),
            type_payload: rapi::ArtifactFilePayload { path: path.into(), sha256: String::new() }.encode_to_vec(),
            ..Default::default()
        };
        assert!(retrieval.file_of(&file(&store.path_of(&sha).display().to_string())).is_ok());
        std::fs::write(dir.path().join(&sha), b"not the store's").unwrap();
        for outside in ["/etc/passwd", &dir.path().join(&sha).display().to_string()] {
            let err = retrieval.file_of(&file(outside)).unwrap_err();
            assert!(err.message().contains("is not a file of this job server's artifact store"), "{err}");
        }
    }
}
