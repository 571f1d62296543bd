//! A fused stage of a pipeline Beam Python submits runs on a real Beam Python SDK harness
//! (`sdk_worker_main`, connected to Weir's Fn API services): the bundle's input goes out on
//! the data stream in Beam's coders, and every element comes back.

mod common;
use std::time::Duration;
use weir_portable::fn_api::{FnError, FnServer, SideInputs};
use weir_portable::harness::{Harnesses, Launch};
use weir_portable::plan::{plan, StageKind};
use weir_portable::stage::describe;
use weir_sdk::coders::{BytesCoder, Coder, FullWindowedValue, WindowCoderKind, WindowedValueCoder};
use weir_sdk::pane::PaneInfo;
use weir_sdk::window::Window;

/// Windowed values in the global window, their values length-prefixed bytes.
fn wire() -> WindowedValueCoder<Vec<u8>> {
    WindowedValueCoder { value: std::sync::Arc::new(BytesCoder), window: WindowCoderKind::Global }
}

#[test]
fn a_fused_stage_runs_a_bundle_on_a_beam_python_harness() {
    let Some(python) = common::beam_python() else { return };
    let p = common::submitted(r#"p | beam.Create(["x", "y", "z"]) | "Double" >> beam.Map(lambda s: s + s)"#).unwrap();
    let plan = plan(&p).unwrap();
    // The stage after Create's impulse: it reads the impulse's one empty element and emits the
    // three created elements (keyed at random for Create's reshuffle).
    let impulse = plan.stages.iter().find(|s| s.kind == StageKind::Impulse).unwrap();
    let stage = plan.stages.iter().find(|s| s.inputs.iter().any(|pc| impulse.outputs.contains(pc))).unwrap();
    let server = FnServer::start().unwrap();
    let launch = Launch::Process { python: python.clone() };
    let _harnesses = Harnesses::start(&launch, &server, &["worker-1".into()], Duration::from_secs(60)).unwrap();
    let d = describe(&p, stage, "stage-1", server.address()).unwrap();
    assert_eq!(d.inputs.len(), 1);
    let empty = FullWindowedValue {
        value: Vec::new(),
        timestamp: weir_sdk::time::MIN_TIMESTAMP,
        windows: vec![Window::Global],
        pane: PaneInfo::NO_FIRING,
    };
    let mut input = Vec::new();
    wire().encode(&empty, &mut input).unwrap();
    let sinks: Vec<String> = d.outputs.iter().map(|o| o.0.clone()).collect();
    let out = server
        .process_bundle(
            "worker-1",
            &d.descriptor,
            (vec![(d.inputs[0].0.clone(), input)], SideInputs::default()),
            &sinks,
            Duration::from_secs(60),
        )
        .unwrap();
    let mut bytes = &out[&sinks[0]][..];
    let mut n = 0;
    while !bytes.is_empty() {
        let v = wire().decode(&mut bytes).unwrap();
        assert_eq!(v.windows, vec![Window::Global]);
        n += 1;
    }
    assert_eq!(n, 3, "one element per created value");

    // A DoFn that raises fails the bundle with its Python traceback.
    let p = common::submitted(r#"p | beam.Impulse() | "Divide" >> beam.Map(lambda _: 1 // 0)"#).unwrap();
    let plan = weir_portable::plan::plan(&p).unwrap();
    let stage = plan.stages.iter().find(|s| matches!(s.kind, StageKind::Sdk { .. })).unwrap();
    let d = describe(&p, stage, "stage-2", server.address()).unwrap();
    let mut input = Vec::new();
    wire().encode(&empty, &mut input).unwrap();
    let sinks: Vec<String> = d.outputs.iter().map(|o| o.0.clone()).collect();
    let err = server
        .process_bundle(
            "worker-1",
            &d.descriptor,
            (vec![(d.inputs[0].0.clone(), input)], SideInputs::default()),
            &sinks,
            Duration::from_secs(60),
        )
        .unwrap_err();
    assert!(matches!(err, FnError::Bundle { .. }), "{err}");
    assert!(err.to_string().contains("ZeroDivisionError"), "{err}");

    // A side input, read through the State API: the iterable of a singleton's one element.
    let p = common::submitted(
        r#"
side = p | "Side" >> beam.Create([b"ten"])
p | beam.Impulse() | "Use" >> beam.Map(lambda _, s: s + b"!", beam.pvalue.AsSingleton(side))
"#,
    )
    .unwrap();
    let plan = weir_portable::plan::plan(&p).unwrap();
    let c = p.components.as_ref().unwrap();
    let stage = plan.stages.iter().find(|s| s.transforms.iter().any(|t| c.transforms[t].unique_name == "Use")).unwrap();
    assert_eq!(stage.side_inputs.len(), 1, "{stage:?}");
    let (transform, name, _) = stage.side_inputs[0].clone();
    let d = describe(&p, stage, "stage-3", server.address()).unwrap();
    let mut element = Vec::new();
    BytesCoder.encode(&b"ten".to_vec(), &mut element).unwrap();
    let mut sides = SideInputs::default();
    // The global window encodes as no bytes.
    sides.iterables.insert((transform, name, Vec::new()), element);
    let mut input = Vec::new();
    wire().encode(&empty, &mut input).unwrap();
    let sinks: Vec<String> = d.outputs.iter().map(|o| o.0.clone()).collect();
    let out = server
        .process_bundle(
            "worker-1",
            &d.descriptor,
            (vec![(d.inputs[0].0.clone(), input)], sides),
            &sinks,
            Duration::from_secs(60),
        )
        .unwrap();
    let mut bytes = &out[&sinks[0]][..];
    let v = wire().decode(&mut bytes).unwrap();
    assert!(bytes.is_empty());
    // The value is the SDK's encoding of b"ten!" (its pickled coder), carried as bytes.
    assert!(v.value.windows(4).any(|w| w == b"ten!"), "{:?}", v.value);
}

/// The first stage of `Create(["x", "y", "z"])`, described for `server`, and its one input.
fn create_stage(server: &FnServer) -> Option<(weir_portable::stage::StageDescriptor, Vec<u8>)> {
    let p = common::submitted(r#"p | beam.Create(["x", "y", "z"])"#)?;
    let plan = plan(&p).unwrap();
    let impulse = plan.stages.iter().find(|s| s.kind == StageKind::Impulse).unwrap();
    let stage = plan.stages.iter().find(|s| s.inputs.iter().any(|pc| impulse.outputs.contains(pc))).unwrap();
    let d = describe(&p, stage, "create", server.address()).unwrap();
    let empty = FullWindowedValue {
        value: Vec::new(),
        timestamp: weir_sdk::time::MIN_TIMESTAMP,
        windows: vec![Window::Global],
        pane: PaneInfo::NO_FIRING,
    };
    let mut input = Vec::new();
    wire().encode(&empty, &mut input).unwrap();
    Some((d, input))
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
    let endpoint = line.trim().to_string();
    let server = FnServer::start().unwrap();
    let launch = Launch::External { endpoint };
    let started = Harnesses::start(&launch, &server, &["pool-1".into()], Duration::from_secs(60));
    let result = started.and_then(|_h| {
        let (d, input) = create_stage(&server).unwrap();
        let sinks: Vec<String> = d.outputs.iter().map(|o| o.0.clone()).collect();
        let input = (vec![(d.inputs[0].0.clone(), input)], SideInputs::default());
        server
            .process_bundle("pool-1", &d.descriptor, input, &sinks, Duration::from_secs(60))
            .map(|o| o[&sinks[0]].clone())
    });
    let _ = pool.kill();
    let _ = pool.wait();
    let out = result.unwrap();
    let (mut bytes, mut n) = (&out[..], 0);
    while !bytes.is_empty() {
        wire().decode(&mut bytes).unwrap();
        n += 1;
    }
    assert_eq!(n, 3);
}

#[test]
fn a_harness_process_that_exits_is_named_with_its_status() {
    let server = FnServer::start().unwrap();
    // A "Python" that exits at once, with status 1.
    let launch = Launch::Process { python: "false".into() };
    let err = Harnesses::start(&launch, &server, &["doomed".into()], Duration::from_secs(30)).err().unwrap();
    assert!(matches!(err, FnError::Gone { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("'doomed'") && text.contains("exit status: 1"), "{text}");
}
