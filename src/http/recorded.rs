//! The recorded protocols' messages over HTTP (issue 32, item 9; `service::recorded`):
//! - `GET /_orderly/sns/deliveries[?protocol=sms][&endpoint=…]`: what email, email-json, sms,
//!   application, lambda and firehose endpoints would have received, oldest first, email
//!   confirmations included; `DELETE` with the same filters forgets them;
//! - LocalStack's `GET /_aws/sns/sms-messages[?phoneNumber=…]` and its `DELETE`.
//!
//! With `--auth` they ask for HTTP Basic credentials, as the inspection API does.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use super::inspect::{answer, query_param, unauthorized};
use super::HttpState;
use crate::service::recorded::RecordedFilter;

fn filter(uri: &Uri) -> RecordedFilter {
    RecordedFilter {
        protocol: query_param(uri, "protocol"),
        endpoint: query_param(uri, "endpoint"),
    }
}

pub async fn deliveries(State(state): State<HttpState>, headers: HeaderMap, uri: Uri) -> Response {
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    answer(
        StatusCode::OK,
        state.service.recorded_messages(&filter(&uri)),
    )
}

pub async fn forget_deliveries(
    State(state): State<HttpState>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    state.service.forget_recorded(&filter(&uri));
    StatusCode::NO_CONTENT.into_response()
}

pub async fn sms_messages(
    State(state): State<HttpState>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    let number = query_param(&uri, "phoneNumber");
    answer(
        StatusCode::OK,
        state.service.sms_messages(number.as_deref()),
    )
}

pub async fn forget_sms_messages(
    State(state): State<HttpState>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    state
        .service
        .forget_sms(query_param(&uri, "phoneNumber").as_deref());
    StatusCode::NO_CONTENT.into_response()
}
