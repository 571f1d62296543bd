//! One bundle's life: the ProcessBundle instruction sent on a harness's control stream, its input
//! on the data stream, its state requests answered, and its outputs and response gathered.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::data::elements;
use super::state::{state_response, SideInputs, UserState};
use super::{FnServer, Links};
use crate::proto::fn_execution::v1 as fapi;
use crate::Error;

/// One bundle's input: per data source transform of the descriptor, its encoded elements.
pub type BundleInput = Vec<(String, Vec<u8>)>;

/// Where a bundle's data comes from or goes: a data source or sink transform, or a timer
/// family of a transform (its timers on the data stream).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Port {
    /// A data source or sink transform.
    Data(String),
    /// Timer family `.1` of transform `.0`.
    Timers(String, String),
}

/// What a bundle gets and gives.
pub struct BundleRequest<'a> {
    /// Per port, its input bytes: data to data sources, timers to timer families. Every port
    /// the harness expects is named, with nothing if it has nothing.
    pub input: Vec<(Port, Vec<u8>)>,
    /// The side inputs its State API requests read.
    pub side_inputs: SideInputs,
    /// The ports whose output is awaited: data sinks, and the timer families the harness sets
    /// timers in.
    pub outputs: &'a [Port],
    /// Where its user state requests are answered, if it has user state.
    pub user_state: Option<&'a mut dyn UserState>,
    /// The token under which the harness may cache the user state it reads across bundles:
    /// valid while only bundles under it change that state.
    pub cache_token: Option<Vec<u8>>,
}

/// What a bundle gave back.
#[derive(Debug, Default)]
pub struct BundleOutput {
    /// The bundle's instruction id.
    pub instruction: String,
    /// Per data sink transform asked for, the bytes it sent.
    pub outputs: HashMap<String, Vec<u8>>,
    /// Per timer family asked for, the timers it set or cleared.
    pub timers: HashMap<(String, String), Vec<u8>>,
    /// The harness's response: metrics, residuals, whether it asks to be finalized.
    pub response: fapi::ProcessBundleResponse,
    /// How many user state requests it made.
    pub state_requests: u64,
}

/// A bundle sent to a harness and not yet finished ([`FnServer::begin_bundle`]). What the services
/// keep for it is dropped with it.
pub struct Started {
    id: String,
    worker: String,
    descriptor: String,
    outputs: Vec<Port>,
    shared: Arc<super::Shared>,
}

impl Started {
    /// The harness running it.
    pub fn worker(&self) -> &str {
        &self.worker
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let mut links = self.shared.lock();
        links.side_inputs.remove(&self.id);
        links.outputs.remove(&self.id);
        links.responses.remove(&self.id);
        links.user_state.remove(&self.id);
    }
}

impl FnServer {
    /// Runs one bundle of the stage `descriptor` on harness `worker`: `input`'s bytes to the
    /// descriptor's data sources, `side_inputs` to its State API requests, then the bytes every
    /// one of `outputs` (data sink transform ids) sent back, once the harness has sent the last
    /// of each and answered.
    pub fn process_bundle(
        &self,
        worker: &str,
        descriptor: &fapi::ProcessBundleDescriptor,
        (input, side_inputs): (BundleInput, SideInputs),
        outputs: &[String],
        timeout: Duration,
    ) -> Result<BundleOutput, Error> {
        let input = input.into_iter().map(|(t, bytes)| (Port::Data(t), bytes)).collect();
        let outputs: Vec<Port> = outputs.iter().cloned().map(Port::Data).collect();
        let request = BundleRequest { input, side_inputs, outputs: &outputs, user_state: None, cache_token: None };
        self.run(worker, descriptor, request, timeout)
    }

    /// Runs one bundle of the stage `descriptor` on harness `worker`, as `request` says; user
    /// state requests are answered on this thread while it waits.
    pub fn run(
        &self,
        worker: &str,
        descriptor: &fapi::ProcessBundleDescriptor,
        request: BundleRequest<'_>,
        timeout: Duration,
    ) -> Result<BundleOutput, Error> {
        let BundleRequest { input, side_inputs, outputs, user_state, cache_token } = request;
        let started = self.begin_bundle(worker, descriptor, (input, side_inputs), outputs, cache_token, timeout)?;
        self.end_bundle(started, user_state, timeout)
    }

    /// Starts one bundle of the stage `descriptor` on harness `worker`: its instruction and
    /// its input sent, `side_inputs` served to it, without waiting for it. [`FnServer::end_bundle`]
    /// gathers what it gives; a bundle started and never finished is forgotten when dropped.
    pub fn begin_bundle(
        &self,
        worker: &str,
        descriptor: &fapi::ProcessBundleDescriptor,
        (input, side_inputs): (Vec<(Port, Vec<u8>)>, SideInputs),
        outputs: &[Port],
        cache_token: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Started, Error> {
        let cache_tokens = cache_token.into_iter().map(|token| fapi::process_bundle_request::CacheToken {
            token,
            r#type: Some(fapi::process_bundle_request::cache_token::Type::UserState(Default::default())),
        });
        let started = Started {
            id: self.instruction_id(),
            worker: worker.to_string(),
            descriptor: descriptor.id.clone(),
            outputs: outputs.to_vec(),
            shared: self.shared.clone(),
        };
        let id = started.id.clone();
        let gone = || Error::Gone { worker: worker.to_string(), why: "it is not connected".into() };
        {
            let mut links = self.shared.lock();
            links.side_inputs.insert(id.clone(), Arc::new(side_inputs));
            links.descriptors.entry(descriptor.id.clone()).or_insert_with(|| descriptor.clone());
            links.outputs.insert(id.clone(), HashMap::new());
            let request = fapi::InstructionRequest {
                instruction_id: id.clone(),
                request: Some(fapi::instruction_request::Request::ProcessBundle(fapi::ProcessBundleRequest {
                    process_bundle_descriptor_id: descriptor.id.clone(),
                    cache_tokens: cache_tokens.collect(),
                    ..Default::default()
                })),
            };
            links.control.get(worker).ok_or_else(gone)?.send(Ok(request)).map_err(|_| gone())?;
        }
        let links =
            self.shared.wait_for(worker, timeout, "did not open its data stream", |l| l.data.contains_key(worker))?;
        let elements = elements(&id, input);
        links.data.get(worker).ok_or_else(gone)?.send(Ok(elements)).map_err(|_| gone())?;
        Ok(started)
    }

    /// Waits for bundle `started` to end, answering its user state requests from `user_state`
    /// on this thread meanwhile, and gathers what it gave.
    pub fn end_bundle(
        &self,
        started: Started,
        mut user_state: Option<&mut dyn UserState>,
        timeout: Duration,
    ) -> Result<BundleOutput, Error> {
        let Started { id, worker, outputs, descriptor, .. } = &started;
        let finished = |l: &Links| {
            let failed = l.responses.get(id).is_some_and(|r| !r.error.is_empty());
            let answered = l.responses.contains_key(id);
            let all_sent =
                l.outputs.get(id).is_some_and(|o| outputs.iter().all(|t| o.get(t).is_some_and(|(_, last)| *last)));
            failed || (answered && all_sent)
        };
        let mut state_requests = 0u64;
        let mut links = loop {
            let mut links = self.shared.wait_for(worker, timeout, "did not finish a bundle", |l| {
                finished(l) || l.user_state.get(id).is_some_and(|q| !q.is_empty())
            })?;
            let asked = links.user_state.remove(id).unwrap_or_default();
            if asked.is_empty() {
                break links;
            }
            drop(links);
            state_requests += asked.len() as u64;
            for (r, to) in asked {
                let answer = match user_state.as_mut() {
                    Some(state) => state.serve(&r),
                    None => Err(format!("stage '{descriptor}' has no user state")),
                };
                // A harness gone fails the bundle when next waited on.
                let _ = to.send(Ok(state_response(r.id, answer)));
            }
        };
        let response = links.responses.remove(id);
        let mut got = links.outputs.remove(id).unwrap_or_default();
        drop(links);
        if let Some(r) = response.as_ref().filter(|r| !r.error.is_empty()) {
            return Err(Error::Bundle { worker: worker.clone(), error: r.error.clone() });
        }
        let response = match response.and_then(|r| r.response) {
            Some(fapi::instruction_response::Response::ProcessBundle(r)) => r,
            _ => fapi::ProcessBundleResponse::default(),
        };
        let mut out = BundleOutput { instruction: id.clone(), response, state_requests, ..Default::default() };
        for port in outputs {
            let bytes = got.remove(port).map(|(b, _)| b).unwrap_or_default();
            match port.clone() {
                Port::Data(t) => out.outputs.insert(t, bytes),
                Port::Timers(t, f) => out.timers.insert((t, f), bytes),
            };
        }
        Ok(out)
    }

    fn instruction_id(&self) -> String {
        format!("instruction-{}", self.next_instruction.fetch_add(1, Ordering::Relaxed))
    }

    /// Finalizes bundle `instruction` on harness `worker` (which asked for it in its response,
    /// once its output is committed): the harness runs the callbacks the DoFns registered.
    pub fn finalize_bundle(&self, worker: &str, instruction: &str, timeout: Duration) -> Result<(), Error> {
        let id = self.instruction_id();
        let gone = || Error::Gone { worker: worker.to_string(), why: "it is not connected".into() };
        let request = fapi::InstructionRequest {
            instruction_id: id.clone(),
            request: Some(fapi::instruction_request::Request::FinalizeBundle(fapi::FinalizeBundleRequest {
                instruction_id: instruction.to_string(),
            })),
        };
        self.shared.lock().control.get(worker).ok_or_else(gone)?.send(Ok(request)).map_err(|_| gone())?;
        let mut links =
            self.shared.wait_for(worker, timeout, "did not finalize a bundle", |l| l.responses.contains_key(&id))?;
        let response = links.responses.remove(&id).unwrap_or_default();
        drop(links);
        if response.error.is_empty() {
            Ok(())
        } else {
            Err(Error::Bundle { worker: worker.to_string(), error: response.error })
        }
    }
}
