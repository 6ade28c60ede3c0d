//! LocalStack's endpoints that test helpers call, answered the way LocalStack answers them, so
//! helpers written for it work against Orderly unchanged:
//! - `/_aws/sqs/messages` (GET or POST; `QueueUrl` in the query string or the body, or the
//!   path form `/_aws/sqs/messages/<region>/<account>/<queue>`; `ShowInvisible` and
//!   `ShowDelayed`): every message of the queue as a ReceiveMessage answer, changing nothing.
//!   The answer's form follows the request: an SDK pointed at the endpoint (JSON protocol with
//!   `X-Amz-Target`, or Query with `Action`) gets its protocol's answer; a plain request gets
//!   the XML, or with `Accept: application/json` that XML read as JSON (xmltodict's shape).
//!   Any action but ReceiveMessage is refused (`InvalidRequest`).
//! - `/_localstack/health`: `sqs` and `sns` running.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::inspect::{answer, unauthorized};
use super::reply::respond;
use super::state::HttpState;
use crate::protocol::{
    encode_answer, encode_error, xml_json, Action, ApiError, ErrorCode, Protocol, SqsAction,
};

/// How the answer is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// The Query protocol's XML.
    Xml,
    /// That XML read as JSON.
    XmlAsJson,
    /// The SQS JSON protocol (an SDK with the endpoint as its endpoint URL).
    AwsJson,
}

/// `/_aws/sqs/messages`.
pub async fn messages(
    State(state): State<HttpState>,
    method: Method,
    headers: HeaderMap,
    uri: Uri,
    body: Body,
) -> Response {
    let body = match admitted(&state, (&method, &uri, &headers), body).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let params = Params::read(&headers, &uri, &body);
    let queue = match params.get("QueueUrl") {
        None => Err(ApiError::new(
            ErrorCode::QueueDoesNotExist,
            "The specified queue does not exist.",
        )),
        Some(url) => queue_in_url(state.service.namespaces(), url),
    };
    peek(&state, &headers, queue, &params).await
}

/// `/_aws/sqs/messages/<region>/<account>/<queue>`.
pub async fn messages_at(
    State(state): State<HttpState>,
    Path((region, account, queue)): Path<(String, String, String)>,
    method: Method,
    headers: HeaderMap,
    uri: Uri,
    body: Body,
) -> Response {
    let body = match admitted(&state, (&method, &uri, &headers), body).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let params = Params::read(&headers, &uri, &body);
    let service = &state.service;
    let namespace = crate::engine::namespace::Namespace::new(&region, &account);
    let queue = service
        .namespaces()
        .key(&namespace, &queue)
        .map(|key| key.into_owned())
        .ok_or_else(|| crate::engine::EngineError::QueueDoesNotExist.into());
    peek(&state, &headers, queue, &params).await
}

/// The key of the queue a queue URL names (`service::access::url_place`, the home namespace
/// filling what it leaves out); a URL without an account and a name is no queue's.
fn queue_in_url(
    namespaces: &crate::engine::namespace::Namespaces,
    url: &str,
) -> Result<String, ApiError> {
    let path = url.split(['?', '#']).next().unwrap_or("");
    let path = path.split("://").nth(1).unwrap_or(path);
    let segments: Vec<&str> = path.split('/').skip(1).filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        [.., _, _] => {
            let place = crate::service::access::url_place(url);
            let home = namespaces.home();
            let namespace = crate::engine::namespace::Namespace::new(
                place.region.unwrap_or(&home.region),
                place.account.unwrap_or(&home.account),
            );
            namespaces
                .key(&namespace, place.name)
                .map(|key| key.into_owned())
                .ok_or_else(|| crate::engine::EngineError::QueueDoesNotExist.into())
        }
        _ => Err(ApiError::new(
            ErrorCode::InvalidAddress,
            format!("The address {url} is not valid for this endpoint."),
        )),
    }
}

/// The request's body, read within the server's bounds (one past them is refused in the
/// request's protocol) and then admitted by `refused`; or the refusal.
async fn admitted(
    state: &HttpState,
    (method, uri, headers): (&Method, &Uri, &HeaderMap),
    body: Body,
) -> Result<axum::body::Bytes, Response> {
    let request_id = uuid::Uuid::new_v4().to_string();
    let body = super::reply::read_body(state, headers, body, &request_id).await?;
    match refused(state, (method, uri, headers, &body)) {
        Some(refusal) => Err(refusal),
        None => Ok(body),
    }
}

/// With `--auth`: HTTP Basic credentials of a key of this account, as on Orderly's other
/// endpoints, or a request signed with such a key, as an SDK given this endpoint as its
/// endpoint URL sends it. A signature that does not verify is answered as the API answers it.
/// Answers the refusal, if refused.
fn refused(
    state: &HttpState,
    (method, uri, headers, body): (&Method, &Uri, &HeaderMap, &[u8]),
) -> Option<Response> {
    let auth = state.auth.as_ref()?;
    let signed = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("AWS4-"))
        || uri.query().is_some_and(|q| q.contains("X-Amz-Signature="));
    if !signed {
        return unauthorized(state, headers);
    }
    let judged = crate::http::auth::as_arrived((method, uri, headers, body), |arrived, now| {
        auth.own_signed_key(arrived, now)
    });
    match judged {
        Ok(Some(_)) => None,
        Ok(None) => unauthorized(state, headers),
        Err(error) => Some(refuse(form(headers), error)),
    }
}

/// An error in the form the request asked for.
fn refuse(form: Form, error: ApiError) -> Response {
    let request_id = uuid::Uuid::new_v4().to_string();
    written(form, Err(error), &request_id)
}

async fn peek(
    state: &HttpState,
    headers: &HeaderMap,
    queue: Result<String, ApiError>,
    params: &Params,
) -> Response {
    let request_id = uuid::Uuid::new_v4().to_string();
    let form = form(headers);
    // LocalStack's flags: `true` in any case, or `1`.
    let flag = |name: &str| {
        params
            .get(name)
            .is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
    };
    let only_receive = ApiError::new(
        ErrorCode::InvalidRequest,
        "This endpoint only accepts ReceiveMessage calls",
    );
    let action = match form {
        Form::AwsJson => headers
            .get("x-amz-target")
            .and_then(|t| t.to_str().ok())
            .and_then(|t| t.rsplit('.').next())
            .map(str::to_string),
        _ => params.get("Action").map(str::to_string),
    };
    let result = match (action.as_deref(), queue) {
        (Some(action), _) if action != "ReceiveMessage" => Err(only_receive),
        (_, Err(error)) => Err(error),
        (_, Ok(queue)) => {
            let shown = (flag("ShowInvisible"), flag("ShowDelayed"));
            state.service.localstack_messages(&queue, shown).await
        }
    };
    written(form, result, &request_id)
}

/// A ReceiveMessage answer or an error, in `form`.
fn written(
    form: Form,
    result: Result<crate::protocol::sqs::ReceiveMessageOutput, ApiError>,
    request_id: &str,
) -> Response {
    let request_id = request_id.to_string();
    let receive = Action::Sqs(SqsAction::ReceiveMessage);
    match (form, result) {
        (Form::XmlAsJson, Ok(output)) => {
            let value = serde_json::to_value(&output).unwrap_or_default();
            let body = xml_json::response(SqsAction::ReceiveMessage, &value, &request_id);
            answer(StatusCode::OK, body)
        }
        (Form::XmlAsJson, Err(error)) => {
            let (_, code, status) = error.code.wire();
            let body = xml_json::error(error.code.fault(), code, &error.message, &request_id);
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
            answer(status, body)
        }
        (form, result) => {
            let protocol = if form == Form::AwsJson {
                Protocol::Json
            } else {
                Protocol::Query
            };
            let encoded = match result {
                Ok(output) => encode_answer(protocol, receive, &output, &request_id),
                Err(error) => encode_error(protocol, &error, &request_id),
            };
            respond(encoded, &request_id)
        }
    }
}

fn form(headers: &HeaderMap) -> Form {
    let names = |name: header::HeaderName, part: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains(part))
    };
    if headers.contains_key("x-amz-target") || names(header::CONTENT_TYPE, "x-amz-json") {
        Form::AwsJson
    } else if names(header::ACCEPT, "json") || names(header::CONTENT_TYPE, "json") {
        Form::XmlAsJson
    } else {
        Form::Xml
    }
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

/// A HEAD of the health endpoint: up, no body.
pub async fn health_head() -> Response {
    StatusCode::OK.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_come_from_the_query_string_and_a_form_or_json_body() {
        let uri: Uri = "/_aws/sqs/messages?QueueUrl=http%3A%2F%2Fh%2F1%2Fq&ShowDelayed=true"
            .parse()
            .unwrap();
        let params = Params::read(&HeaderMap::new(), &uri, b"ShowInvisible=True");
        assert_eq!(params.get("QueueUrl"), Some("http://h/1/q"));
        assert_eq!(params.get("ShowInvisible"), Some("True"));
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            "application/x-amz-json-1.0".parse().unwrap(),
        );
        let plain: Uri = "/_aws/sqs/messages".parse().unwrap();
        let json = Params::read(&headers, &plain, br#"{"QueueUrl":"u","ShowDelayed":true}"#);
        assert_eq!(
            (json.get("QueueUrl"), json.get("ShowDelayed")),
            (Some("u"), Some("true"))
        );
        assert_eq!(form(&headers), Form::AwsJson);
        let mut accept = HeaderMap::new();
        accept.insert(header::ACCEPT, "application/json".parse().unwrap());
        assert_eq!(form(&accept), Form::XmlAsJson);
        let mut plain_json = HeaderMap::new();
        plain_json.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        assert_eq!(form(&plain_json), Form::XmlAsJson);
        assert_eq!(form(&HeaderMap::new()), Form::Xml);
    }

    #[test]
    fn a_queue_url_needs_an_account_and_a_name() {
        use crate::engine::namespace::{Namespace, Namespaces};
        let ns = Namespaces::new(Namespace::new("us-east-1", "000000000000"));
        assert_eq!(
            queue_in_url(&ns, "http://h:4566/000000000000/q").unwrap(),
            "q"
        );
        assert_eq!(queue_in_url(&ns, "http://h/000000000000/q/").unwrap(), "q");
        assert_eq!(
            queue_in_url(&ns, "http://h/123456789012/q").unwrap(),
            "us-east-1:123456789012:q"
        );
        let error = queue_in_url(&ns, "http://localhost:4566/nonsense").unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidAddress);
    }
}
