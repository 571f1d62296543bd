//! The logging service: harness logs, into Weir's own.

use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use super::{worker_of, Outbound, Services};
use crate::proto::fn_execution::v1 as fapi;
use fapi::beam_fn_logging_server::BeamFnLogging;

#[tonic::async_trait]
impl BeamFnLogging for Services {
    type LoggingStream = UnboundedReceiverStream<Result<fapi::LogControl, Status>>;

    async fn logging(
        &self,
        request: Request<Streaming<fapi::log_entry::List>>,
    ) -> Result<Response<Self::LoggingStream>, Status> {
        let worker = worker_of(&request);
        Ok(self.stream(request, |_, mut inbound, to| async move {
            // Held while the harness logs: the stream back stays open as long.
            let _to: Outbound<fapi::LogControl> = to;
            while let Some(Ok(list)) = inbound.next().await {
                for e in list.log_entries {
                    log(&worker, &e);
                }
            }
        }))
    }
}

/// A harness's log entry, at its severity, in Weir's `tracing` output.
fn log(worker: &str, e: &fapi::LogEntry) {
    use fapi::log_entry::severity::Enum as S;
    let (msg, trace, at) = (&e.message, &e.trace, &e.log_location);
    match S::try_from(e.severity).unwrap_or(S::Info) {
        S::Critical | S::Error => tracing::error!(target: "beam_harness", worker, at, "{msg}{trace}"),
        S::Warn => tracing::warn!(target: "beam_harness", worker, at, "{msg}{trace}"),
        S::Notice | S::Info => tracing::info!(target: "beam_harness", worker, at, "{msg}"),
        _ => tracing::debug!(target: "beam_harness", worker, at, "{msg}"),
    }
}
