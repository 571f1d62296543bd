//! What every scheduler of the physical plan shares: the clock, sources, commit-aware sinks, the
//! plan's topology and upstream watermarks, partition and fused-chain execution, and the pool of
//! workers partitions run on.

pub mod chain;
pub mod clock;
pub mod exchange;
pub mod node;
pub mod partition;
pub mod sink;
pub mod source;
pub mod topology;
pub mod workers;
