//! Where SDK harnesses come from, as a pipeline's environment says.
//!
//! - EXTERNAL (and LOOPBACK, which Beam Python submits as EXTERNAL with the worker pool it runs
//!   in the submitting process): Weir asks the worker pool at the environment's endpoint to
//!   start each harness, pointed at Weir's Fn API services.
//! - PROCESS: Weir starts each harness itself, as Beam defines it: the environment's command
//!   (Beam's `boot` of an SDK's container, for one) with `--id`, `--provision_endpoint` and the
//!   other endpoints, and the environment's variables; the harness then asks the provision
//!   service for its options and dependencies, and fetches those from the job server's artifact
//!   retrieval service. A command that names no executable (Beam Python submits a placeholder
//!   unless told otherwise) starts Beam Python's harness, `python -m
//!   apache_beam.runners.worker.sdk_worker_main`. Weir reports a process that exits, with its
//!   status, to whatever bundle waits on it.
//! - DOCKER is refused: there is no Docker here.

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::proto::fn_execution::v1 as fapi;
use crate::proto::pipeline::v1 as rapi;
use crate::worker::FnServer;
use crate::Error;
use prost::Message;

/// How the harnesses of an environment start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launch {
    /// Asked of the worker pool at `endpoint`.
    External {
        /// The worker pool's address.
        endpoint: String,
    },
    /// Started by Weir: the environment's `command`, or Beam Python's harness with `python`.
    Process {
        /// The environment's command.
        command: String,
        /// The environment's variables for it.
        env: Vec<(String, String)>,
        /// The Python that has apache-beam, for a command that names no executable.
        python: String,
    },
}

impl Launch {
    /// How the harnesses of `env` start (a PROCESS environment with `python`); an environment
    /// Weir cannot start is an error naming its URN.
    pub fn of(env: &rapi::Environment, python: &str) -> Result<Launch, String> {
        match env.urn.as_str() {
            "beam:env:external:v1" => {
                let p = rapi::ExternalPayload::decode(env.payload.as_slice())
                    .map_err(|e| format!("an EXTERNAL environment whose payload does not decode: {e}"))?;
                let endpoint = p.endpoint.map(|e| e.url).filter(|u| !u.is_empty());
                Ok(Launch::External { endpoint: endpoint.ok_or("an EXTERNAL environment without an endpoint")? })
            }
            "beam:env:process:v1" => {
                let p = rapi::ProcessPayload::decode(env.payload.as_slice())
                    .map_err(|e| format!("a PROCESS environment whose payload does not decode: {e}"))?;
                let mut vars: Vec<(String, String)> = p.env.into_iter().collect();
                vars.sort();
                Ok(Launch::Process { command: p.command, env: vars, python: python.to_string() })
            }
            other => Err(format!(
                "environment {other} cannot start here: use LOOPBACK, EXTERNAL or PROCESS (--environment_type)"
            )),
        }
    }
}

/// Harnesses started for a run; the processes Weir started are killed when it is dropped, and
/// what their commands kept on disk is removed.
pub struct Harnesses {
    processes: Vec<Arc<Mutex<Child>>>,
    _work: Option<tempfile::TempDir>,
}

impl Harnesses {
    /// Starts a harness for each of `workers` as `launch` says, pointed at `server`, and waits
    /// (up to `timeout`) until each has connected.
    pub fn start(launch: &Launch, server: &FnServer, workers: &[String], timeout: Duration) -> Result<Self, Error> {
        let mut processes = Vec::new();
        let mut work = None;
        let endpoint = || Some(rapi::ApiServiceDescriptor { url: server.address().into(), authentication: None });
        for worker in workers {
            match launch {
                Launch::External { endpoint: pool } => {
                    let request = fapi::StartWorkerRequest {
                        worker_id: worker.clone(),
                        control_endpoint: endpoint(),
                        logging_endpoint: endpoint(),
                        provision_endpoint: endpoint(),
                        ..Default::default()
                    };
                    let pool_url = format!("http://{pool}");
                    let refused = |e: String| {
                        Error::Launch(format!("the worker pool at {pool} cannot start harness '{worker}': {e}"))
                    };
                    let response = server.block_on(async {
                        use fapi::beam_fn_external_worker_pool_client::BeamFnExternalWorkerPoolClient;
                        let client =
                            BeamFnExternalWorkerPoolClient::connect(pool_url).await.map_err(|e| e.to_string())?;
                        let mut client = crate::unlimited!(client);
                        client.start_worker(request).await.map_err(|e| e.message().to_string())
                    });
                    let response = response.map_err(refused)?.into_inner();
                    if !response.error.is_empty() {
                        return Err(refused(response.error));
                    }
                }
                Launch::Process { command, env, python } => match executable(command) {
                    Some(program) => {
                        if work.is_none() {
                            work = Some(tempfile::Builder::new().prefix("weir-harnesses-").tempdir().map_err(|e| {
                                Error::Launch(format!("cannot make a directory for harness '{worker}': {e}"))
                            })?);
                        }
                        let dir = work.as_ref().map(|w| w.path().to_path_buf()).unwrap_or_default();
                        processes.push(start_command(&program, env, &dir, server, worker)?)
                    }
                    None => processes.push(start_python(python, server, worker)?),
                },
            }
        }
        let harnesses = Harnesses { processes, _work: work };
        for worker in workers {
            server.wait_for_worker(worker, timeout)?;
        }
        Ok(harnesses)
    }
}

/// The executable `command` names (a path, or a program on the `PATH`), if any.
fn executable(command: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &std::path::Path| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    let command = command.trim();
    if command.is_empty() {
        return None;
    }
    if command.contains('/') {
        let p = std::path::PathBuf::from(command);
        return runnable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(command)).find(|p| runnable(p))
}

/// Starts harness `worker` as Beam starts a PROCESS environment's: `program` with the
/// worker's id and the endpoints of `server`, and `env`; what it keeps goes under `dir`.
fn start_command(
    program: &std::path::Path,
    env: &[(String, String)],
    dir: &std::path::Path,
    server: &FnServer,
    worker: &str,
) -> Result<Arc<Mutex<Child>>, Error> {
    let address = server.address();
    // Its own working directory: Beam's Java boot writes files there (a pathing jar, the
    // options), which must not land in the job server's, nor clash with another harness's.
    let cwd = dir.join(worker.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_"));
    std::fs::create_dir_all(&cwd)
        .map_err(|e| Error::Launch(format!("cannot make a directory for harness '{worker}': {e}")))?;
    let child = Command::new(program)
        .current_dir(&cwd)
        .arg(format!("--id={worker}"))
        .arg(format!("--provision_endpoint={address}"))
        .arg(format!("--control_endpoint={address}"))
        .arg(format!("--logging_endpoint={address}"))
        .arg(format!("--artifact_endpoint={}", server.artifact_endpoint().unwrap_or_else(|| address.to_string())))
        .arg(format!("--semi_persist_dir={}", dir.display()))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::Launch(format!("cannot start harness '{worker}' with {}: {e}", program.display())))?;
    watch(child, server, worker)
}

/// Starts harness `worker` as a process of `python` (Beam Python's harness).
fn start_python(python: &str, server: &FnServer, worker: &str) -> Result<Arc<Mutex<Child>>, Error> {
    let endpoint = format!("url: \"{}\"", server.address());
    let child = Command::new(python)
        .args(["-m", "apache_beam.runners.worker.sdk_worker_main"])
        .env("CONTROL_API_SERVICE_DESCRIPTOR", &endpoint)
        .env("LOGGING_API_SERVICE_DESCRIPTOR", &endpoint)
        .env("WORKER_ID", worker)
        .env("PIPELINE_OPTIONS", server.pipeline_options_json())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::Launch(format!("cannot start harness '{worker}' with {python}: {e}")))?;
    watch(child, server, worker)
}

/// Watches harness process `child`: its exit is reported to `server` with its status and its
/// last words.
fn watch(mut child: Child, server: &FnServer, worker: &str) -> Result<Arc<Mutex<Child>>, Error> {
    let last_words = child.stderr.take().map(|e| keep_last_lines(e, worker));
    let child = Arc::new(Mutex::new(child));
    let (watched, exits, worker) = (child.clone(), server.exits(), worker.to_string());
    exits.watching(&worker);
    std::thread::Builder::new()
        .name(format!("watch {worker}"))
        .spawn(move || loop {
            let status = watched.lock().unwrap_or_else(|e| e.into_inner()).try_wait();
            match status {
                Ok(Some(status)) => {
                    // What it said last, once it has all been read.
                    let said = last_words.and_then(|t| t.join().ok()).unwrap_or_default();
                    let said = if said.is_empty() { String::new() } else { format!("; it said:\n{said}") };
                    return exits.report(&worker, format!("its process exited ({status}){said}"));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => return exits.report(&worker, format!("its process cannot be watched: {e}")),
            }
        })
        .map_err(|e| Error::Launch(format!("cannot watch harness process: {e}")))?;
    Ok(child)
}

/// Reads a harness's standard error to its end, into Weir's log at debug level, and returns its
/// last lines (what a harness that fails to start says, such as a Python without apache-beam).
fn keep_last_lines(stderr: std::process::ChildStderr, worker: &str) -> std::thread::JoinHandle<String> {
    let worker = worker.to_string();
    std::thread::spawn(move || {
        use std::io::BufRead;
        let mut last = std::collections::VecDeque::new();
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            tracing::debug!(target: "beam_harness", worker = %worker, "{line}");
            if last.len() == 12 {
                last.pop_front();
            }
            last.push_back(line);
        }
        Vec::from(last).join("\n")
    })
}

impl Drop for Harnesses {
    fn drop(&mut self) {
        for p in &self.processes {
            let mut child = p.lock().unwrap_or_else(|e| e.into_inner());
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(urn: &str, payload: Vec<u8>) -> rapi::Environment {
        rapi::Environment { urn: urn.into(), payload, ..Default::default() }
    }

    #[test]
    fn environments_start_as_their_urn_says_or_are_refused_naming_it() {
        let endpoint = rapi::ApiServiceDescriptor { url: "127.0.0.1:5000".into(), authentication: None };
        let external = rapi::ExternalPayload { endpoint: Some(endpoint), ..Default::default() };
        let e = env("beam:env:external:v1", external.encode_to_vec());
        assert_eq!(Launch::of(&e, "py"), Ok(Launch::External { endpoint: "127.0.0.1:5000".into() }));
        let e = env("beam:env:external:v1", Vec::new());
        assert!(Launch::of(&e, "py").unwrap_err().contains("without an endpoint"));
        let process = rapi::ProcessPayload {
            command: "/opt/boot".into(),
            env: [("B".to_string(), "2".to_string()), ("A".to_string(), "1".to_string())].into(),
            ..Default::default()
        };
        let e = env("beam:env:process:v1", process.encode_to_vec());
        let vars = vec![("A".to_string(), "1".to_string()), ("B".to_string(), "2".to_string())];
        assert_eq!(
            Launch::of(&e, "py"),
            Ok(Launch::Process { command: "/opt/boot".into(), env: vars, python: "py".into() })
        );
        assert!(executable("/opt/boot").is_none());
        assert!(executable("sh").is_some_and(|p| p.is_absolute()));
        assert!(executable("started by weir-job-server").is_none());
        let e = env("beam:env:docker:v1", Vec::new());
        assert!(Launch::of(&e, "py").unwrap_err().contains("beam:env:docker:v1"));
    }
}
