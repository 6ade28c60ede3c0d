//! HTTP: one endpoint for every action. Tells the protocols apart (X-Amz-Target means SQS JSON;
//! otherwise form and query parameters with `Action`, SNS or SQS by signing service, Version or
//! action), builds the request context, and hands the payload to the service. Every request is
//! bounded: its head by the server (`server.rs`), its body here (`body.rs`).

pub mod auth;
pub mod body;
pub mod browser;
pub mod clock_control;
pub mod connection;
mod console;
pub mod identity;
mod inspect;
mod localstack;
mod recorded;
pub mod server;
mod sessions;
pub mod sigv4;
pub mod standby;
mod sts;
pub mod tls;
mod unsigned;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::protocol::{
    encode_error, form, query_params, sns_query, ApiError, Encoded, ErrorCode, Payload, Protocol,
};
use crate::service::{RequestContext, Service};
use auth::Auth;
use body::BodyLimits;
use browser::BrowserRules;
use identity::Caller;

/// What every request handler needs: the service, the bounds on a request body, and the
/// scheme clients reach this server by (for the URLs it hands out).
#[derive(Clone)]
struct HttpState {
    service: Arc<Service>,
    body: BodyLimits,
    scheme: &'static str,
    /// `--auth`: signatures are checked.
    auth: Option<Arc<Auth>>,
    /// `--clock manual`: the clock `/_orderly/clock` moves.
    clock_control: Option<Arc<crate::clock::ManualClock>>,
    /// Temporary credentials STS handed out.
    sessions: Arc<sessions::Sessions>,
}

/// `clock`: the scheme URLs are handed out with, and with `--clock manual` the clock
/// `/_orderly/clock` moves.
pub fn router(
    service: Arc<Service>,
    body: BodyLimits,
    browser: BrowserRules,
    clock: (&'static str, Option<Arc<crate::clock::ManualClock>>),
    auth: Option<Arc<Auth>>,
) -> Router {
    guarded(routes(service, body, clock, auth), browser)
}

/// `routes` behind the browser rules: every request, served here or passed on, is judged by
/// this node's own `--allow-host` and `--cors-allow` first.
pub fn guarded(routes: Router, browser: BrowserRules) -> Router {
    routes.layer(axum::middleware::from_fn_with_state(
        Arc::new(browser),
        browser::guard,
    ))
}

/// Every endpoint, without the browser rules.
pub fn routes(
    service: Arc<Service>,
    body: BodyLimits,
    (scheme, clock_control): (&'static str, Option<Arc<crate::clock::ManualClock>>),
    auth: Option<Arc<Auth>>,
) -> Router {
    Router::new()
        .route("/health", get(|| async { "ok" }))
        // A node on its own, or leading, serves: a standby's readiness is its own
        // (`standby.rs`).
        .route("/health/ready", get(|| async { "ok" }))
        .route("/_orderly/webhooks", get(webhook_stats))
        .route("/_orderly/cluster", get(cluster_state))
        .route(
            "/_orderly/clock",
            get(clock_control::read).post(clock_control::move_clock),
        )
        .route("/_orderly/queues", get(inspect::queues))
        .route("/_orderly/queues/{name}/messages", get(inspect::messages))
        .route("/_orderly/queues/{name}/groups", get(inspect::groups))
        .route("/_orderly/console", get(console::page))
        .route("/_orderly/console/{asset}", get(console::asset))
        .route("/_orderly/sqs", post(console::action))
        .route("/_orderly/subscriptions", get(inspect::subscriptions))
        .route(
            "/_orderly/sns/deliveries",
            get(recorded::deliveries).delete(recorded::forget_deliveries),
        )
        .route("/_orderly/sns/opted-out", post(recorded::opt_out))
        .route(
            "/_aws/sns/sms-messages",
            recorded::localstack_listing(&crate::service::recorded::SMS_MESSAGES),
        )
        .route(
            "/_aws/sns/platform-endpoint-messages",
            recorded::localstack_listing(&crate::service::recorded::PLATFORM_ENDPOINT_MESSAGES),
        )
        .route(
            "/_aws/sns/subscription-tokens/{*arn}",
            get(recorded::subscription_token),
        )
        .route("/metrics", get(inspect::metrics))
        .route("/_orderly/reset", post(inspect::reset))
        .route(
            "/_aws/sqs/messages",
            get(localstack::messages).post(localstack::messages),
        )
        // An SDK given the endpoint as its endpoint URL may add a slash.
        .route(
            "/_aws/sqs/messages/",
            get(localstack::messages).post(localstack::messages),
        )
        .route(
            "/_aws/sqs/messages/{region}/{account}/{queue}",
            get(localstack::messages_at).post(localstack::messages_at),
        )
        .route(
            "/_localstack/health",
            get(localstack::health).head(localstack::health_head),
        )
        .fallback(handle)
        .with_state(HttpState {
            service,
            body,
            scheme,
            auth,
            clock_control,
            sessions: Default::default(),
        })
}

/// The region of a request's SigV4 credential scope, from its Authorization header or, for a
/// presigned URL, its `X-Amz-Credential` parameter (`AKID/date/region/service/aws4_request`).
pub(crate) fn signing_region<'a>(
    headers: &'a HeaderMap,
    uri: &axum::http::Uri,
) -> Option<std::borrow::Cow<'a, str>> {
    use std::borrow::Cow;
    let header = headers
        .get(header::AUTHORIZATION)
        .and_then(|a| a.to_str().ok())
        .and_then(|a| a.split("Credential=").nth(1));
    match header {
        // Borrowed from the header: every signed request passes here.
        Some(credential) => {
            let scope = credential.split([',', ' ']).next()?;
            scope.split('/').nth(2).map(Cow::Borrowed)
        }
        None => {
            let query = uri.query()?;
            let (_, value) = form_urlencoded::parse(query.as_bytes())
                .find(|(name, _)| name == "X-Amz-Credential")?;
            value.split('/').nth(2).map(|r| Cow::Owned(r.to_string()))
        }
    }
}

/// The access key id and signing service from a SigV4 Authorization header
/// (`Credential=AKID/date/region/service/aws4_request`), borrowed from it.
fn credential_scope(headers: &HeaderMap) -> (Option<&str>, Option<&str>) {
    let scope = headers
        .get(header::AUTHORIZATION)
        .and_then(|a| a.to_str().ok())
        .and_then(|a| a.split("Credential=").nth(1))
        .map(|c| c.split([',', ' ']).next().unwrap_or(""));
    let Some(scope) = scope else {
        return (None, None);
    };
    let mut parts = scope.split('/');
    let key = parts.next();
    (key, parts.nth(2))
}

/// SNS or SQS for a Query request: its Version, then action names, and only for an action
/// both have (AddPermission, RemovePermission) without a Version, the signing service.
fn is_sns(service: Option<&str>, params: &[(String, String)], action: &str) -> bool {
    match params
        .iter()
        .find(|(k, _)| k == "Version")
        .map(|(_, v)| v.as_str())
    {
        Some("2010-03-31") => true,
        Some("2012-11-05") => false,
        // Actions only SNS has route to SNS even without a signature or Version (the
        // unsigned SubscribeURL/UnsubscribeURL GETs).
        _ if crate::protocol::actions::sns_only(action) => true,
        _ if crate::protocol::SqsAction::parse(action).is_some() && !both(action) => false,
        _ => service == Some("sns"),
    }
}

fn both(action: &str) -> bool {
    crate::protocol::SnsAction::parse(action).is_some()
        && crate::protocol::SqsAction::parse(action).is_some()
}

/// A signature whose credential scope names another service than the one called is refused
/// as AWS refuses it (403 SignatureDoesNotMatch), with or without `--auth`: no SDK signs so.
fn check_scope(signing_service: Option<&str>, called: &str) -> Result<(), ApiError> {
    match signing_service {
        Some(scope) if scope != called => Err(ApiError::new(
            ErrorCode::SignatureDoesNotMatch,
            format!("Credential should be scoped to correct service: '{called}'. "),
        )),
        _ => Ok(()),
    }
}

// Named once: inserting a header by a `&str` name copies the name into a new allocation.
const REQUEST_ID: HeaderName = HeaderName::from_static("x-amzn-requestid");
const QUERY_ERROR: HeaderName = HeaderName::from_static("x-amzn-query-error");
const NOT_SERVED: HeaderName = HeaderName::from_static(standby::NOT_SERVED);

fn respond(encoded: Encoded, request_id: &str) -> Response {
    let mut response = (
        StatusCode::from_u16(encoded.status).unwrap_or(StatusCode::BAD_REQUEST),
        encoded.body,
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(encoded.content_type),
    );
    if let Ok(id) = HeaderValue::from_str(request_id) {
        headers.insert(REQUEST_ID, id);
    }
    if let Some(code) = encoded
        .query_error
        .and_then(|c| HeaderValue::from_str(&c).ok())
    {
        headers.insert(QUERY_ERROR, code);
    }
    // 503 is only ever `ServiceUnavailable`: nothing of the request was kept, so a node that
    // passed it on may send it again (to the next leader, when this one lost its log).
    if encoded.status == 503 {
        headers.insert(NOT_SERVED, HeaderValue::from_static("1"));
    }
    response
}

/// Orderly's own view of webhook delivery: per subscription, what is pending and in flight,
/// and how many were delivered, retried, dead-lettered or dropped.
/// `GET /_orderly/cluster`: this node's role, the lease's epoch, the leader's URL and how far
/// the log is applied here.
async fn cluster_state(State(state): State<HttpState>, headers: HeaderMap) -> Response {
    if let Some(refused) = inspect::unauthorized(&state, &headers) {
        return refused;
    }
    let body = serde_json::to_value(state.service.cluster_state()).unwrap_or_default();
    inspect::answer(StatusCode::OK, body)
}

async fn webhook_stats(State(state): State<HttpState>, headers: HeaderMap) -> Response {
    if let Some(refused) = inspect::unauthorized(&state, &headers) {
        return refused;
    }
    let stats = match state.service.backend.delivery_stats().await {
        Ok(stats) => stats,
        Err(error) => {
            tracing::error!(%error, "webhook statistics unavailable");
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
    };
    let subscriptions: Vec<serde_json::Value> = stats
        .into_iter()
        .map(|(arn, s)| {
            serde_json::json!({
                "SubscriptionArn": &*arn,
                "Pending": s.pending,
                "InFlight": s.in_flight,
                "Delivered": s.delivered,
                "Retries": s.retries,
                "DeadLettered": s.dead_lettered,
                "Dropped": s.dropped,
                "NextAttempt": s.next_attempt.map(crate::service::inspect::rfc3339),
            })
        })
        .collect();
    (
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::json!({ "Subscriptions": subscriptions }).to_string(),
    )
        .into_response()
}

/// The PEM certificate that SNS messages' `SigningCertURL` points at.
async fn signing_certificate(service: &Service, path: &str) -> Response {
    let file = path.strip_prefix('/').unwrap_or("");
    match service.backend.signing_certificate(file).await {
        Ok(Some(pem)) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/x-x509-ca-cert")],
            pem,
        )
            .into_response(),
        Ok(None) => StatusCode::NOT_FOUND.into_response(),
        Err(error) => {
            tracing::error!(%error, "no SNS signing certificate");
            StatusCode::NOT_FOUND.into_response()
        }
    }
}

/// Longest `Host` used in queue and subscription URLs: a DNS name (253) and a port.
const MAX_HOST_BYTES: usize = 260;

/// An error answered before the action is known, in the protocol the headers point to.
pub(super) fn early_error(headers: &HeaderMap, error: &ApiError, request_id: &str) -> Response {
    let protocol = if is_json(headers) {
        Protocol::Json
    } else if credential_scope(headers).1 == Some("sns") {
        Protocol::SnsQuery
    } else {
        Protocol::Query
    };
    respond(encode_error(protocol, error, request_id), request_id)
}

fn is_json(headers: &HeaderMap) -> bool {
    headers.contains_key("x-amz-target")
        || headers
            .get(header::CONTENT_TYPE)
            .and_then(|c| c.to_str().ok())
            .is_some_and(|c| c.starts_with("application/x-amz-json"))
}

/// The request's host for the URLs Orderly hands out, if it is one a URL can hold.
fn usable_host(headers: &HeaderMap, uri: &axum::http::Uri) -> Result<String, ApiError> {
    let host = headers
        .get(header::HOST)
        .map(|h| h.to_str().unwrap_or("\u{0}"))
        .or_else(|| uri.authority().map(|a| a.as_str()))
        .unwrap_or("localhost:4566");
    let fits = host.len() <= MAX_HOST_BYTES
        && !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-:[]_".contains(&b));
    if fits {
        Ok(host.to_string())
    } else {
        Err(ApiError::invalid(
            "The Host header is not a host name or address with an optional port.",
        ))
    }
}

/// The request's body within the bounds, or the error answering it.
async fn read_body(
    state: &HttpState,
    headers: &HeaderMap,
    body: axum::body::Body,
    request_id: &str,
) -> Result<bytes::Bytes, Response> {
    read_limited(headers, body, state.body, request_id).await
}

/// A request's body within `limits`, or the AWS error for one past them (its connection then
/// closed when bytes are left unread).
pub(super) async fn read_limited(
    headers: &HeaderMap,
    body: axum::body::Body,
    limits: BodyLimits,
    request_id: &str,
) -> Result<bytes::Bytes, Response> {
    body::read(headers, body, limits).await.map_err(|error| {
        let mut response = early_error(headers, &error.to_api_error(), request_id);
        if error.leaves_bytes_unread() {
            // This connection cannot carry another request.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    })
}

async fn handle(State(state): State<HttpState>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let request_id = uuid::Uuid::new_v4().to_string();
    let (method, uri, headers) = (parts.method, parts.uri, parts.headers);
    let service = &state.service;
    if method == Method::GET && uri.path().starts_with("/SimpleNotificationService-") {
        return signing_certificate(service, uri.path()).await;
    }
    let body = match read_body(&state, &headers, body, &request_id).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let host = match usable_host(&headers, &uri) {
        Ok(host) => host,
        Err(error) => return early_error(&headers, &error, &request_id),
    };
    let (_, signing_service) = credential_scope(&headers);
    let (authenticated, caller) = match signer(&state, &method, &uri, &headers, &body) {
        Ok(who) => who,
        Err(error) => return early_error(&headers, &error, &request_id),
    };
    let strict = state.auth.is_some();
    let trace_header = headers
        .get("x-amzn-trace-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(Arc::from);
    let region = signing_region(&headers, &uri);
    let ctx = RequestContext {
        namespace: service.namespace_of(region.as_deref(), &caller.account),
        operator: false,
        authenticated,
        trace_header,
        scheme: state.scheme,
        host,
        sender_id: caller.user_id,
        principal: caller.principal,
        request_id,
    };
    if is_json(&headers) {
        return json(service, &headers, body, &ctx, strict).await;
    }
    if method != Method::POST && method != Method::GET {
        let error = ApiError::new(
            ErrorCode::InvalidAction,
            format!("Method {method} is not supported."),
        );
        return respond(
            encode_error(Protocol::Query, &error, &ctx.request_id),
            &ctx.request_id,
        );
    }
    // AWS renders an SQS Query answer as JSON when the request accepts JSON (recorded).
    let answer = if accepts_json(&headers) {
        Protocol::QueryJson
    } else {
        Protocol::Query
    };
    let (access_key, _) = credential_scope(&headers);
    let asker = sts::Asker {
        ctx: &ctx,
        strict,
        sessions: &state.sessions,
        access_key,
    };
    query(service, &uri, &body, (signing_service, answer), asker).await
}

/// Whether the request is signed, and by whom (`identity`). With `--auth`, a signature that
/// does not verify is refused; without it, a credential is taken at its word.
fn signer(
    state: &HttpState,
    method: &Method,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(bool, Caller), ApiError> {
    let (access_key, _) = credential_scope(headers);
    let authenticated =
        access_key.is_some() || uri.query().is_some_and(|q| q.contains("X-Amz-Signature="));
    let account = state.service.account_id();
    let session = access_key.and_then(|key| state.sessions.get(key));
    let Some(auth) = &state.auth else {
        if let Some(session) = session {
            return Ok((authenticated, session.caller));
        }
        let caller = match access_key {
            // With one namespace, a 12-digit key is a user of the one account too.
            Some(key) if state.service.single_namespace() => {
                Caller::user(account, key, &identity::derived_user_id(key))
            }
            Some(key) => Caller::of_key(account, key),
            None => Caller::account(account),
        };
        return Ok((authenticated, caller));
    };
    let list: Vec<(&str, &str)> = headers
        .iter()
        .filter_map(|(name, value)| value.to_str().ok().map(|v| (name.as_str(), v)))
        .collect();
    let arrived = sigv4::Arrived {
        method: method.as_str(),
        path: uri.path(),
        query: uri.query().unwrap_or(""),
        headers: &list,
        body,
    };
    // The machine's time, as the client's signer used: `--clock manual` moves the engine's.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs() as i64);
    if let (Some(key), Some(session)) = (access_key, session) {
        crate::http::auth::verify_temporary(&arrived, now, key, &session.secret)?;
        let token = headers
            .get("x-amz-security-token")
            .and_then(|t| t.to_str().ok());
        sessions::admit(&session, token, now)?;
        return Ok((authenticated, session.caller));
    }
    match auth.check(&arrived, now)? {
        Some(key) => Ok((authenticated, auth.caller(&key))),
        None => Ok((false, Caller::account(account))),
    }
}

/// An AWS JSON request: the action is in `X-Amz-Target`. `strict`: an unsigned request may
/// only follow the SNS links.
async fn json(
    service: &Arc<Service>,
    headers: &HeaderMap,
    body: bytes::Bytes,
    ctx: &RequestContext,
    strict: bool,
) -> Response {
    let fail = |error: ApiError| {
        respond(
            encode_error(Protocol::Json, &error, &ctx.request_id),
            &ctx.request_id,
        )
    };
    let target = headers.get("x-amz-target").and_then(|t| t.to_str().ok());
    let Some(action) = target.and_then(|t| t.strip_prefix("AmazonSQS.")) else {
        let signing_service = credential_scope(headers).1;
        if sts::elsewhere(target, signing_service) {
            return sts::json(target, signing_service, (ctx, strict)).unwrap_or_else(fail);
        }
        return fail(ApiError::new(
            ErrorCode::InvalidAction,
            "The X-Amz-Target header does not name an SQS operation.",
        ));
    };
    if let Err(error) = check_scope(credential_scope(headers).1, "sqs") {
        return fail(error);
    }
    if let Err(error) = unsigned::check(ctx, Protocol::Json, action, strict) {
        return fail(error);
    }
    let encoded = service
        .dispatch(Protocol::Json, action, &Payload::Json(body), ctx)
        .await;
    respond(encoded, &ctx.request_id)
}

/// Whether the request's `Accept` names JSON.
fn accepts_json(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/json") || v.contains("application/x-amz-json"))
}

/// A Query request: form body and URL query string together. `answer`: the protocol an SQS
/// action is answered in (Query's XML, or JSON when the client accepts it).
async fn query(
    service: &Arc<Service>,
    uri: &axum::http::Uri,
    body: &[u8],
    (signing_service, answer): (Option<&str>, Protocol),
    asker: sts::Asker<'_>,
) -> Response {
    let (ctx, strict) = (asker.ctx, asker.strict);
    let decoded = form::decode(uri.query().unwrap_or("").as_bytes()).and_then(|mut params| {
        params.extend(form::decode(body)?);
        Ok(params)
    });
    let protocol_guess = if signing_service == Some("sns") {
        Protocol::SnsQuery
    } else {
        Protocol::Query
    };
    let fail = |protocol, error: ApiError| {
        respond(
            encode_error(protocol, &error, &ctx.request_id),
            &ctx.request_id,
        )
    };
    let Ok(params) = decoded else {
        return fail(
            protocol_guess,
            ApiError::invalid("The request's parameters are not valid UTF-8 once decoded."),
        );
    };
    // A presigned URL names its signing service in its credential, as the header does.
    let presigned_service = params
        .iter()
        .find(|(k, _)| k == "X-Amz-Credential")
        .and_then(|(_, v)| v.split('/').nth(3));
    let signing_service = signing_service.or(presigned_service);
    let Some(action) = params
        .iter()
        .find(|(k, _)| k == "Action")
        .map(|(_, v)| v.clone())
    else {
        return respond(crate::protocol::unknown_operation(), &ctx.request_id);
    };
    let mut pairs: Vec<(&str, &str)> = params
        .iter()
        .filter(|(k, _)| k != "Action" && k != "Version" && !k.starts_with("X-Amz-"))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    if let Some(answered) = sts::query(signing_service, &params, &action, &asker) {
        return answered.unwrap_or_else(|error| fail(Protocol::Query, error));
    }
    let protocol = if is_sns(signing_service, &params, &action) {
        Protocol::SnsQuery
    } else {
        Protocol::Query
    };
    let called = if protocol == Protocol::SnsQuery {
        "sns"
    } else {
        "sqs"
    };
    if let Err(error) = check_scope(signing_service, called) {
        return fail(if called == "sns" { protocol } else { answer }, error);
    }
    if let Err(error) = unsigned::check(ctx, protocol, &action, strict) {
        return fail(protocol, error);
    }
    if protocol == Protocol::SnsQuery {
        let payload = match sns_query::to_json(&pairs) {
            Ok(json) => Payload::Query(json),
            Err(error) => return fail(protocol, error),
        };
        let encoded = service.dispatch(protocol, &action, &payload, ctx).await;
        return respond(encoded, &ctx.request_id);
    }
    // Older clients post to the queue URL itself instead of passing QueueUrl. Actions that take
    // no queue are not a queue's (AWS answers InvalidAction there).
    let path_url;
    let path = uri.path().trim_end_matches('/');
    // `/<account>/<name>`, or `/queue/<region>/<account>/<name>` outside the home region.
    let on_queue_url = match path.matches('/').count() {
        2 => true,
        4 => path.starts_with("/queue/"),
        _ => false,
    };
    if on_queue_url && matches!(action.as_str(), "CreateQueue" | "ListQueues") {
        let error = ApiError::new(
            ErrorCode::InvalidAction,
            format!("The action {action} is not valid for this endpoint."),
        );
        return fail(answer, error);
    }
    if !pairs.iter().any(|(k, _)| *k == "QueueUrl") && on_queue_url {
        path_url = format!("{}://{}{path}", ctx.scheme, ctx.host);
        pairs.push(("QueueUrl", &path_url));
    }
    sqs_query(service, (&action, answer), &pairs, ctx).await
}

/// An SQS Query request, its parameters decoded by the lists its action declares.
async fn sqs_query(
    service: &Arc<Service>,
    (action, answer): (&str, Protocol),
    pairs: &[(&str, &str)],
    ctx: &RequestContext,
) -> Response {
    // An action not declared has no lists; dispatch refuses it.
    let lists = crate::protocol::SqsAction::parse(action).map_or(&[][..], |a| a.query_lists());
    let payload = match query_params::to_json(pairs, lists) {
        Ok(json) => Payload::Query(json),
        Err(error) => {
            return respond(
                encode_error(answer, &error, &ctx.request_id),
                &ctx.request_id,
            )
        }
    };
    let encoded = service.dispatch(answer, action, &payload, ctx).await;
    respond(encoded, &ctx.request_id)
}
