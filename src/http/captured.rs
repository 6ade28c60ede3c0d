//! The captured protocols' messages over HTTP (`service::captured`):
//! - `GET /_orderly/sns/deliveries[?protocol=sms][&endpoint=…]`: what email, email-json, sms,
//!   application, lambda and firehose endpoints would have received, oldest first, email
//!   confirmations included; `DELETE` with the same filters forgets them;
//! - LocalStack's `GET /_aws/sns/sms-messages[?phoneNumber=…]` and
//!   `/_aws/sns/platform-endpoint-messages[?endpointArn=…]`, and their `DELETE`s;
//! - LocalStack's `GET /_aws/sns/subscription-tokens/<subscription ARN>`: the token that
//!   confirms a pending subscription (HTTP/S or email), for tests that confirm it directly;
//! - `POST /_orderly/sns/opted-out?phoneNumber=…[&region=…&account=…]`: the number opts out of
//!   SMS, as a reply of STOP does on AWS (OptInPhoneNumber takes it back).
//!
//! With `--auth` they ask for HTTP Basic credentials, as the inspection API does.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, MethodRouter};
use serde_json::json;

use super::inspect::{answer, failed, query_param, reply, unauthorized};
use super::state::HttpState;

use crate::service::captured::{CapturedFilter, LocalStackListing};

fn filter(uri: &Uri) -> CapturedFilter {
    CapturedFilter {
        protocol: query_param(uri, "protocol"),
        endpoint: query_param(uri, "endpoint"),
    }
}

pub async fn deliveries(State(state): State<HttpState>, headers: HeaderMap, uri: Uri) -> Response {
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    reply(state.service.captured_messages(&filter(&uri)).await)
}

/// 204 once forgotten.
fn forgotten(result: Result<(), crate::protocol::ApiError>) -> Response {
    match result {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(error) => failed(error),
    }
}

pub async fn forget_deliveries(
    State(state): State<HttpState>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    forgotten(state.service.forget_captured(&filter(&uri)).await)
}

/// One of LocalStack's listings (`GET`, and `DELETE` to forget), filtered by its parameter.
pub fn localstack_listing(listing: &'static LocalStackListing) -> MethodRouter<HttpState> {
    let list = move |State(state): State<HttpState>, headers: HeaderMap, uri: Uri| async move {
        if let Some(refused) = unauthorized(&state, &headers) {
            return refused;
        }
        let endpoint = query_param(&uri, listing.parameter);
        let listed = state
            .service
            .localstack_listing(listing, endpoint.as_deref())
            .await;
        reply(listed)
    };
    let forget = move |State(state): State<HttpState>, headers: HeaderMap, uri: Uri| async move {
        if let Some(refused) = unauthorized(&state, &headers) {
            return refused;
        }
        let endpoint = query_param(&uri, listing.parameter);
        forgotten(
            state
                .service
                .forget_listed(listing, endpoint.as_deref())
                .await,
        )
    };
    get(list).delete(forget)
}

/// LocalStack's answers: 400 for an ARN that is none, 404 for one with no token.
pub async fn subscription_token(
    State(state): State<HttpState>,
    headers: HeaderMap,
    Path(arn): Path<String>,
) -> Response {
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    let failed = |status: StatusCode, error: &str| {
        answer(status, json!({ "error": error, "subscription_arn": arn }))
    };
    if crate::engine::topics::subscription_topic_arn(&arn).is_err() {
        return failed(
            StatusCode::BAD_REQUEST,
            "The provided SubscriptionARN is invalid",
        );
    }
    match state.service.backend.confirmation_token(&arn).await {
        Ok(Some(token)) => answer(
            StatusCode::OK,
            json!({ "subscription_token": token, "subscription_arn": arn }),
        ),
        Ok(None) => failed(
            StatusCode::NOT_FOUND,
            "The provided SubscriptionARN is not found",
        ),
        Err(error) => failed(StatusCode::SERVICE_UNAVAILABLE, &error.to_string()),
    }
}

/// `POST /_orderly/sns/opted-out?phoneNumber=…`: 204 once the number has opted out, in the
/// region and account named (the server's own by default).
pub async fn opt_out(State(state): State<HttpState>, headers: HeaderMap, uri: Uri) -> Response {
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    use crate::engine::namespace::{is_account_id, is_region_name, Namespace};
    let refuse = |message: String| answer(StatusCode::BAD_REQUEST, json!({ "message": message }));
    let Some(number) = query_param(&uri, "phoneNumber") else {
        return refuse("phoneNumber is required".into());
    };
    let home = state.service.namespaces().home().clone();
    let region = query_param(&uri, "region").unwrap_or_else(|| home.region.to_string());
    let account = query_param(&uri, "account").unwrap_or_else(|| home.account.to_string());
    if !is_region_name(&region) {
        return refuse(format!("region {region:?} is not a region's name"));
    }
    if !is_account_id(&account) {
        return refuse(format!(
            "account {account:?} is not an account id (12 digits)"
        ));
    }
    let namespace = Namespace::new(&region, &account);
    forgotten(state.service.opt_out(&namespace, &number).await)
}
