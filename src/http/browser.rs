//! What a web browser can make of this server. A page on another origin may post to it
//! (`Origin`), and a page on an attacker's domain that re-resolves to 127.0.0.1 reaches it by
//! that domain name (DNS rebinding, seen in `Host`). Requests from origins not in
//! `--cors-allow` are refused; allowed ones get CORS answers, so the AWS SDK for JavaScript
//! works in a browser. While Orderly listens on loopback only, a `Host` that is not a loopback
//! name or address, `--hostname` or an `--allow-host` entry is refused.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::protocol::{ApiError, ErrorCode};

/// The browser-facing rules, from the command line.
#[derive(Clone, Debug, Default)]
pub struct BrowserRules {
    /// Origins allowed (`scheme://host[:port]`), or every origin with `*`.
    pub cors_allow: Vec<String>,
    /// Host names (without port) allowed besides loopback ones; `*.suffix` allowed.
    pub allow_host: Vec<String>,
    /// Listening on loopback only: Host is checked even without `allow_host`.
    pub loopback_only: bool,
    /// `--hostname`, without its port.
    pub hostname: Option<String>,
}

/// Parses a comma-separated list, lower-cased, empty entries dropped.
pub fn parse_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(|e| e.trim().trim_end_matches('/').to_ascii_lowercase())
        .filter(|e| !e.is_empty())
        .collect()
}

/// Headers the AWS SDKs send, which a browser must be told are fine.
const ALLOWED_HEADERS: &str = "authorization, content-type, x-amz-date, x-amz-target, \
    x-amz-security-token, x-amz-user-agent, x-amz-content-sha256, amz-sdk-invocation-id, \
    amz-sdk-request, x-amzn-query-mode";
/// Headers of the answer a browser script may read: SDKs need the request id and error code.
const EXPOSED_HEADERS: &str = "x-amzn-requestid, x-amzn-query-error, date";

impl BrowserRules {
    fn allows_origin(&self, origin: &str) -> bool {
        let origin = origin.trim_end_matches('/').to_ascii_lowercase();
        self.cors_allow.iter().any(|o| o == "*" || *o == origin)
    }

    /// A page of this server itself (the console): its origin is the `Host` it was loaded
    /// by, and that host is one this server knows as its own (a loopback name,
    /// `--hostname` or an `--allow-host` entry), so a rebound attacker's name cannot pass.
    fn same_origin(&self, origin: &str, host: &str) -> bool {
        let authority = origin.split_once("://").map_or("", |(_, rest)| rest);
        authority.eq_ignore_ascii_case(host) && self.names_as_own(host)
    }

    /// A loopback name or address, `--hostname` or an `--allow-host` entry.
    fn names_as_own(&self, host: &str) -> bool {
        let name = host_name(host);
        // Clients send lower case; only other spellings pay for a copy.
        let lowered;
        let name = if name.bytes().any(|b| b.is_ascii_uppercase()) {
            lowered = name.to_ascii_lowercase();
            lowered.as_str()
        } else {
            name
        };
        let listed = self
            .allow_host
            .iter()
            .any(|entry| match entry.strip_prefix("*.") {
                Some(suffix) => name.ends_with(&format!(".{suffix}")),
                None => *entry == name,
            });
        let own = self
            .hostname
            .as_deref()
            .is_some_and(|h| host_name(h) == name);
        listed || own || is_loopback_name(name)
    }

    fn allows_host(&self, host: &str) -> bool {
        // Any other name is fine only where nothing restricts it.
        self.names_as_own(host) || (!self.loopback_only && self.allow_host.is_empty())
    }
}

/// `host[:port]` or `[v6]:port` to the name or address alone.
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// Names and addresses that only ever mean this machine. LocalStack's
/// `localhost.localstack.cloud` names resolve to 127.0.0.1 and are kept for drop-in use.
fn is_loopback_name(name: &str) -> bool {
    name == "localhost"
        || name.ends_with(".localhost")
        || name == "localhost.localstack.cloud"
        || name.ends_with(".localhost.localstack.cloud")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn refuse(headers: &HeaderMap, message: &str) -> Response {
    let request_id = uuid::Uuid::new_v4().to_string();
    let error = ApiError::new(ErrorCode::AccessDenied, message);
    super::reply::early_error(headers, &error, &request_id)
}

/// The middleware: checks Host and Origin, answers preflights, and marks allowed answers.
pub async fn guard(
    State(rules): State<Arc<BrowserRules>>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !host.is_empty() && !rules.allows_host(host) {
        return refuse(
            headers,
            "The Host header names no address this server answers on; see --allow-host.",
        );
    }
    let Some(origin) = headers.get(header::ORIGIN).cloned() else {
        return next.run(request).await;
    };
    if origin.to_str().is_ok_and(|o| rules.same_origin(o, host)) {
        return next.run(request).await;
    }
    if !origin.to_str().is_ok_and(|o| rules.allows_origin(o)) {
        return refuse(
            headers,
            "Requests from this origin are not allowed; see --cors-allow.",
        );
    }
    if request.method() == Method::OPTIONS {
        let mut response = StatusCode::OK.into_response();
        let answer = response.headers_mut();
        answer.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        answer.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            // The API's two, and DELETE for the developer endpoint that forgets deliveries.
            HeaderValue::from_static("GET, HEAD, POST, DELETE"),
        );
        answer.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOWED_HEADERS),
        );
        answer.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("86400"),
        );
        answer.insert(header::VARY, HeaderValue::from_static("Origin"));
        return response;
    }
    let mut response = next.run(request).await;
    let answer = response.headers_mut();
    answer.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    answer.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(EXPOSED_HEADERS),
    );
    answer.insert(header::VARY, HeaderValue::from_static("Origin"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(cors: &str, hosts: &str, loopback_only: bool) -> BrowserRules {
        BrowserRules {
            cors_allow: parse_list(cors),
            allow_host: parse_list(hosts),
            loopback_only,
            hostname: Some("orderly.test:4566".into()),
        }
    }

    #[test]
    fn on_loopback_only_loopback_names_the_hostname_and_listed_hosts_pass() {
        let local = rules("", "sqs.internal, *.corp.test", true);
        for host in [
            "127.0.0.1:4566",
            "localhost",
            "LOCALHOST:4566",
            "[::1]:4566",
            "sqs.us-east-1.localhost.localstack.cloud:4566",
            "orderly.test:9999",
            "sqs.internal:4566",
            "a.corp.test",
        ] {
            assert!(local.allows_host(host), "{host}");
        }
        for host in [
            "evil.example:4566",
            "127.0.0.1.evil.example",
            "localhost.evil",
            "corp.test",
        ] {
            assert!(!local.allows_host(host), "{host}");
        }
    }

    #[test]
    fn elsewhere_host_is_free_unless_allow_host_is_given() {
        assert!(rules("", "", false).allows_host("queue-service:4566"));
        let listed = rules("", "queue-service", false);
        assert!(listed.allows_host("queue-service:4566"));
        assert!(listed.allows_host("orderly.test"));
        assert!(listed.allows_host("localhost:4566"));
        assert!(!listed.allows_host("evil.example"));
    }

    #[test]
    fn the_servers_own_pages_are_same_origin_only_on_names_it_knows_as_its_own() {
        let local = rules("", "", true);
        assert!(local.same_origin("http://127.0.0.1:4566", "127.0.0.1:4566"));
        assert!(local.same_origin("https://orderly.test:4566", "orderly.test:4566"));
        assert!(!local.same_origin("http://127.0.0.1:4567", "127.0.0.1:4566"));
        assert!(!local.same_origin("null", "127.0.0.1:4566"));
        // Exposed with no --allow-host, any Host passes; a rebound name is still no origin of ours.
        let open = rules("", "", false);
        assert!(open.allows_host("evil.example:4566"));
        assert!(!open.same_origin("http://evil.example:4566", "evil.example:4566"));
    }

    #[test]
    fn origins_must_be_listed_exactly_or_by_a_star() {
        let some = rules("http://localhost:3000/, https://app.test", "", true);
        assert!(some.allows_origin("http://localhost:3000"));
        assert!(some.allows_origin("HTTPS://app.test"));
        assert!(!some.allows_origin("http://localhost:3001"));
        assert!(!some.allows_origin("null"));
        assert!(!rules("", "", true).allows_origin("http://localhost:3000"));
        assert!(rules("*", "", true).allows_origin("https://anything.test"));
    }
}
