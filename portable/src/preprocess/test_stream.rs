//! TestStreams whose elements are in another coder than their outputs'.

use std::collections::HashMap;

use crate::preprocess::{same_coder, sorted, unsupported, urn};
use crate::proto::pipeline::v1 as rapi;
use crate::Error;
use prost::Message;
use weir_sdk::urns;

/// `pipeline` with each TestStream output whose elements are encoded in a coder other than the
/// output's (Beam Python encodes them with the stream's own coder) written as a PCollection in
/// that coder instead, which the harness turns into the output (the SDK decodes and encodes:
/// Weir never does), assigning the windows the output has: those of the stream. A stream of
/// several tagged outputs has each of them so.
pub(crate) fn transcode(mut p: rapi::Pipeline) -> Result<rapi::Pipeline, Error> {
    let c = p.components.as_mut().ok_or_else(|| Error::Malformed("no components".into()))?;
    let mut ids: Vec<String> =
        c.transforms.iter().filter(|(_, t)| urn(t) == urns::TEST_STREAM).map(|(i, _)| i.clone()).collect();
    ids.sort();
    for id in ids {
        let t = c.transforms[&id].clone();
        let payload = rapi::TestStreamPayload::decode(t.spec.as_ref().map_or(&[][..], |s| &s.payload[..]))
            .map_err(|e| unsupported(&t, format!("a TestStream payload that does not decode: {e}")))?;
        let mut encodes = Vec::new();
        for (tag, out) in sorted(&t.outputs) {
            if c.pcollections.get(out).is_none_or(|pc| same_coder(c, &pc.coder_id, &payload.coder_id)) {
                continue;
            }
            // The SDK's environment: that of a transform reading the stream, or any.
            let readers = c.transforms.values().filter(|x| x.inputs.values().any(|i| i == out));
            let env = readers.chain(c.transforms.values()).map(|x| x.environment_id.clone()).find(|e| !e.is_empty());
            let Some(env) = env else {
                return Err(unsupported(
                    &t,
                    "elements in a coder other than its output's, and no SDK to re-encode them",
                ));
            };
            let encoded = super::sdf::pcollection_like(c, out, "_encoded", &payload.coder_id)?;
            // The payload is the windowing strategy, whose first field is the window function as
            // a `WindowIntoPayload`'s is (Beam Python reads a strategy, other SDKs the payload).
            let ws = c.pcollections.get(out).and_then(|pc| c.windowing_strategies.get(&pc.windowing_strategy_id));
            let assign = ws.cloned().unwrap_or_default();
            let encode_id = super::sdf::fresh(&c.transforms, &format!("{id}/Encode/{tag}"));
            let encode = rapi::PTransform {
                unique_name: format!("{}/Encode/{tag}", t.unique_name),
                spec: Some(rapi::FunctionSpec { urn: urns::WINDOW_INTO.into(), payload: assign.encode_to_vec() }),
                inputs: HashMap::from([("in".to_string(), encoded.clone())]),
                outputs: HashMap::from([("out".to_string(), out.clone())]),
                environment_id: env,
                ..Default::default()
            };
            c.transforms.insert(encode_id.clone(), encode);
            encodes.push((tag.clone(), encoded, encode_id));
        }
        if encodes.is_empty() {
            continue;
        }
        let list = match c.transforms.values_mut().find(|x| x.subtransforms.contains(&id)) {
            Some(parent) => &mut parent.subtransforms,
            None => &mut p.root_transform_ids,
        };
        let at = list.iter().position(|x| x == &id).map_or(list.len(), |at| at + 1);
        for (k, (_, _, encode_id)) in encodes.iter().enumerate() {
            list.insert(at + k, encode_id.clone());
        }
        if let Some(x) = c.transforms.get_mut(&id) {
            for (tag, encoded, _) in encodes {
                x.outputs.insert(tag, encoded);
            }
        }
    }
    Ok(p)
}
