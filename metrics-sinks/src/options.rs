//! The sinks' flags: where each one pushes.

/// Options of the metrics sinks (`--metrics-*` beyond the pusher's own).
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct SinkOptions {
    /// URL of the HTTP sink.
    #[arg(long = "metrics-http-url", value_parser = weir_sdk::options::non_empty())]
    pub http_url: Option<String>,
    /// Host of the Graphite sink.
    #[arg(long = "metrics-graphite-host", value_parser = weir_sdk::options::non_empty())]
    pub graphite_host: Option<String>,
    /// Port of the Graphite sink.
    #[arg(long = "metrics-graphite-port", default_value_t = 2003, value_parser = clap::value_parser!(u16).range(1..))]
    pub graphite_port: u16,
    /// URL of the Prometheus sink: a Pushgateway group URL, or a remote-write endpoint.
    #[arg(long = "metrics-prometheus-url", value_parser = weir_sdk::options::non_empty())]
    pub prometheus_url: Option<String>,
    /// File of the JSON-lines sink.
    #[arg(long = "metrics-file", value_parser = weir_sdk::options::non_empty())]
    pub file: Option<String>,
    /// `NAME=VAR`: send header NAME, its value read from environment variable VAR, with every
    /// push of the HTTP and Prometheus sinks (repeatable). Values are never printed.
    #[arg(long = "metrics-header-env", value_name = "NAME=VAR")]
    pub header_env: Vec<String>,
    /// Send `Authorization: Bearer <token>` with every push of the HTTP and Prometheus sinks,
    /// the token read from environment variable VAR.
    #[arg(long = "metrics-bearer-token-env", value_name = "VAR")]
    pub bearer_token_env: Option<String>,
}

impl Default for SinkOptions {
    fn default() -> Self {
        SinkOptions {
            http_url: None,
            graphite_host: None,
            graphite_port: 2003,
            prometheus_url: None,
            file: None,
            header_env: Vec::new(),
            bearer_token_env: None,
        }
    }
}
