//! LocalStack's endpoints that test helpers call, answered the way LocalStack answers them, so
//! helpers written for it work against Orderly unchanged:
//! - `/_aws/sqs/messages` (GET or POST; `QueueUrl` in the query string or the body, or the
//!   path form `/_aws/sqs/messages/<region>/<account>/<queue>`; `ShowInvisible` and
//!   `ShowDelayed`): a queue's messages as a ReceiveMessage answer, JSON when the request's
//!   `Accept` or `Content-Type` names JSON, XML otherwise; nothing is received or changed;
//! - `/_localstack/health`: `sqs` and `sns` running.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::Response;
use serde_json::json;

use super::inspect::{answer, refused_with_auth};
use super::{respond, HttpState};
use crate::protocol::{encode_error, ApiError, Protocol};

/// `/_aws/sqs/messages`.
pub async fn messages(
    State(state): State<HttpState>,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Response {
    let params = Params::read(&headers, &uri, &body);
    let queue = params.get("QueueUrl").map(|url| {
        let path = url.split(['?', '#']).next().unwrap_or("");
        path.trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or("")
            .to_string()
    });
    peek(&state, &headers, queue, &params).await
}

/// `/_aws/sqs/messages/<region>/<account>/<queue>`. The region and account are not checked:
/// Orderly serves one namespace whatever a request names (as its API does).
pub async fn messages_at(
    State(state): State<HttpState>,
    Path((_region, _account, queue)): Path<(String, String, String)>,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Response {
    let params = Params::read(&headers, &uri, &body);
    peek(&state, &headers, Some(queue), &params).await
}

async fn peek(
    state: &HttpState,
    headers: &HeaderMap,
    queue: Option<String>,
    params: &Params,
) -> Response {
    if let Some(refused) = refused_with_auth(state) {
        return refused;
    }
    let request_id = uuid::Uuid::new_v4().to_string();
    let protocol = if wants_json(headers) {
        Protocol::Json
    } else {
        Protocol::Query
    };
    let flag = |name: &str| {
        params
            .get(name)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    };
    let result = match queue.filter(|q| !q.is_empty()) {
        None => Err(ApiError::missing("QueueUrl")),
        Some(queue) => {
            let shown = (flag("ShowInvisible"), flag("ShowDelayed"));
            state
                .service
                .localstack_messages(&queue, shown, protocol, &request_id)
                .await
        }
    };
    let encoded = result.unwrap_or_else(|error| encode_error(protocol, &error, &request_id));
    respond(encoded, &request_id)
}

fn wants_json(headers: &HeaderMap) -> bool {
    [header::ACCEPT, header::CONTENT_TYPE].iter().any(|name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("json"))
    })
}

/// The request's parameters: the query string's, then a form or JSON body's.
struct Params(Vec<(String, String)>);

impl Params {
    fn read(headers: &HeaderMap, uri: &Uri, body: &[u8]) -> Params {
        let mut pairs: Vec<(String, String)> = uri
            .query()
            .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
            .unwrap_or_default();
        let json_body = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("json"));
        if json_body {
            if let Ok(serde_json::Value::Object(fields)) = serde_json::from_slice(body) {
                pairs.extend(fields.into_iter().map(|(k, v)| {
                    let text = match v {
                        serde_json::Value::String(s) => s,
                        other => other.to_string(),
                    };
                    (k, text)
                }));
            }
        } else {
            pairs.extend(form_urlencoded::parse(body).into_owned());
        }
        Params(pairs)
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `/_localstack/health`, for the services Orderly serves.
pub async fn health() -> Response {
    answer(
        StatusCode::OK,
        json!({
            "services": {"sns": "running", "sqs": "running"},
            "edition": "community",
            "version": concat!("orderly-", env!("CARGO_PKG_VERSION")),
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_come_from_the_query_string_and_a_form_or_json_body() {
        let uri: Uri = "/_aws/sqs/messages?QueueUrl=http%3A%2F%2Fh%2F1%2Fq&ShowDelayed=true"
            .parse()
            .unwrap();
        let form = Params::read(&HeaderMap::new(), &uri, b"ShowInvisible=True");
        assert_eq!(form.get("QueueUrl"), Some("http://h/1/q"));
        assert_eq!(form.get("ShowInvisible"), Some("True"));
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        let plain: Uri = "/_aws/sqs/messages".parse().unwrap();
        let json = Params::read(&headers, &plain, br#"{"QueueUrl":"u","ShowDelayed":true}"#);
        assert_eq!(
            (json.get("QueueUrl"), json.get("ShowDelayed")),
            (Some("u"), Some("true"))
        );
        assert!(wants_json(&headers));
    }
}
