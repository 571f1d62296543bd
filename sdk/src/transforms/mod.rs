//! The primitives and the composite library.

pub mod co_group_by_key;
pub mod combine;
pub mod combine_with_context;
pub mod combiners;
pub mod create;
pub mod deduplicate;
pub mod distinct;
pub mod flatten;
pub mod group_by_key;
pub mod group_into_batches;
pub mod impulse;
pub mod keys;
pub mod map;
pub mod par_do;
pub mod partition;
pub mod reify;
pub mod reshuffle;
pub mod to_string;
pub mod view;
pub mod wait;
pub mod window_into;
