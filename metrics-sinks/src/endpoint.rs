//! Where network sinks push to, checked when the pipeline starts: a URL with a scheme the sink
//! speaks and a host that resolves, a Graphite host that resolves, headers whose values come
//! from the environment. A bad setting is an error naming its flag before anything runs,
//! instead of a push that fails quietly at every tick. Credentials never reach a message:
//! [`redact`] hides the user information of a URL.

use std::net::ToSocketAddrs;
use weir_sdk::{Error, PipelineOptions};

/// `url` with any `user:password@` replaced by `***@`, for messages.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

/// Checks that `host:port` resolves.
fn resolves(host: &str, port: u16) -> Result<(), String> {
    match (host, port).to_socket_addrs().map(|mut addrs| addrs.next()) {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(format!("host '{host}' has no address")),
        Err(e) => Err(format!("cannot resolve host '{host}': {e}")),
    }
}

/// Checks an HTTP(S) endpoint given by `flag`: it parses, its scheme is `http` or `https`, it
/// names a host, and the host resolves. Returns the URL.
pub fn http_url(flag: &str, url: &str) -> Result<String, Error> {
    let bad = |why: String| Error::Options(format!("{flag} '{}': {why}", redact(url)));
    let uri: ureq::http::Uri = url.parse().map_err(|e| bad(format!("not a URL ({e})")))?;
    let scheme = uri.scheme_str().ok_or_else(|| bad("no scheme; use http:// or https://".into()))?;
    let default_port = match scheme {
        "http" => 80,
        "https" => 443,
        other => return Err(bad(format!("unsupported scheme '{other}'; use http:// or https://"))),
    };
    let host = uri.host().filter(|h| !h.is_empty()).ok_or_else(|| bad("no host".into()))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    resolves(host, uri.port_u16().unwrap_or(default_port)).map_err(bad)?;
    Ok(url.to_string())
}

/// Checks a Graphite host given by `flag`: it resolves.
pub fn graphite_host(flag: &str, host: &str, port: u16) -> Result<(), Error> {
    resolves(host, port).map_err(|why| Error::Options(format!("{flag} '{host}': {why}")))
}

/// The extra headers of `--metrics-header-env NAME=VAR` and `--metrics-bearer-token-env VAR`,
/// their values read from the environment now.
pub fn headers(o: &PipelineOptions) -> Result<Vec<(String, String)>, Error> {
    let env = |flag: &str, var: &str| {
        std::env::var(var)
            .map_err(|_| Error::Options(format!("{flag} {var}: environment variable {var} is not set (or not UTF-8)")))
    };
    let mut out = Vec::new();
    let sinks = o.get::<crate::SinkOptions>();
    for spec in &sinks.header_env {
        let (name, var) =
            spec.split_once('=').filter(|(n, v)| !n.trim().is_empty() && !v.is_empty()).ok_or_else(|| {
                Error::Options(format!("--metrics-header-env '{spec}': expected NAME=VAR, e.g. X-Scope-OrgID=TENANT"))
            })?;
        let name = name.trim();
        if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)) {
            return Err(Error::Options(format!("--metrics-header-env '{spec}': '{name}' is not a header name")));
        }
        out.push((name.to_string(), env("--metrics-header-env", var)?));
    }
    if let Some(var) = &sinks.bearer_token_env {
        out.push(("Authorization".to_string(), format!("Bearer {}", env("--metrics-bearer-token-env", var)?)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_user_information_only() {
        assert_eq!(redact("https://u:p@host:9091/metrics/job/x"), "https://***@host:9091/metrics/job/x");
        assert_eq!(redact("http://token@host/a@b"), "http://***@host/a@b");
        assert_eq!(redact("http://host/path?q=a@b"), "http://host/path?q=a@b");
        assert_eq!(redact("not a url"), "not a url");
    }

    #[test]
    fn checks_scheme_host_and_resolution() {
        assert!(http_url("--metrics-http-url", "http://127.0.0.1:9/x").is_ok());
        let e = http_url("--metrics-http-url", "ftp://u:secret@127.0.0.1/x").unwrap_err().to_string();
        assert!(e.contains("--metrics-http-url") && e.contains("'ftp'") && !e.contains("secret"), "{e}");
        let e = http_url("--metrics-http-url", "127.0.0.1:9/x").unwrap_err().to_string();
        assert!(e.contains("--metrics-http-url"), "{e}");
        let e = http_url("--metrics-prometheus-url", "http://no-such-host.invalid/x").unwrap_err().to_string();
        assert!(e.contains("--metrics-prometheus-url") && e.contains("no-such-host.invalid"), "{e}");
        let e = http_url("--metrics-http-url", "http:///x").unwrap_err().to_string();
        assert!(e.contains("--metrics-http-url"), "{e}");
        assert!(graphite_host("--metrics-graphite-host", "no-such-host.invalid", 2003).is_err());
    }

    #[test]
    fn headers_come_from_the_environment() {
        // A name no other test uses: the environment is shared by the process.
        std::env::set_var("WEIR_TEST_METRICS_TOKEN", "s3cret");
        let mut o = PipelineOptions::default();
        o.group_mut::<crate::SinkOptions>().header_env = vec!["X-Scope-OrgID=WEIR_TEST_METRICS_TOKEN".into()];
        o.group_mut::<crate::SinkOptions>().bearer_token_env = Some("WEIR_TEST_METRICS_TOKEN".into());
        assert_eq!(
            headers(&o).unwrap(),
            vec![
                ("X-Scope-OrgID".to_string(), "s3cret".to_string()),
                ("Authorization".to_string(), "Bearer s3cret".to_string())
            ]
        );
        o.group_mut::<crate::SinkOptions>().bearer_token_env = Some("WEIR_TEST_METRICS_UNSET".into());
        let e = headers(&o).unwrap_err().to_string();
        assert!(e.contains("--metrics-bearer-token-env") && e.contains("WEIR_TEST_METRICS_UNSET"), "{e}");
        o.group_mut::<crate::SinkOptions>().header_env = vec!["no-equals".into()];
        assert!(headers(&o).unwrap_err().to_string().contains("NAME=VAR"));
    }
}
