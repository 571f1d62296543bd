//! The provision service: what a harness asks for when it starts (its pipeline options, its
//! endpoints).

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
        let here = Some(crate::proto::pipeline::v1::ApiServiceDescriptor { url: address, authentication: None });
        let info = fapi::ProvisionInfo {
            pipeline_options: Some(self.0.lock().options.clone()),
            logging_endpoint: here.clone(),
            control_endpoint: here,
            ..Default::default()
        };
        Ok(Response::new(fapi::GetProvisionInfoResponse { info: Some(info) }))
    }
}
