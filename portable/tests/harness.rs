//! Fused stages of pipelines Beam Python submits run on real Beam Python SDK harnesses
//! (`sdk_worker_main`, or a worker pool's, connected to Weir's Fn API services): a bundle's
//! input goes out on the data stream in Beam's coders and every element comes back; side
//! inputs are read through the State API; a raising DoFn and a harness that exits fail clearly.

mod common;
use std::time::Duration;
use weir_portable::preprocess::descriptor::{describe, StageDescriptor};
use weir_portable::preprocess::plan;
use weir_portable::proto::pipeline::v1 as rapi;
use weir_portable::worker::harness::{Harnesses, Launch};
use weir_portable::worker::{FnServer, SideInputs};
use weir_portable::Error;
use weir_sdk::coders::{BytesCoder, Coder, FullWindowedValue, WindowCoderKind, WindowedValueCoder};
use weir_sdk::pane::PaneInfo;
use weir_sdk::window::Window;

const MINUTE: Duration = Duration::from_secs(60);

/// A PROCESS environment whose command names no executable: Beam Python's harness, run with
/// `python`.
fn python_harness(python: &str) -> Launch {
    Launch::Process { command: "started by weir-job-server".into(), env: Vec::new(), python: python.into() }
}

/// Windowed values in the global window, their values length-prefixed bytes.
fn wire() -> WindowedValueCoder<Vec<u8>> {
    WindowedValueCoder { value: std::sync::Arc::new(BytesCoder), window: WindowCoderKind::Global }
}

/// The impulse's one element: empty bytes in the global window, at the start of time.
fn impulse() -> Vec<u8> {
    let empty = FullWindowedValue {
        value: Vec::new(),
        timestamp: weir_sdk::time::MIN_TIMESTAMP,
        windows: vec![Window::Global],
        pane: PaneInfo::NO_FIRING,
    };
    let mut input = Vec::new();
    wire().encode(&empty, &mut input).unwrap();
    input
}

/// The stage of `p` holding the transform whose name starts with `name`, described as `id` for
/// `server`.
fn stage_with(p: &rapi::Pipeline, name: &str, id: &str, server: &FnServer) -> (StageDescriptor, Vec<(String, String)>) {
    let plan = plan(p).unwrap();
    let p = &plan.pipeline;
    let c = p.components.as_ref().unwrap();
    let stage = plan
        .stages
        .iter()
        .find(|s| s.transforms.iter().any(|t| c.transforms[t].unique_name.starts_with(name)))
        .unwrap();
    let sides = stage.side_inputs.iter().map(|(t, n, _)| (t.clone(), n.clone())).collect();
    (describe(p, stage, id, server.address()).unwrap(), sides)
}

/// Runs a bundle of the impulse's element through stage `d` on `worker`: its first output.
fn run(server: &FnServer, worker: &str, d: &StageDescriptor, sides: SideInputs) -> Result<Vec<u8>, Error> {
    let sinks: Vec<String> = d.outputs.iter().map(|o| o.0.clone()).collect();
    let input = (vec![(d.inputs[0].0.clone(), impulse())], sides);
    let mut out = server.process_bundle(worker, &d.descriptor, input, &sinks, MINUTE)?;
    Ok(out.outputs.remove(&sinks[0]).unwrap_or_default())
}

/// The windowed values in `bytes`.
fn values(mut bytes: &[u8]) -> Vec<FullWindowedValue<Vec<u8>>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let v = wire().decode(&mut bytes).unwrap();
        assert_eq!(v.windows, vec![Window::Global]);
        out.push(v);
    }
    out
}

#[test]
fn a_fused_stage_runs_a_bundle_on_a_beam_python_harness() {
    let Some(python) = common::beam_python() else { return };
    let server = FnServer::start().unwrap();
    let launch = python_harness(&python);
    let _harnesses = Harnesses::start(&launch, &server, &["worker-1".into()], MINUTE).unwrap();

    // Create's first stage reads the impulse's element and emits the created ones (keyed at
    // random for Create's reshuffle).
    let p = common::submitted(r#"p | beam.Create(["x", "y", "z"]) | "Double" >> beam.Map(lambda s: s + s)"#).unwrap();
    let (d, _) = stage_with(&p, "Create/FlatMap(", "create", &server);
    assert_eq!(values(&run(&server, "worker-1", &d, SideInputs::default()).unwrap()).len(), 3);

    // A DoFn that raises fails the bundle with its Python traceback.
    let p = common::submitted(r#"p | beam.Impulse() | "Divide" >> beam.Map(lambda _: 1 // 0)"#).unwrap();
    let (d, _) = stage_with(&p, "Divide", "divide", &server);
    let err = run(&server, "worker-1", &d, SideInputs::default()).unwrap_err();
    assert!(matches!(err, Error::Bundle { .. }), "{err}");
    assert!(err.to_string().contains("ZeroDivisionError"), "{err}");

    // A side input, read through the State API: the iterable of a singleton's one element.
    let p = common::submitted(
        r#"
side = p | "Side" >> beam.Create([b"ten"])
p | beam.Impulse() | "Use" >> beam.Map(lambda _, s: s + b"!", beam.pvalue.AsSingleton(side))
"#,
    )
    .unwrap();
    let (d, side_inputs) = stage_with(&p, "Use", "use", &server);
    assert_eq!(side_inputs.len(), 1);
    let mut element = Vec::new();
    BytesCoder.encode(&b"ten".to_vec(), &mut element).unwrap();
    let mut sides = SideInputs::default();
    // The global window encodes as no bytes.
    let (transform, name) = side_inputs[0].clone();
    sides.iterables.insert((transform, name, Vec::new()), std::sync::Arc::new(element));
    let out = values(&run(&server, "worker-1", &d, sides).unwrap());
    // The value is the SDK's encoding of b"ten!" (its pickled coder), carried as bytes.
    assert_eq!(out.len(), 1);
    assert!(out[0].value.windows(4).any(|w| w == b"ten!"), "{:?}", out[0].value);
}

#[test]
fn a_worker_pool_starts_harnesses_on_request() {
    let Some(python) = common::beam_python() else { return };
    // Beam Python's worker pool, as LOOPBACK runs it in the submitting process.
    let script = "import sys, time\n\
from apache_beam.runners.worker.worker_pool_main import BeamFnExternalWorkerPoolServicer as Pool\n\
address, server = Pool.start(port=0, use_process=False)\n\
print(address, flush=True)\n\
time.sleep(600)\n";
    let mut pool = std::process::Command::new(&python)
        .args(["-c", script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(pool.stdout.take().unwrap()), &mut line).unwrap();
    let server = FnServer::start().unwrap();
    let launch = Launch::External { endpoint: line.trim().to_string() };
    let p = common::submitted(r#"p | beam.Create(["x", "y", "z"])"#).unwrap();
    let (d, _) = stage_with(&p, "Create/FlatMap(", "create", &server);
    let result = Harnesses::start(&launch, &server, &["pool-1".into()], MINUTE)
        .and_then(|_h| run(&server, "pool-1", &d, SideInputs::default()));
    let _ = pool.kill();
    let _ = pool.wait();
    assert_eq!(values(&result.unwrap()).len(), 3);
}

#[test]
fn a_harness_process_that_exits_is_named_with_its_status() {
    let server = FnServer::start().unwrap();
    // A "Python" that exits at once, with status 1.
    let launch = python_harness("false");
    let err = Harnesses::start(&launch, &server, &["doomed".into()], Duration::from_secs(30)).err().unwrap();
    assert!(matches!(err, Error::Gone { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("'doomed'") && text.contains("exit status: 1"), "{text}");
}

#[test]
fn a_process_environment_s_command_runs_as_beam_defines_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // A "boot" that writes down its arguments and its environment's variable, then exits 3.
    let said = dir.path().join("said");
    let boot = dir.path().join("boot");
    std::fs::write(&boot, format!("#!/bin/sh\necho \"$@ FLAVOR=$FLAVOR\" > {}\nexit 3\n", said.display())).unwrap();
    std::fs::set_permissions(&boot, std::fs::Permissions::from_mode(0o755)).unwrap();
    let server = FnServer::start().unwrap();
    server.set_artifact_endpoint(Some("127.0.0.1:9".into()));
    let launch = Launch::Process {
        command: boot.to_string_lossy().into_owned(),
        env: vec![("FLAVOR".into(), "java".into())],
        python: "no-python-needed".into(),
    };
    let err = Harnesses::start(&launch, &server, &["booted".into()], Duration::from_secs(30)).err().unwrap();
    assert!(err.to_string().contains("'booted'") && err.to_string().contains("exit status: 3"), "{err}");
    let said = std::fs::read_to_string(&said).unwrap();
    let address = server.address();
    for flag in [
        "--id=booted".to_string(),
        format!("--provision_endpoint={address}"),
        format!("--control_endpoint={address}"),
        format!("--logging_endpoint={address}"),
        "--artifact_endpoint=127.0.0.1:9".to_string(),
        "--semi_persist_dir=".to_string(),
        "FLAVOR=java".to_string(),
    ] {
        assert!(said.contains(&flag), "{flag} not in: {said}");
    }
}

#[test]
fn stages_chain_through_weir_with_values_carried_as_bytes() {
    let Some(python) = common::beam_python() else { return };
    let server = FnServer::start().unwrap();
    let launch = python_harness(&python);
    let _harnesses = Harnesses::start(&launch, &server, &["worker-1".into()], MINUTE).unwrap();
    // Create's first stage, Weir's reshuffle (which moves elements, bytes untouched), then the
    // stage decoding them and doubling each.
    let p = common::submitted(r#"p | beam.Create(["x", "y", "z"]) | "Double" >> beam.Map(lambda s: s + s)"#).unwrap();
    let (first, _) = stage_with(&p, "Create/FlatMap(", "first", &server);
    let (second, _) = stage_with(&p, "Double", "second", &server);
    let created = run(&server, "worker-1", &first, SideInputs::default()).unwrap();
    let sinks: Vec<String> = second.outputs.iter().map(|o| o.0.clone()).collect();
    let input = (vec![(second.inputs[0].0.clone(), created.clone())], SideInputs::default());
    let out = server.process_bundle("worker-1", &second.descriptor, input, &sinks, MINUTE).unwrap().outputs;
    let mut doubled: Vec<String> = values(&out[&sinks[0]])
        .into_iter()
        .map(|v| String::from_utf8_lossy(&v.value).chars().filter(|c| c.is_ascii_lowercase()).collect())
        .collect();
    doubled.sort();
    assert_eq!(doubled, vec!["xx", "yy", "zz"]);

    // Two bundles running at once on one harness, ended last first: each gets its own output.
    use weir_portable::worker::Port;
    let ports: Vec<Port> = sinks.iter().cloned().map(Port::Data).collect();
    let begin = |input: Vec<u8>| {
        let input = vec![(Port::Data(second.inputs[0].0.clone()), input)];
        server.begin_bundle("worker-1", &second.descriptor, (input, SideInputs::default()), &ports, None, MINUTE)
    };
    let mut rest = &created[..];
    wire().decode(&mut rest).unwrap();
    let first_element = created[..created.len() - rest.len()].to_vec();
    let (a, b) = (begin(created).unwrap(), begin(first_element));
    let b = server.end_bundle(b.unwrap(), None, MINUTE).unwrap();
    let a = server.end_bundle(a, None, MINUTE).unwrap();
    assert_ne!(a.instruction, b.instruction);
    assert_eq!(values(&a.outputs[&sinks[0]]).len(), 3);
    assert_eq!(values(&b.outputs[&sinks[0]]).len(), 1);
}

#[test]
fn the_provision_service_and_process_harnesses_get_the_job_s_options() {
    use prost_types::{value::Kind, Struct, Value};
    use weir_portable::proto::fn_execution::v1::provision_service_client::ProvisionServiceClient;
    use weir_portable::proto::fn_execution::v1::GetProvisionInfoRequest;
    let server = FnServer::start().unwrap();
    let text = |s: &str| Value { kind: Some(Kind::StringValue(s.into())) };
    let mut options = Struct::default();
    options.fields.insert("beam:option:job_name:v1".into(), text("say \"hi\"\n"));
    options.fields.insert("beam:option:streaming:v1".into(), Value { kind: Some(Kind::BoolValue(false)) });
    server.set_pipeline_options(options.clone());
    // As a PROCESS harness reads it from its environment.
    assert_eq!(
        server.pipeline_options_json(),
        r#"{"beam:option:job_name:v1":"say \"hi\"\u000a","beam:option:streaming:v1":false}"#
    );
    // As a harness started by a worker pool asks for it.
    let url = format!("http://{}", server.address());
    let info = server.block_on(async move {
        let mut client = ProvisionServiceClient::connect(url).await.unwrap();
        client.get_provision_info(GetProvisionInfoRequest {}).await.unwrap().into_inner().info.unwrap()
    });
    assert_eq!(info.pipeline_options, Some(options));
    assert_eq!(info.control_endpoint.unwrap().url, server.address());
}
