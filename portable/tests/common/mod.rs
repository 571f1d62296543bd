//! What the portable runner's tests share: Beam Python, and pipelines it builds.
// Each test binary uses its part of it.
#![allow(dead_code)]

use prost::Message;
use weir_portable::proto::pipeline::v1 as rapi;

/// A Python with apache-beam, or `None` (the test is skipped; under CI, which installs it, it
/// fails).
pub fn beam_python() -> Option<String> {
    let python = std::env::var("WEIR_BEAM_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = std::process::Command::new(&python)
        .args(["-c", "import apache_beam"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "{python} lacks apache-beam (.ci/run installs it)");
        eprintln!("SKIPPED: {python} lacks apache-beam (set WEIR_BEAM_PYTHON to a Python with apache-beam)");
        return None;
    }
    Some(python)
}

/// Runs `script` (Python building pipeline `p` with `import apache_beam as beam` done) and
/// returns `p` as the PortableRunner submits it (batch, LOOPBACK), or `None` without Beam.
pub fn submitted(script: &str) -> Option<rapi::Pipeline> {
    let python = beam_python()?;
    let program = format!(
        r#"
import sys
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.portable_runner import PortableRunner
options = PipelineOptions(["--environment_type=LOOPBACK"])
p = beam.Pipeline(options=options)
{script}
sys.stdout.write(PortableRunner.get_proto_pipeline(p, options).SerializeToString().hex())
"#
    );
    let out = std::process::Command::new(&python).args(["-c", &program]).output().expect("python runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let hex = String::from_utf8(out.stdout).expect("hex");
    let hex = hex.trim();
    let bytes: Vec<u8> = (0..hex.len() / 2).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()).collect();
    Some(rapi::Pipeline::decode(bytes.as_slice()).expect("a Runner API pipeline"))
}

/// A `weir-job-server` on a free port of 127.0.0.1, killed when dropped.
pub struct JobServer {
    child: std::process::Child,
    /// `localhost:PORT`, for `--job_endpoint`.
    pub endpoint: String,
}

impl JobServer {
    /// Starts the server with `args` (Weir's flags, `--sdk-workers`, ...).
    pub fn start(args: &[&str]) -> JobServer {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_weir-job-server"))
            .args(["--job-port", "0"])
            .args(args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("weir-job-server starts");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().rsplit(':').next().unwrap_or_default().to_string();
        assert!(port.parse::<u16>().is_ok(), "weir-job-server said: {line}");
        JobServer { child, endpoint: format!("localhost:{port}") }
    }

    /// Beam's options to submit to this server, in LOOPBACK.
    pub fn options(&self) -> Vec<String> {
        vec![
            "--runner=PortableRunner".into(),
            format!("--job_endpoint={}", self.endpoint),
            "--environment_type=LOOPBACK".into(),
        ]
    }
}

impl Drop for JobServer {
    /// SIGTERM first, so that the server removes its temporary artifact store; SIGKILL if it
    /// has not ended within 5 s.
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let began = std::time::Instant::now();
        while began.elapsed() < std::time::Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a program given with `-c` runs after it ends without an exception: its output flushed,
/// the interpreter leaves at once. grpcio's channels can deadlock in their finalizers while the
/// interpreter collects garbage on its way out (grpc/grpc#20026: a client whose job had ended
/// DONE hung 300 s in `_channel.__del__`), which says nothing about the runner.
const EXIT_AT_ONCE: &str = "\nimport os as _weir_os, sys as _weir_sys\n_weir_sys.stdout.flush(); _weir_sys.stderr.flush(); _weir_os._exit(0)\n";

/// Runs `python` on `args`; its exit status and its standard output and error.
pub fn python(python: &str, args: &[String]) -> (bool, String, String) {
    use std::io::Read;
    let mut args = args.to_vec();
    if args.first().is_some_and(|a| a == "-c") {
        if let Some(program) = args.get_mut(1) {
            program.push_str(EXIT_AT_ONCE);
        }
    } else if args.first().is_some_and(|a| a.ends_with(".py")) {
        // A script runs as its own `__main__` (its arguments in `sys.argv`), then leaves the same
        // way; an exception it raises still ends Python with a traceback and status 1.
        let script = args.remove(0);
        let program = format!(
            "import os, runpy, sys\nsys.argv = [{script:?}] + sys.argv[1:]\nsys.path.insert(0, os.path.dirname({script:?}))\n\
             runpy.run_path({script:?}, run_name='__main__')\n{EXIT_AT_ONCE}"
        );
        args.splice(0..0, ["-c".to_string(), program]);
    }
    let mut child = std::process::Command::new(python)
        .args(&args)
        // A fatal signal makes Python print every thread's traceback (faulthandler).
        .env("PYTHONFAULTHANDLER", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python runs");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = r.read_to_end(&mut s);
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    // A client that does not end within PYTHON_LIMIT is aborted, and the test fails with where
    // each of its threads waited, rather than hang the suite.
    let began = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if began.elapsed() > PYTHON_LIMIT {
            let _ = std::process::Command::new("kill").args(["-ABRT", &child.id().to_string()]).status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let (out, mut err) = (out.join().unwrap(), err.join().unwrap());
    if status.is_none() {
        err.push_str(&format!("\n(the Python client did not end within {} s and was aborted)", PYTHON_LIMIT.as_secs()));
    }
    (status.is_some_and(|s| s.success()), out, err)
}

/// How long one Python client of the tests may run.
const PYTHON_LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

/// The lines of every file starting with `prefix`, sorted.
pub fn lines_of(prefix: &std::path::Path) -> Vec<String> {
    let dir = prefix.parent().unwrap();
    let name = prefix.file_name().unwrap().to_string_lossy().to_string();
    let mut lines = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().starts_with(&name) && e.path().is_file() {
            lines.extend(std::fs::read_to_string(e.path()).unwrap().lines().map(String::from));
        }
    }
    lines.sort();
    lines
}
