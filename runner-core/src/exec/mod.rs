//! What every scheduler of the physical plan shares: the node runtime (one partition of a node
//! or of a fused chain across units of work), the clock, sources, commit-aware sinks, exchanges
//! run on the workers, partition and fused-chain execution, and the pool of workers partitions
//! run on.

pub mod chain;
pub mod clock;
pub mod exchange;
pub mod node;
pub mod partition;
pub mod sink;
pub mod source;
pub mod workers;
