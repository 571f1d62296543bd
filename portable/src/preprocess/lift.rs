//! Combiner lifting, as Beam's runners do it, before planning: a CombinePerKey becomes a
//! precombine in the harness (each bundle's values combined per key and window into
//! accumulators), Weir's GroupByKey of the accumulators, then, in the harness again, the
//! accumulators of each key merged and the output extracted. Far fewer elements cross to Weir
//! and back than the pairs the combine reads.
//!
//! A trigger that must see every element (an element count above one, say) would see
//! accumulators instead, so such a combine keeps its own expansion, as Beam's runners do.

use std::collections::HashMap;

use crate::proto::pipeline::v1 as rapi;
use crate::Error;
use prost::Message;
use rapi::trigger::Trigger as T;
use weir_sdk::urns;

/// Whether `t` lets elements be combined before it sees them.
fn lifts_under(t: Option<&rapi::Trigger>) -> bool {
    let all = |ts: &[rapi::Trigger]| ts.iter().all(|t| lifts_under(Some(t)));
    match t.and_then(|t| t.trigger.as_ref()) {
        None => true,
        Some(T::Default(_) | T::Always(_) | T::Never(_)) => true,
        Some(T::AfterProcessingTime(_) | T::AfterSynchronizedProcessingTime(_)) => true,
        Some(T::ElementCount(n)) => n.element_count == 1,
        Some(T::AfterEndOfWindow(w)) => {
            lifts_under(w.early_firings.as_deref()) && lifts_under(w.late_firings.as_deref())
        }
        Some(T::AfterAny(a)) => all(&a.subtriggers),
        Some(T::Repeat(r)) => lifts_under(r.subtrigger.as_deref()),
        Some(_) => false,
    }
}

fn only<'a>(m: &'a HashMap<String, String>, t: &rapi::PTransform, what: &str) -> Result<&'a str, Error> {
    match m.values().collect::<Vec<_>>().as_slice() {
        [one] => Ok(one.as_str()),
        _ => Err(Error::Malformed(format!("CombinePerKey '{}' has {} {what}s", t.unique_name, m.len()))),
    }
}

fn add_coder(c: &mut rapi::Components, urn: &str, parts: Vec<String>) -> String {
    let id = crate::preprocess::sdf::fresh(&c.coders, "lifted");
    let spec = rapi::FunctionSpec { urn: urn.into(), payload: Vec::new() };
    c.coders.insert(id.clone(), rapi::Coder { spec: Some(spec), component_coder_ids: parts });
    id
}

fn add_pcollection(c: &mut rapi::Components, name: String, coder: String, like: &rapi::PCollection) -> String {
    let id = crate::preprocess::sdf::fresh(&c.pcollections, "lifted");
    let pc = rapi::PCollection { unique_name: name, coder_id: coder, ..like.clone() };
    c.pcollections.insert(id.clone(), pc);
    id
}

/// The four transforms replacing CombinePerKey `id`, added to `c`, or `None` if its trigger
/// needs every element.
fn lift_one(c: &mut rapi::Components, id: &str) -> Result<Option<Vec<String>>, Error> {
    let t = c.transforms[id].clone();
    let input = c.pcollections.get(only(&t.inputs, &t, "input")?).cloned();
    let output = c.pcollections.get(only(&t.outputs, &t, "output")?).cloned();
    let (Some(input), Some(output)) = (input, output) else {
        return Err(Error::Malformed(format!("CombinePerKey '{}' reads or makes no PCollection", t.unique_name)));
    };
    if !lifts_under(c.windowing_strategies.get(&input.windowing_strategy_id).and_then(|w| w.trigger.as_ref())) {
        return Ok(None);
    }
    let payload = t.spec.as_ref().map_or(&[][..], |s| &s.payload[..]);
    let combine = rapi::CombinePayload::decode(payload)
        .map_err(|e| Error::Malformed(format!("CombinePerKey '{}': {e}", t.unique_name)))?;
    let key = c.coders.get(&input.coder_id).and_then(|k| k.component_coder_ids.first().cloned());
    let key = key.ok_or_else(|| Error::Malformed(format!("CombinePerKey '{}' reads no KVs", t.unique_name)))?;
    let acc = combine.accumulator_coder_id.clone();
    let key_acc = add_coder(c, urns::coders::KV, vec![key.clone(), acc.clone()]);
    let accs = add_coder(c, urns::coders::ITERABLE, vec![acc]);
    let key_accs = add_coder(c, urns::coders::KV, vec![key, accs]);
    let precombined = add_pcollection(c, format!("{}/Precombine.out", t.unique_name), key_acc.clone(), &input);
    let grouped = add_pcollection(c, format!("{}/Group.out", t.unique_name), key_accs, &output);
    let merged = add_pcollection(c, format!("{}/Merge.out", t.unique_name), key_acc, &output);
    // The harness's parts run where the combine's own code does.
    let environment = if t.environment_id.is_empty() {
        t.subtransforms
            .iter()
            .filter_map(|s| c.transforms.get(s))
            .map(|s| s.environment_id.clone())
            .find(|e| !e.is_empty())
    } else {
        Some(t.environment_id.clone())
    };
    let environment = environment.unwrap_or_default();
    let mut part =
        |suffix: &str, urn: &str, input: HashMap<String, String>, outputs: HashMap<String, String>, env: &str| {
            let x = rapi::PTransform {
                unique_name: format!("{}/{suffix}", t.unique_name),
                spec: Some(rapi::FunctionSpec {
                    urn: urn.into(),
                    payload: if urn == urns::GROUP_BY_KEY { Vec::new() } else { payload.to_vec() },
                }),
                inputs: input,
                outputs,
                annotations: t.annotations.clone(),
                environment_id: env.to_string(),
                ..Default::default()
            };
            let new_id = crate::preprocess::sdf::fresh(&c.transforms, &format!("{id}/{suffix}"));
            c.transforms.insert(new_id.clone(), x);
            new_id
        };
    let one = |k: &str, pc: &str| HashMap::from([(k.to_string(), pc.to_string())]);
    Ok(Some(vec![
        part("Precombine", urns::COMBINE_PRECOMBINE, t.inputs.clone(), one("out", &precombined), &environment),
        part("Group", urns::GROUP_BY_KEY, one("in", &precombined), one("out", &grouped), ""),
        part("Merge", urns::COMBINE_MERGE, one("in", &grouped), one("out", &merged), &environment),
        part("ExtractOutputs", urns::COMBINE_EXTRACT, one("in", &merged), t.outputs.clone(), &environment),
    ]))
}

/// The pipeline with every CombinePerKey whose trigger allows it lifted.
pub fn lift(pipeline: &rapi::Pipeline) -> Result<rapi::Pipeline, Error> {
    let mut p = pipeline.clone();
    let c = p.components.as_mut().ok_or_else(|| Error::Malformed("no components".into()))?;
    let mut combines: Vec<String> = c
        .transforms
        .iter()
        .filter(|(_, t)| t.spec.as_ref().is_some_and(|s| s.urn == urns::COMBINE_PER_KEY))
        .map(|(id, _)| id.clone())
        .collect();
    combines.sort();
    for id in combines {
        let Some(parts) = lift_one(c, &id)? else { continue };
        // The parts replace the composite's expansion: they are its subtransforms now, and
        // leaves themselves.
        if let Some(t) = c.transforms.get_mut(&id) {
            t.subtransforms = parts;
        }
    }
    Ok(p)
}
