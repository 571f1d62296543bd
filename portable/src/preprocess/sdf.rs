//! Splittable DoFns, expanded as Beam's runners expand them, before planning.
//!
//! A splittable ParDo (one with a restriction coder) becomes four transforms: the harness pairs
//! each element with its initial restriction, then splits the restrictions and sizes them;
//! Weir reshuffles the sized restrictions, so that one element's parts (a file's byte ranges,
//! say) spread over Weir's partitions; then the harness processes each element and restriction.
//! The harness may hand back the unprocessed rest of a restriction (a residual, when the DoFn
//! defers it); the stage's operator runs it as a further bundle.

use std::collections::HashMap;

use crate::proto::pipeline::v1 as rapi;
use crate::Error;
use prost::Message;
use weir_sdk::urns;

/// `pipeline` and `stage` (a stage whose first transform processes a splittable DoFn's sized
/// restrictions) with the restrictions truncated first, as a drain runs them: a truncating
/// copy of the process transform reads the stage's input, and the process transform its
/// output.
pub fn truncating(
    pipeline: &rapi::Pipeline,
    stage: &crate::preprocess::Stage,
) -> Result<(rapi::Pipeline, crate::preprocess::Stage), Error> {
    let mut p = pipeline.clone();
    let c = p.components.as_mut().ok_or_else(|| Error::Malformed("no components".into()))?;
    let (Some(process_id), [input]) = (stage.transforms.first(), stage.inputs.as_slice()) else {
        return Err(Error::Malformed("a splittable DoFn's stage without its process transform".into()));
    };
    let process = c
        .transforms
        .get(process_id)
        .cloned()
        .ok_or_else(|| Error::Malformed(format!("no transform '{process_id}'")))?;
    let tag = process.inputs.iter().find(|(_, pc)| *pc == input).map(|(t, _)| t.clone());
    let tag = tag.ok_or_else(|| Error::Malformed(format!("transform '{process_id}' does not read {input}")))?;
    let coder = c.pcollections.get(input).map(|pc| pc.coder_id.clone()).unwrap_or_default();
    let truncated = pcollection_like(c, input, "_truncated", &coder)?;
    let mut truncate = process.clone();
    truncate.unique_name = format!("{}/Truncate", process.unique_name);
    if let Some(s) = truncate.spec.as_mut() {
        s.urn = urns::SDF_TRUNCATE_SIZED.to_string();
    }
    truncate.outputs = HashMap::from([("out".to_string(), truncated.clone())]);
    let truncate_id = fresh(&c.transforms, &format!("{process_id}/Truncate"));
    c.transforms.insert(truncate_id.clone(), truncate);
    if let Some(t) = c.transforms.get_mut(process_id) {
        t.inputs.insert(tag, truncated);
    }
    let mut stage = stage.clone();
    stage.transforms.insert(0, truncate_id);
    Ok((p, stage))
}

/// An id not yet in `map`, from `base`.
pub(crate) fn fresh<V>(map: &HashMap<String, V>, base: &str) -> String {
    (0..).map(|i| format!("{base}_weir{i}")).find(|id| !map.contains_key(id)).expect("a free id")
}

fn kv_coder(c: &mut rapi::Components, key: &str, value: &str) -> String {
    let id = fresh(&c.coders, "kv");
    let spec = rapi::FunctionSpec { urn: urns::coders::KV.into(), payload: Vec::new() };
    c.coders.insert(id.clone(), rapi::Coder { spec: Some(spec), component_coder_ids: vec![key.into(), value.into()] });
    id
}

/// A PCollection like `like`, with coder `coder`.
pub(crate) fn pcollection_like(
    c: &mut rapi::Components,
    like: &str,
    suffix: &str,
    coder: &str,
) -> Result<String, Error> {
    let mut pc =
        c.pcollections.get(like).cloned().ok_or_else(|| Error::Malformed(format!("no PCollection '{like}'")))?;
    pc.coder_id = coder.to_string();
    pc.unique_name = format!("{}{suffix}", pc.unique_name);
    let id = fresh(&c.pcollections, &format!("{like}{suffix}"));
    c.pcollections.insert(id.clone(), pc);
    Ok(id)
}

/// The next splittable ParDo of `c` (a leaf ParDo with a restriction coder), by id order.
fn next_splittable(c: &rapi::Components) -> Option<String> {
    let splittable = |t: &rapi::PTransform| {
        let Some(spec) = t.spec.as_ref().filter(|s| s.urn == urns::PAR_DO) else { return false };
        t.subtransforms.is_empty()
            && rapi::ParDoPayload::decode(&spec.payload[..]).is_ok_and(|pd| !pd.restriction_coder_id.is_empty())
    };
    let mut ids: Vec<&String> = c.transforms.iter().filter(|(_, t)| splittable(t)).map(|(id, _)| id).collect();
    ids.sort();
    ids.first().map(|id| id.to_string())
}

/// The pipeline with every splittable ParDo expanded.
pub fn expand(pipeline: &rapi::Pipeline) -> Result<rapi::Pipeline, Error> {
    let mut p = pipeline.clone();
    let c = p.components.as_mut().ok_or_else(|| Error::Malformed("no components".into()))?;
    while let Some(id) = next_splittable(c) {
        let parts = expand_one(c, &id)?;
        c.transforms.remove(&id);
        // The parts take the ParDo's place under its parent, or among the roots.
        let list = match c.transforms.values_mut().find(|t| t.subtransforms.contains(&id)) {
            Some(parent) => &mut parent.subtransforms,
            None => &mut p.root_transform_ids,
        };
        if let Some(at) = list.iter().position(|x| x == &id) {
            list.splice(at..=at, parts);
        }
    }
    Ok(p)
}

/// The four transforms of splittable ParDo `id`, added to `c`: their ids, in order.
fn expand_one(c: &mut rapi::Components, id: &str) -> Result<Vec<String>, Error> {
    let t = c.transforms[id].clone();
    let payload = rapi::ParDoPayload::decode(t.spec.as_ref().map_or(&[][..], |s| &s.payload[..]))
        .map_err(|e| Error::Malformed(format!("transform '{}': {e}", t.unique_name)))?;
    let main_tag = t
        .inputs
        .keys()
        .find(|k| !payload.side_inputs.contains_key(*k))
        .cloned()
        .ok_or_else(|| Error::Malformed(format!("splittable ParDo '{}' without a main input", t.unique_name)))?;
    let main = t.inputs[&main_tag].clone();
    let element_coder = c.pcollections.get(&main).map(|pc| pc.coder_id.clone()).unwrap_or_default();
    let paired_coder = kv_coder(c, &element_coder, &payload.restriction_coder_id);
    let doubles = fresh(&c.coders, "doubles");
    let spec = rapi::FunctionSpec { urn: urns::coders::DOUBLE.into(), payload: Vec::new() };
    c.coders.insert(doubles.clone(), rapi::Coder { spec: Some(spec), component_coder_ids: Vec::new() });
    let sized_coder = kv_coder(c, &paired_coder, &doubles);
    let paired = pcollection_like(c, &main, "_paired", &paired_coder)?;
    let split = pcollection_like(c, &main, "_split", &sized_coder)?;
    let shuffled = pcollection_like(c, &main, "_shuffled", &sized_coder)?;
    let part = |c: &mut rapi::Components, suffix: &str, urn: &str, input: &str, outputs: HashMap<String, String>| {
        let mut x = t.clone();
        x.unique_name = format!("{}/{suffix}", t.unique_name);
        if let Some(s) = x.spec.as_mut() {
            s.urn = urn.to_string();
        }
        x.inputs.insert(main_tag.clone(), input.to_string());
        x.outputs = outputs;
        let new_id = fresh(&c.transforms, &format!("{id}/{suffix}"));
        c.transforms.insert(new_id.clone(), x);
        new_id
    };
    let out = |pc: &str| HashMap::from([("out".to_string(), pc.to_string())]);
    let pair = part(c, "PairWithRestriction", urns::SDF_PAIR_WITH_RESTRICTION, &main, out(&paired));
    let size = part(c, "SplitAndSizeRestriction", urns::SDF_SPLIT_AND_SIZE, &paired, out(&split));
    let shuffle = part(c, "Reshuffle", urns::RESHUFFLE, &split, out(&shuffled));
    // Weir runs the reshuffle: it reads only the sized restrictions, no side inputs.
    if let Some(r) = c.transforms.get_mut(&shuffle) {
        r.inputs = HashMap::from([(main_tag.clone(), split.clone())]);
        r.spec = Some(rapi::FunctionSpec { urn: urns::RESHUFFLE.into(), payload: Vec::new() });
        r.environment_id.clear();
    }
    let process = part(c, "Process", urns::SPLITTABLE_PROCESS, &shuffled, t.outputs.clone());
    Ok(vec![pair, size, shuffle, process])
}
