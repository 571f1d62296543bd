//! The State API: side inputs a bundle reads, and user state served from Weir's keyed state.

use std::collections::HashMap;
use std::sync::Arc;

use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use super::Services;
use crate::proto::fn_execution::v1 as fapi;
use fapi::beam_fn_state_server::BeamFnState;
use weir_sdk::window::Window;

/// A multimap side input's values: per encoded key, its values' encodings one after another.
pub type ByKey = std::collections::BTreeMap<Vec<u8>, Vec<u8>>;

/// Which side input, in which window: (transform id, side input id, encoded window).
pub type SideInputKey = (String, String, Vec<u8>);

/// Appends `window` as harnesses write windows in state keys: in the window function's own coder
/// (so an SDK's window without the last instant Weir asks for on the data plane).
pub fn state_key_window(window: &Window, out: &mut Vec<u8>) {
    match window {
        Window::Sdk(w) => w.with_bytes(|b| out.extend_from_slice(b)),
        w => w.encode(out),
    }
}

/// A bundle's side inputs, as a harness asks for them through the State API: per
/// [`SideInputKey`], the concatenated encodings of the elements; for a multimap side input,
/// per encoded key, of the key's values.
#[derive(Debug, Clone, Default)]
pub struct SideInputs {
    /// Iterable side inputs.
    pub iterables: HashMap<SideInputKey, Arc<Vec<u8>>>,
    /// Multimap side inputs.
    pub multimaps: HashMap<SideInputKey, Arc<ByKey>>,
}

impl SideInputs {
    /// The answer to a state `Get` of `key`: the bytes, or why there are none.
    fn get(&self, key: &fapi::StateKey) -> Result<Vec<u8>, String> {
        use fapi::state_key::Type;
        let missing = |t: &str, s: &str| format!("no side input '{s}' of transform '{t}' in this bundle");
        match key.r#type.as_ref() {
            Some(Type::IterableSideInput(k)) => {
                let id = (k.transform_id.clone(), k.side_input_id.clone(), k.window.clone());
                let data = self.iterables.get(&id).ok_or_else(|| missing(&k.transform_id, &k.side_input_id))?;
                Ok(data.to_vec())
            }
            Some(Type::MultimapSideInput(k)) => {
                let id = (k.transform_id.clone(), k.side_input_id.clone(), k.window.clone());
                let map = self.multimaps.get(&id).ok_or_else(|| missing(&k.transform_id, &k.side_input_id))?;
                Ok(map.get(&k.key).cloned().unwrap_or_default())
            }
            Some(Type::MultimapKeysSideInput(k)) => {
                let id = (k.transform_id.clone(), k.side_input_id.clone(), k.window.clone());
                let map = self.multimaps.get(&id).ok_or_else(|| missing(&k.transform_id, &k.side_input_id))?;
                Ok(map.keys().flat_map(|k| k.iter().copied()).collect())
            }
            Some(other) => Err(format!("state of kind {other:?} is not supported by Weir's portable runner yet")),
            None => Err("a state request without a state key".into()),
        }
    }
}

#[tonic::async_trait]
impl BeamFnState for Services {
    type StateStream = UnboundedReceiverStream<Result<fapi::StateResponse, Status>>;

    async fn state(
        &self,
        request: Request<Streaming<fapi::StateRequest>>,
    ) -> Result<Response<Self::StateStream>, Status> {
        Ok(self.stream(request, |shared, mut inbound, to| async move {
            while let Some(Ok(r)) = inbound.next().await {
                if r.state_key.as_ref().is_some_and(is_user_state) {
                    // User state lives with the operator running the bundle: its thread
                    // answers, in the order the harness asked.
                    let mut links = shared.lock();
                    if links.outputs.contains_key(&r.instruction_id) {
                        links.user_state.entry(r.instruction_id.clone()).or_default().push((r, to.clone()));
                        drop(links);
                        shared.changed.notify_all();
                        continue;
                    }
                    drop(links);
                    let error = format!("no bundle '{}' is running", r.instruction_id);
                    if to.send(Ok(fapi::StateResponse { id: r.id, error, response: None })).is_err() {
                        break;
                    }
                    continue;
                }
                let answer = match (&r.request, &r.state_key) {
                    (Some(fapi::state_request::Request::Get(_)), Some(key)) => {
                        let inputs = shared.lock().side_inputs.get(&r.instruction_id).cloned();
                        match inputs {
                            Some(inputs) => inputs.get(key).map(get_response),
                            None => Err(format!("no bundle '{}' is running", r.instruction_id)),
                        }
                    }
                    _ => Err("side inputs are read only".to_string()),
                };
                if to.send(Ok(state_response(r.id, answer))).is_err() {
                    break;
                }
            }
        }))
    }
}

/// Whether a state key names user state (kept by the operator running the bundle) rather than
/// a side input.
fn is_user_state(key: &fapi::StateKey) -> bool {
    use fapi::state_key::Type;
    matches!(
        key.r#type,
        Some(
            Type::BagUserState(_)
                | Type::MultimapUserState(_)
                | Type::MultimapKeysUserState(_)
                | Type::MultimapEntriesUserState(_)
                | Type::OrderedListUserState(_)
        )
    )
}

/// A `Get`'s answer: all of `data` at once.
pub fn get_response(data: Vec<u8>) -> fapi::state_response::Response {
    fapi::state_response::Response::Get(fapi::StateGetResponse { continuation_token: Vec::new(), data })
}

pub(super) fn state_response(
    id: String,
    answer: Result<fapi::state_response::Response, String>,
) -> fapi::StateResponse {
    match answer {
        Ok(response) => fapi::StateResponse { id, error: String::new(), response: Some(response) },
        Err(error) => fapi::StateResponse { id, error, response: None },
    }
}

/// Keeps the user state of the bundles an operator runs, and answers the harness's requests
/// for it, on the operator's thread while the bundle runs.
pub trait UserState {
    /// The answer to `request` (a `Get`, `Append` or `Clear` of a user state key).
    fn serve(&mut self, request: &fapi::StateRequest) -> Result<fapi::state_response::Response, String>;
}
