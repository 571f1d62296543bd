//! The data service: each harness's stream of elements and timers, both ways.

use std::time::Instant;

use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use super::bundle::Port;
use super::{worker_of, Services};
use crate::proto::fn_execution::v1 as fapi;
use fapi::beam_fn_data_server::BeamFnData;

/// A bundle's input as the data stream carries it: each port's bytes, then its end.
pub(super) fn elements(id: &str, input: Vec<(Port, Vec<u8>)>) -> fapi::Elements {
    let mut e = fapi::Elements::default();
    for (port, bytes) in input {
        for (piece, is_last) in [(bytes, false), (Vec::new(), true)] {
            match &port {
                Port::Data(t) => e.data.push(fapi::elements::Data {
                    instruction_id: id.to_string(),
                    transform_id: t.clone(),
                    data: piece,
                    is_last,
                }),
                Port::Timers(t, f) => e.timers.push(fapi::elements::Timers {
                    instruction_id: id.to_string(),
                    transform_id: t.clone(),
                    timer_family_id: f.clone(),
                    timers: piece,
                    is_last,
                }),
            }
        }
    }
    e
}

#[tonic::async_trait]
impl BeamFnData for Services {
    type DataStream = UnboundedReceiverStream<Result<fapi::Elements, Status>>;

    async fn data(&self, request: Request<Streaming<fapi::Elements>>) -> Result<Response<Self::DataStream>, Status> {
        let worker = worker_of(&request);
        Ok(self.stream(request, |shared, mut inbound, to| {
            shared.lock().data.insert(worker.clone(), to);
            shared.changed.notify_all();
            async move {
                let broken = loop {
                    let elements = match inbound.next().await {
                        Some(Ok(elements)) => elements,
                        Some(Err(status)) => break Some(status),
                        None => break None,
                    };
                    let mut links = shared.lock();
                    for d in elements.data {
                        let bundle = links.outputs.entry(d.instruction_id).or_default();
                        let (bytes, last) = bundle.entry(Port::Data(d.transform_id)).or_default();
                        bytes.extend_from_slice(&d.data);
                        *last |= d.is_last;
                    }
                    for t in elements.timers {
                        let bundle = links.outputs.entry(t.instruction_id).or_default();
                        let (bytes, last) = bundle.entry(Port::Timers(t.transform_id, t.timer_family_id)).or_default();
                        bytes.extend_from_slice(&t.timers);
                        *last |= t.is_last;
                    }
                    drop(links);
                    shared.changed.notify_all();
                };
                let mut links = shared.lock();
                links.data.remove(&worker);
                // A data stream that breaks loses the output of the bundles on it: they fail,
                // rather than wait for data that will not come.
                if let Some(status) = broken {
                    let why = format!("its data stream broke: {}", status.message());
                    links.gone.entry(worker).or_insert((why, Instant::now()));
                }
                drop(links);
                shared.changed.notify_all();
            }
        }))
    }
}
