//! `weir-job-server`: Weir as a Beam portable runner.
//!
//! ```sh
//! weir-job-server --job-port 8099 [--job-host 127.0.0.1] [--sdk-workers N] [--python PATH] \
//!     [--max-finished-jobs N] [--artifact-dir DIR] [--artifact-store-max-bytes N] \
//!     [--runner microbatch|timely|direct] [Weir's pipeline flags...]
//! python pipeline.py --runner=PortableRunner --job_endpoint=localhost:8099 --environment_type=LOOPBACK
//! ```
//!
//! `weir-job-server --drain JOB_ID [--job-port 8099] [--job-host 127.0.0.1]` drains a running
//! job of the server there: its sources stop, every window fires, and it ends DONE.
//!
//! What clients stage (Beam Java stages its whole classpath with every job) is kept by sha256
//! in `--artifact-dir` (a temporary directory unless given; give one to keep the jars across
//! servers), at most `--artifact-store-max-bytes` (2 GiB) of it beyond what running jobs hold.
//!
//! It listens on 127.0.0.1 unless `--job-host` says otherwise: a submitted pipeline carries
//! code, which the harnesses run, so whoever can reach the port can run code as this user.

use std::net::{IpAddr, SocketAddr};

use weir_portable::jobservices::artifacts::ArtifactStore;
use weir_portable::jobservices::job::RunConfig;
use weir_portable::jobservices::service::{bind, serve, Jobs};

const USAGE: &str = "usage: weir-job-server [--job-port PORT] [--job-host HOST] [--sdk-workers N] [--python PATH] \
[--max-finished-jobs N] [--artifact-dir DIR] [--artifact-store-max-bytes N] [Weir pipeline flags, e.g. --runner microbatch --parallelism 2]\n       weir-job-server --drain JOB_ID [--job-port PORT] \
[--job-host HOST]\n       weir-job-server --describe-flags   (Weir's pipeline flags as JSON lines)";

struct Args {
    address: SocketAddr,
    config: RunConfig,
    /// `--run-job FILE`: run that job as one process of its process group, not a server.
    run_job: Option<std::path::PathBuf>,
    /// `--drain JOB_ID`: drain that job of the server at `address`.
    drain: Option<String>,
    /// `--max-finished-jobs N`: how many finished jobs the server remembers.
    max_finished: usize,
    /// `--artifact-dir DIR`: where staged artifacts are kept.
    artifact_dir: Option<std::path::PathBuf>,
    /// `--artifact-store-max-bytes N`: the bound of the artifact store.
    artifact_max_bytes: u64,
}

fn value(args: &mut impl Iterator<Item = String>, flag: &str) -> Result<String, String> {
    args.next().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
}

fn parse(raw: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut host, mut port): (IpAddr, u16) = ([127, 0, 0, 1].into(), 8099);
    let mut config = RunConfig::default();
    let mut run_job = None;
    let mut drain = None;
    let mut max_finished = weir_portable::jobservices::service::MAX_FINISHED_JOBS;
    let mut artifact_dir = None;
    let mut artifact_max_bytes = weir_portable::jobservices::artifacts::DEFAULT_MAX_BYTES;
    let mut args = raw.peekable();
    while let Some(a) = args.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        let mut take = |name: &str| inline.clone().map_or_else(|| value(&mut args, name), Ok);
        match flag.as_str() {
            "--job-port" => port = take("--job-port")?.parse().map_err(|e| format!("--job-port: {e}"))?,
            "--job-host" => host = take("--job-host")?.parse().map_err(|e| format!("--job-host: {e}"))?,
            "--sdk-workers" => {
                config.sdk_workers = take("--sdk-workers")?.parse().map_err(|e| format!("--sdk-workers: {e}"))?;
                if config.sdk_workers == 0 {
                    return Err("--sdk-workers must be at least 1".into());
                }
            }
            "--python" => config.python = take("--python")?,
            "--max-finished-jobs" => {
                max_finished = take("--max-finished-jobs")?.parse().map_err(|e| format!("--max-finished-jobs: {e}"))?
            }
            "--artifact-dir" => artifact_dir = Some(take("--artifact-dir")?.into()),
            "--artifact-store-max-bytes" => {
                artifact_max_bytes = take("--artifact-store-max-bytes")?
                    .parse()
                    .map_err(|e| format!("--artifact-store-max-bytes: {e}"))?
            }
            "--run-job" => run_job = Some(take("--run-job")?.into()),
            "--artifact-endpoint" => config.artifact_endpoint = Some(take("--artifact-endpoint")?),
            "--drain" => drain = Some(take("--drain")?),
            "-h" | "--help" => return Err(USAGE.into()),
            _ => config.weir_args.push(a),
        }
    }
    // Weir's flags are checked now, not at the first job.
    weir_sdk::PipelineOptions::from_args(&config.weir_args).map_err(|e| e.to_string())?;
    config.separate_process = weir_portable::jobservices::job::several_processes(&config.weir_args);
    Ok(Args {
        address: SocketAddr::new(host, port),
        config,
        run_job,
        drain,
        max_finished,
        artifact_dir,
        artifact_max_bytes,
    })
}

/// Waits for SIGTERM or SIGINT.
async fn terminated() -> Result<(), String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(|e| format!("cannot watch for SIGTERM: {e}"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| format!("cannot watch for SIGINT: {e}"))?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    tracing::info!("weir-job-server: stopping");
    Ok(())
}

/// `--describe-flags`: Weir's pipeline flags, one JSON object a line (`flag`, `takes_value`,
/// `help`), for clients that declare them (the Python package's `WeirOptions`).
fn describe_flags() {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for f in weir_sdk::PipelineOptions::describe_flags() {
        let line = serde_json::json!({"flag": f.flag, "takes_value": f.takes_value, "help": f.help});
        // A reader that stops early (`| head`) ends the listing, not the program with a panic.
        if writeln!(out, "{line}").is_err() {
            return;
        }
    }
}

fn main() {
    weir::register_with_logging();
    if std::env::args().skip(1).any(|a| a == "--describe-flags") {
        describe_flags();
        return;
    }
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("weir-job-server: {e}");
            std::process::exit(2);
        }
    };
    if let Some(file) = &args.run_job {
        std::process::exit(weir_portable::jobservices::job::run_job_file(file, &args.config));
    }
    if let Some(job) = &args.drain {
        match weir_portable::jobservices::service::drain(args.address, job) {
            Ok(state) => println!("job {job} is {state}"),
            Err(e) => {
                eprintln!("weir-job-server: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("weir-job-service")
        .enable_all()
        .build()
        .unwrap_or_else(|e| {
            eprintln!("weir-job-server: cannot start: {e}");
            std::process::exit(1)
        });
    // A temporary store lives as long as the server.
    let temporary = match &args.artifact_dir {
        Some(_) => None,
        None => {
            match tempfile::Builder::new().prefix("weir-artifacts-").tempdir() {
                Ok(dir) => Some(dir),
                Err(e) => {
                    eprintln!("weir-job-server: cannot make a directory for staged artifacts ({e}); give one with --artifact-dir");
                    std::process::exit(1);
                }
            }
        }
    };
    let artifact_dir = args.artifact_dir.clone().or_else(|| temporary.as_ref().map(|t| t.path().to_path_buf()));
    let outcome = runtime.block_on(async {
        let dir = artifact_dir.ok_or("no directory for staged artifacts")?;
        let artifacts = ArtifactStore::open(&dir, args.artifact_max_bytes)?;
        let listener = bind(args.address).await?;
        let bound = listener.local_addr().map_err(|e| e.to_string())?;
        // The address on standard output, for whoever started the server on port 0.
        println!("weir-job-server: the job service listens on {bound}");
        let mut config = args.config;
        // Harnesses Weir starts fetch their dependencies from this server.
        config.artifact_endpoint.get_or_insert_with(|| bound.to_string());
        let jobs = Jobs::remembering(config, artifacts, args.max_finished);
        // SIGTERM and SIGINT end the server with its temporary store removed.
        tokio::select! {
            served = serve(listener, jobs) => served,
            stopped = terminated() => stopped,
        }
    });
    // Exits without waiting on the runtime's threads (a running job's among them).
    drop(temporary);
    if let Err(e) = outcome {
        eprintln!("weir-job-server: {e}");
        std::process::exit(1);
    }
    std::process::exit(0);
}
