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
