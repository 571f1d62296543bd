//! The plan of pipelines Beam Python submits: Weir's own transforms, the harness's fused into
//! stages, and what cannot run refused at Prepare, naming the transform and the URN.

mod common;
use weir_portable::preprocess::descriptor::describe;
use weir_portable::preprocess::{plan, StageKind};
use weir_portable::proto::pipeline::v1 as rapi;
use weir_portable::Error;

/// The unique names of a stage's transforms.
fn names(p: &rapi::Pipeline, ids: &[String]) -> Vec<String> {
    let c = p.components.as_ref().unwrap();
    ids.iter().map(|id| c.transforms[id].unique_name.clone()).collect()
}

#[test]
fn a_grouping_pipeline_fuses_into_harness_stages_around_weirs_own_transforms() {
    let Some(p) = common::submitted(
        r#"
words = p | beam.Create(["a b", "b c"]) | beam.FlatMap(str.split)
side = p | "Side" >> beam.Create([1])
counts = (words | "Pair" >> beam.Map(lambda w, n: (w, n), beam.pvalue.AsSingleton(side))
          | beam.GroupByKey() | beam.CombinePerKey(sum) | "Format" >> beam.Map(str))
"#,
    ) else {
        return;
    };
    let plan = plan(&p).expect("a pipeline Weir runs");
    let kinds: Vec<&StageKind> = plan.stages.iter().map(|s| &s.kind).collect();
    // Two impulses; the reshuffle inside Create; two GroupByKeys (the user's, the lifted
    // combine's; Create's reshuffle is Weir's own).
    assert_eq!(kinds.iter().filter(|k| matches!(k, StageKind::Impulse)).count(), 2, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| matches!(k, StageKind::Reshuffle)).count(), 1, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| matches!(k, StageKind::GroupByKey { .. })).count(), 2, "{kinds:?}");
    // Every stage comes after the stages it reads.
    let mut made = std::collections::BTreeSet::new();
    for s in &plan.stages {
        for pc in s.inputs.iter().chain(s.side_inputs.iter().map(|x| &x.2)) {
            assert!(made.contains(pc), "stage {:?} reads {pc} before it is made", names(&plan.pipeline, &s.transforms));
        }
        made.extend(s.outputs.iter().cloned());
    }
    // The side input's stage is not the stage that reads it, and the combine's precombine is
    // fused with the transforms before it; merge, extract and format after the grouping are
    // one stage.
    let stage_of = |name: &str| {
        plan.stages.iter().position(|s| names(&plan.pipeline, &s.transforms).iter().any(|n| n == name)).expect(name)
    };
    assert_ne!(stage_of("Side/Map(decode)"), stage_of("Pair"));
    assert_eq!(stage_of("FlatMap(split)"), stage_of("Pair"));
    assert_eq!(stage_of("CombinePerKey(sum)/Merge"), stage_of("Format"));
    assert_eq!(stage_of("CombinePerKey(sum)/ExtractOutputs"), stage_of("Format"));
    let pair = &plan.stages[stage_of("Pair")];
    assert_eq!(pair.side_inputs.len(), 1, "{pair:?}");
}

#[test]
fn what_weir_lacks_is_refused_naming_the_transform_and_the_urn() {
    // User state in windows that merge.
    let Some(p) = common::submitted(
        r#"
from apache_beam.transforms import window
from apache_beam.transforms.userstate import BagStateSpec
from apache_beam.coders import VarIntCoder
class Buffer(beam.DoFn):
    BAG = BagStateSpec("bag", VarIntCoder())
    def process(self, kv, bag=beam.DoFn.StateParam(BAG)):
        bag.add(kv[1])
        yield kv
(p | beam.Create([("a", 1)]) | beam.WindowInto(window.Sessions(10))
   | "Stateful" >> beam.ParDo(Buffer()))
"#,
    ) else {
        return;
    };
    let err = plan(&p).expect_err("user state in merging windows is refused");
    match &err {
        Error::Unsupported { transform, urn, why } => {
            assert_eq!(transform, "Stateful");
            assert_eq!(urn, "beam:transform:pardo:v1");
            assert!(why.contains("state and timers in merging windows"), "{err}");
        }
        other => panic!("{other}"),
    }
    // A transform URN Weir does not know.
    let mut p = common::submitted(r#"p | beam.Create([1]) | "Odd" >> beam.Map(lambda x: x)"#).unwrap();
    let c = p.components.as_mut().unwrap();
    let odd = c.transforms.values_mut().find(|t| t.unique_name == "Odd").unwrap();
    odd.spec.as_mut().unwrap().urn = "beam:transform:fancy:v1".into();
    let err = plan(&p).expect_err("an unknown URN is refused");
    assert_eq!(
        err.to_string(),
        "transform 'Odd' (beam:transform:fancy:v1) cannot run on Weir: Weir does not know this transform"
    );
    // A window function only the SDK knows whose windows never merge and are interval windows
    // runs: the harness assigns them, and Weir groups on windows it reads.
    let odd = r#"
from apache_beam.transforms import window
class Odd(window.NonMergingWindowFn):
    def assign(self, c):
        return [window.IntervalWindow(0, 10)]
    def get_window_coder(self):
        return beam.coders.coders.IntervalWindowCoder()
(p | beam.Create([("a", 1)]) | "MyWindows" >> beam.WindowInto(Odd()) | "Group" >> beam.GroupByKey())
"#;
    assert!(plan(&common::submitted(odd).unwrap()).is_ok(), "an SDK's non-merging interval windows plan");
    // One whose windows merge plans too (a harness merges them when the job runs)...
    let merging = r#"
from apache_beam.transforms import window
class OwnCoder(beam.coders.Coder):
    def encode(self, w):
        return beam.coders.coders.IntervalWindowCoder().encode(w)
    def decode(self, b):
        return beam.coders.coders.IntervalWindowCoder().decode(b)
    def is_deterministic(self):
        return True
class Odd(window.WindowFn):
    def assign(self, c):
        return [window.IntervalWindow(c.timestamp, c.timestamp + 10)]
    def merge(self, merge_context):
        pass
    def get_window_coder(self):
        return CODER
(p | beam.Create([("a", 1)]) | "MyWindows" >> beam.WindowInto(Odd()) | "Group" >> beam.GroupByKey())
"#;
    let interval = merging.replace("CODER", "beam.coders.coders.IntervalWindowCoder()");
    assert!(plan(&common::submitted(&interval).unwrap()).is_ok(), "an SDK's merging interval windows plan");
    // ... and one whose windows are coded by a coder of the SDK's own: Weir asks the harnesses
    // to write each window after its last instant, length-prefixed, and carries it as bytes.
    let own = merging.replace("CODER", "OwnCoder()");
    let planned = plan(&common::submitted(&own).unwrap()).expect("windows of an SDK coder plan");
    let mut custom = 0;
    for (i, stage) in planned.stages.iter().enumerate().filter(|(_, s)| matches!(s.kind, StageKind::Sdk { .. })) {
        let d = describe(&planned.pipeline, stage, &format!("s{i}"), "127.0.0.1:1").unwrap();
        let urn = |id: &str| d.descriptor.coders[id].spec.as_ref().unwrap().urn.clone();
        for c in d.descriptor.coders.values().filter(|c| c.spec.as_ref().unwrap().urn == "beam:coder:custom_window:v1")
        {
            assert_eq!(urn(&c.component_coder_ids[0]), "beam:coder:length_prefix:v1");
            custom += 1;
        }
    }
    assert!(custom >= 1, "the harnesses write SDK windows after their last instant: {custom}");
}

/// Every data port of every harness stage has a wire coder Weir can delimit: for the grouping's
/// input a KV whose key stands apart, for its output a KV of a key and an iterable.
#[test]
fn every_data_port_speaks_a_wire_form_weir_can_delimit() {
    use prost::Message;
    use weir_portable::preprocess::wire::Wire;
    use weir_portable::proto::fn_execution::v1::RemoteGrpcPort;
    let Some(p) = common::submitted(
        r#"
(p | beam.Create([("a", 1), ("b", 2), ("a", 3)]) | "Group" >> beam.GroupByKey()
   | "Sizes" >> beam.Map(lambda kv: (kv[0], len(list(kv[1])))))
"#,
    ) else {
        return;
    };
    let plan = plan(&p).unwrap();
    let mut ports = 0;
    for (i, stage) in plan.stages.iter().enumerate().filter(|(_, s)| matches!(s.kind, StageKind::Sdk { .. })) {
        let d = describe(&plan.pipeline, stage, &format!("s{i}"), "127.0.0.1:1").unwrap();
        for t in d.inputs.iter().map(|x| &x.0).chain(d.outputs.iter().map(|x| &x.0)) {
            let spec = d.descriptor.transforms[t].spec.as_ref().unwrap();
            let port = RemoteGrpcPort::decode(spec.payload.as_slice()).unwrap();
            let wire = Wire::of(&d.descriptor.coders, &port.coder_id).unwrap();
            ports += 1;
            // The grouping's output reaches "Sizes" as a key and an iterable of values.
            if d.inputs.iter().any(|x| &x.0 == t)
                && names(&plan.pipeline, &stage.transforms).iter().any(|n| n == "Sizes")
            {
                assert!(matches!(&wire, Wire::Kv(_, v) if matches!(**v, Wire::Iterable(_))), "{wire:?}");
            }
        }
    }
    assert!(ports >= 4, "{ports}");
}

/// A Docker environment (which cannot start here) is refused when the pipeline is planned, at
/// Prepare, naming the environment and what to use instead, not when the job runs.
#[test]
fn a_docker_environment_is_refused_at_prepare() {
    let Some(mut p) = common::submitted(r#"p | beam.Create([1]) | "Double" >> beam.Map(lambda x: 2 * x)"#) else {
        return;
    };
    for env in p.components.as_mut().unwrap().environments.values_mut() {
        env.urn = "beam:env:docker:v1".into();
        env.payload = Vec::new();
    }
    let planned = plan(&p).expect("planned");
    let err = weir_portable::jobservices::job::check_environments(&planned)
        .expect_err("a Docker environment is refused")
        .to_string();
    assert!(err.contains("beam:env:docker:v1") && err.contains("LOOPBACK, EXTERNAL or PROCESS"), "{err}");
}

/// A Flatten of differently windowed inputs is planned (Beam Python warns, and keeps each
/// element's window), and so is a TestStream of several tagged outputs.
#[test]
fn flattens_of_several_windowings_and_test_streams_of_several_outputs_are_planned() {
    let Some(p) = common::submitted(
        r#"
from apache_beam.transforms import window
from apache_beam.testing.test_stream import TestStream
s = p | TestStream().add_elements([1], tag="a").add_elements([2], tag="b").advance_watermark_to_infinity(tag="a").advance_watermark_to_infinity(tag="b")
fixed = s["a"] | "F" >> beam.WindowInto(window.FixedWindows(10))
sessions = s["b"] | "S" >> beam.WindowInto(window.Sessions(10))
(fixed, sessions) | beam.Flatten() | beam.Map(str)
"#,
    ) else {
        return;
    };
    let plan = plan(&p).expect("planned");
    let streams: Vec<_> = plan.stages.iter().filter(|s| s.kind == StageKind::TestStream).collect();
    assert_eq!(streams.len(), 1);
    assert_eq!(streams[0].outputs.len(), 2, "{:?}", streams[0]);
}

/// A GroupByKey's output read by a Flatten whose output has another coder: Weir makes the
/// groups, so a stage of no transforms of its own has a harness re-encode them.
#[test]
fn a_flatten_of_weir_made_values_in_another_coder_gets_a_re_encoding_stage() {
    let Some(p) = common::submitted(
        r#"
grouped = p | "Pairs" >> beam.Create([(1, "a"), (1, "b")]) | beam.GroupByKey()
other = p | "Other" >> beam.Create([("none", "x")])
(grouped, other) | beam.Flatten() | beam.Map(str)
"#,
    ) else {
        return;
    };
    let plan = plan(&p).expect("planned");
    let c = plan.pipeline.components.as_ref().unwrap();
    let gbk = plan.stages.iter().find(|s| matches!(s.kind, StageKind::GroupByKey { .. })).unwrap();
    let flatten = plan.stages.iter().position(|s| s.kind == StageKind::Flatten).unwrap();
    let recode = plan.stages.iter().position(|s| s.transforms.is_empty()).expect("a re-encoding stage");
    let stage = &plan.stages[recode];
    assert!(matches!(stage.kind, StageKind::Sdk { .. }), "{stage:?}");
    assert_eq!(stage.inputs, gbk.outputs);
    let (pc, as_pc) = &stage.transcoded[0];
    assert_eq!(pc, &gbk.outputs[0]);
    assert_eq!(as_pc, &plan.stages[flatten].outputs[0]);
    assert_ne!(c.pcollections[pc].coder_id, c.pcollections[as_pc].coder_id);
    assert!(recode < flatten, "the re-encoding runs before the Flatten reads it");
}
