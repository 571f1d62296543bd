//! Exchanges run on the workers: each upstream partition's output is split (encoded, combined)
//! by the thread that made it, while it is still in that core's cache, rather than all of it
//! by the scheduling thread after the fact. Spark's shuffle writes work the same way: each map
//! task partitions its own output.

use super::workers::Workers;
use crate::plan::Exchange;
use weir_sdk::kernel::Batch;
use weir_sdk::Result;

/// Routes what one upstream call produced (its batches per upstream partition) to `partitions`
/// partitions, each upstream partition's share exchanged on a worker. Partition `q` receives
/// the upstream partitions' pieces in upstream order.
pub fn route(
    exchange: &Exchange,
    per_partition: Vec<Vec<Batch>>,
    partitions: usize,
    workers: &Workers,
) -> Result<Vec<Vec<Batch>>> {
    let Some(x) = exchange.exchanger() else { return exchange.route(per_partition, partitions) };
    if per_partition.iter().filter(|bs| !bs.is_empty()).count() <= 1 {
        return exchange.route(per_partition, partitions);
    }
    let partitions = partitions.max(1);
    let x = x.clone();
    let pieces =
        workers.run(
            per_partition,
            move |batches: Vec<Batch>| {
                if batches.is_empty() {
                    Ok(Vec::new())
                } else {
                    x.exchange(batches, partitions)
                }
            },
        );
    let mut out: Vec<Vec<Batch>> = (0..partitions).map(|_| Vec::new()).collect();
    for piece in pieces {
        for (q, part) in piece?.into_iter().enumerate() {
            out[q].extend(part);
        }
    }
    Ok(out)
}
