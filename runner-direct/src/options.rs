//! The direct runner's flags: how strictly it tests what the model promises.

/// Options of the direct runner (`--direct-*`).
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct DirectOptions {
    /// Shuffle the order of bundles and of the elements inside them, so order-dependent
    /// pipelines show up.
    #[arg(long = "direct-shuffle", default_value_t = true, action = clap::ArgAction::Set)]
    pub shuffle: bool,
    /// Seed of the shuffling.
    #[arg(long = "direct-seed", default_value_t = 0)]
    pub seed: u64,
    /// Round-trip every element through its coder (Beam's encodability check).
    #[arg(long = "direct-check-encodability", default_value_t = true, action = clap::ArgAction::Set)]
    pub check_encodability: bool,
    /// Largest number of elements in one bundle.
    #[arg(long = "direct-bundle-size", default_value_t = 1000, value_parser = weir_sdk::options::count_within(1, 1_000_000_000))]
    pub bundle_size: usize,
}

impl Default for DirectOptions {
    fn default() -> Self {
        DirectOptions { shuffle: true, seed: 0, check_encodability: true, bundle_size: 1000 }
    }
}
