//! Where SDK harnesses come from, as a pipeline's environment says.
//!
//! - EXTERNAL (and LOOPBACK, which Beam Python submits as EXTERNAL with the worker pool it runs
//!   in the submitting process): Weir asks the worker pool at the environment's endpoint to
//!   start each harness, pointed at Weir's Fn API services.
//! - PROCESS: Weir starts each harness itself, as `python -m
//!   apache_beam.runners.worker.sdk_worker_main`, and reports a process that exits, with its
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
    /// Started by Weir with `python`.
    Process {
        /// The Python that has apache-beam.
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
            "beam:env:process:v1" => Ok(Launch::Process { python: python.to_string() }),
            other => Err(format!(
                "environment {other} cannot start here: use LOOPBACK, EXTERNAL or PROCESS (--environment_type)"
            )),
        }
    }
}

/// Harnesses started for a run; the processes Weir started are killed when it is dropped.
pub struct Harnesses {
    processes: Vec<Arc<Mutex<Child>>>,
}

impl Harnesses {
    /// Starts a harness for each of `workers` as `launch` says, pointed at `server`, and waits
    /// (up to `timeout`) until each has connected.
    pub fn start(launch: &Launch, server: &FnServer, workers: &[String], timeout: Duration) -> Result<Self, Error> {
        let mut processes = Vec::new();
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
                Launch::Process { python } => processes.push(start_process(python, server, worker)?),
            }
        }
        let harnesses = Harnesses { processes };
        for worker in workers {
            server.wait_for_worker(worker, timeout)?;
        }
        Ok(harnesses)
    }
}

/// Starts harness `worker` as a process of `python`, watched: its exit is reported to `server`
/// with its status.
fn start_process(python: &str, server: &FnServer, worker: &str) -> Result<Arc<Mutex<Child>>, Error> {
    let endpoint = format!("url: \"{}\"", server.address());
    let mut child = Command::new(python)
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
        let e = env("beam:env:process:v1", Vec::new());
        assert_eq!(Launch::of(&e, "py"), Ok(Launch::Process { python: "py".into() }));
        let e = env("beam:env:docker:v1", Vec::new());
        assert!(Launch::of(&e, "py").unwrap_err().contains("beam:env:docker:v1"));
    }
}
