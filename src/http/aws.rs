//! The AWS endpoint: every request no other route takes. Tells the protocols apart
//! (X-Amz-Target means SQS JSON; otherwise form and query parameters with `Action`, SNS or SQS
//! by signing service, Version or action), builds the request context, and hands the payload to
//! the service.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};

use super::identity::{self, Caller};
use super::reply::{credential_scope, early_error, is_json, read_body, respond, usable_host};
use super::sessions::{self, Session};
use super::state::HttpState;
use super::{sts, unsigned};
use crate::protocol::{
    encode_error, form, query_params, sns_query, ApiError, ErrorCode, Payload, Protocol,
};
use crate::service::{RequestContext, Service};

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
        // Not known to be missing: a node that may hold it could not be asked.
        Err(error) => {
            tracing::warn!(%error, "an SNS signing certificate could not be read");
            StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
    }
}

pub(super) async fn handle(State(state): State<HttpState>, request: Request) -> Response {
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
    let (access_key, signing_service) = credential_scope(&headers);
    let session = match access_key {
        Some(key) => match state.sessions.find(key, sts::machine_now()).await {
            Ok(session) => session,
            Err(error) => return early_error(&headers, &error, &request_id),
        },
        None => None,
    };
    let from_session = session.is_some();
    let signed = (&method, &uri, &headers, &body[..]);
    let (authenticated, caller) = match signer(&state, signed, session) {
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
    // AWS renders an SQS Query answer as JSON when the request accepts JSON (observed on AWS).
    let answer = if accepts_json(&headers) {
        Protocol::QueryJson
    } else {
        Protocol::Query
    };
    let asker = sts::Asker {
        ctx: &ctx,
        strict,
        sessions: &state.sessions,
        from_session,
    };
    query(service, &uri, &body, (signing_service, answer), asker).await
}

/// Whether the request is signed, and by whom (`identity`), `session` being the temporary
/// credentials its access key names, if it does. With `--auth`, a signature that does not
/// verify is refused; without it, a credential is taken at its word.
fn signer(
    state: &HttpState,
    (method, uri, headers, body): (&Method, &axum::http::Uri, &HeaderMap, &[u8]),
    session: Option<Session>,
) -> Result<(bool, Caller), ApiError> {
    let (access_key, _) = credential_scope(headers);
    let authenticated =
        access_key.is_some() || uri.query().is_some_and(|q| q.contains("X-Amz-Signature="));
    let account = state.service.account_id();
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
    crate::http::auth::as_arrived((method, uri, headers, body), |arrived, now| {
        if let (Some(key), Some(session)) = (access_key, session) {
            crate::http::auth::verify_temporary(arrived, now, key, &session.secret)?;
            let token = headers
                .get("x-amz-security-token")
                .and_then(|t| t.to_str().ok());
            sessions::admit(&session, token, now)?;
            return Ok((authenticated, session.caller));
        }
        match auth.check(arrived, now)? {
            Some(key) => Ok((authenticated, auth.caller(&key))),
            None => Ok((false, Caller::account(account))),
        }
    })
}

/// An AWS JSON request: the action is in `X-Amz-Target`. `strict`: an unsigned request may
/// only follow the SNS links.
pub(super) async fn json(
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
    if let Some(answered) = sts::query(signing_service, &params, &action, &asker).await {
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
