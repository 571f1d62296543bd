//! The compiled protos are Beam's: `proto/check.py` compares every message, field, enum value
//! and service method of `proto/beam.binpb` with the descriptors of the installed `apache-beam`
//! (the Python of `WEIR_BEAM_PYTHON`, which CI installs), and the compiled messages encode
//! Beam's field numbers.

mod common;
use common::beam_python;
use prost::Message;
use weir_portable::proto::pipeline::v1 as pipeline;

#[test]
fn the_descriptors_are_those_of_the_installed_apache_beam() {
    let Some(python) = beam_python() else { return };
    let out = std::process::Command::new(&python)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/proto/check.py"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{python} proto/check.py:\n{text}");
    assert!(text.contains(": 0 differences"), "{text}");
}

#[test]
fn messages_encode_beams_field_numbers() {
    // Pipeline.root_transform_ids is field 2, a repeated string: tag (2 << 3 | 2) = 0x12.
    let p = pipeline::Pipeline { root_transform_ids: vec!["a".into()], ..Default::default() };
    assert_eq!(p.encode_to_vec(), vec![0x12, 1, b'a']);
    // FunctionSpec: urn is field 1, payload field 3.
    let f = pipeline::FunctionSpec { urn: "u".into(), payload: vec![7] };
    assert_eq!(f.encode_to_vec(), vec![0x0a, 1, b'u', 0x1a, 1, 7]);
}

/// A pipeline Beam Python builds (Create, Map, GroupByKey, CombinePerKey, a side input), as its
/// Runner API proto, decodes here to the same transforms, URNs and coders.
#[test]
fn a_pipeline_from_beam_python_decodes() {
    let script = r#"
import json, sys
import apache_beam as beam
p = beam.Pipeline()
words = p | beam.Create(["a b", "b c"]) | beam.FlatMap(str.split)
side = p | "Side" >> beam.Create([1])
counts = (words | beam.Map(lambda w, n: (w, n), beam.pvalue.AsSingleton(side))
          | beam.GroupByKey() | beam.CombinePerKey(sum))
proto = p.to_runner_api()
print(json.dumps({
    "hex": proto.SerializeToString().hex(),
    "transforms": {k: t.spec.urn for k, t in proto.components.transforms.items()},
    "coders": {k: c.spec.urn for k, c in proto.components.coders.items()},
    "roots": list(proto.root_transform_ids),
}))
"#;
    let Some(python) = beam_python() else { return };
    let out = std::process::Command::new(&python).args(["-c", script]).output().expect("python");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let line = String::from_utf8_lossy(&out.stdout);
    let line = line.lines().last().expect("a line of JSON");
    let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
    let hex = v["hex"].as_str().expect("hex");
    let bytes: Vec<u8> = (0..hex.len() / 2).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()).collect();
    let p = pipeline::Pipeline::decode(bytes.as_slice()).expect("a Runner API pipeline");
    let c = p.components.expect("components");
    let urns = |m: &serde_json::Value| -> std::collections::BTreeMap<String, String> {
        m.as_object().unwrap().iter().map(|(k, u)| (k.clone(), u.as_str().unwrap().to_string())).collect()
    };
    let ours: std::collections::BTreeMap<String, String> = c
        .transforms
        .iter()
        .map(|(k, t)| (k.clone(), t.spec.as_ref().map_or(String::new(), |s| s.urn.clone())))
        .collect();
    assert_eq!(ours, urns(&v["transforms"]));
    assert!(ours.values().any(|u| u == "beam:transform:group_by_key:v1"), "{ours:?}");
    let coders: std::collections::BTreeMap<String, String> =
        c.coders.iter().map(|(k, x)| (k.clone(), x.spec.as_ref().map_or(String::new(), |s| s.urn.clone()))).collect();
    assert_eq!(coders, urns(&v["coders"]));
    assert_eq!(serde_json::json!(p.root_transform_ids), v["roots"]);
}
