//! The provision service: what a harness asks for when it starts (its pipeline options, its
//! endpoints, and the dependencies its environment staged, with where to fetch them).

use tonic::{Request, Response, Status};

use super::Services;
use crate::proto::fn_execution::v1 as fapi;
use fapi::provision_service_server::ProvisionService;

#[tonic::async_trait]
impl ProvisionService for Services {
    async fn get_provision_info(
        &self,
        request: Request<fapi::GetProvisionInfoRequest>,
    ) -> Result<Response<fapi::GetProvisionInfoResponse>, Status> {
        let address = request.local_addr().map(|a| a.to_string()).unwrap_or_default();
        let at = |url: String| Some(crate::proto::pipeline::v1::ApiServiceDescriptor { url, authentication: None });
        let worker = super::worker_of(&request);
        let links = self.0.lock();
        let info = fapi::ProvisionInfo {
            pipeline_options: Some(links.options.clone()),
            logging_endpoint: at(address.clone()),
            control_endpoint: at(address),
            artifact_endpoint: links.artifact_endpoint.clone().and_then(at),
            dependencies: links.dependencies.get(&worker).cloned().unwrap_or_default(),
            ..Default::default()
        };
        Ok(Response::new(fapi::GetProvisionInfoResponse { info: Some(info) }))
    }
}
