//! The control service: each harness's stream of instructions (ProcessBundle, FinalizeBundle)
//! and its answers.

use std::time::Instant;

use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use super::{worker_of, Services};
use crate::proto::fn_execution::v1 as fapi;
use fapi::beam_fn_control_server::BeamFnControl;

#[tonic::async_trait]
impl BeamFnControl for Services {
    type ControlStream = UnboundedReceiverStream<Result<fapi::InstructionRequest, Status>>;

    async fn control(
        &self,
        request: Request<Streaming<fapi::InstructionResponse>>,
    ) -> Result<Response<Self::ControlStream>, Status> {
        let worker = worker_of(&request);
        Ok(self.stream(request, |shared, mut inbound, to| {
            let mut links = shared.lock();
            links.gone.remove(&worker);
            links.control.insert(worker.clone(), to);
            drop(links);
            shared.changed.notify_all();
            async move {
                while let Some(Ok(response)) = inbound.next().await {
                    shared.lock().responses.insert(response.instruction_id.clone(), response);
                    shared.changed.notify_all();
                }
                let mut links = shared.lock();
                links.control.remove(&worker);
                links.gone.entry(worker).or_insert_with(|| ("its control stream ended".into(), Instant::now()));
                drop(links);
                shared.changed.notify_all();
            }
        }))
    }

    async fn get_process_bundle_descriptor(
        &self,
        request: Request<fapi::GetProcessBundleDescriptorRequest>,
    ) -> Result<Response<fapi::ProcessBundleDescriptor>, Status> {
        let id = request.into_inner().process_bundle_descriptor_id;
        match self.0.lock().descriptors.get(&id) {
            Some(d) => Ok(Response::new(d.clone())),
            None => Err(Status::not_found(format!("no process bundle descriptor '{id}'"))),
        }
    }
}
