//! `/_orderly/clock`: with `--clock manual`, the server's time moves only when a test says
//! so. `POST {"advance": "5m"}` moves it forward (a humantime duration: `500ms`, `12h`,
//! `1h 30m`; whole milliseconds, no months or years); `POST {"set": "2026-12-01T00:00:00Z"}`
//! (RFC 3339 with any offset, or epoch milliseconds) moves
//! it to that instant, never backwards, and never past `clock::LATEST` (9999-12-01, so every
//! time written in RFC 3339 has its four-digit year). `GET` answers the time. Every deadline (visibility,
//! delays, deduplication and attempt windows, retention, long polls, webhook retries, move
//! tasks, archive windows) follows it. Without the flag: 403.

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::state::HttpState;
use crate::clock::{Clock, ManualClock, Refused, LATEST};
use crate::engine::Timestamp;
use crate::service::inspect::rfc3339;

/// `GET /_orderly/clock`.
pub(super) async fn read(State(state): State<HttpState>, headers: HeaderMap) -> Response {
    if let Some(refused) = super::inspect::unauthorized(&state, &headers) {
        return refused;
    }
    match &state.clock_control {
        Some(clock) => answer(StatusCode::OK, now(clock)),
        None => refused(),
    }
}

/// `POST /_orderly/clock`.
pub(super) async fn move_clock(
    State(state): State<HttpState>,
    headers: HeaderMap,
    body: bytes::Bytes,
) -> Response {
    if let Some(refused) = super::inspect::unauthorized(&state, &headers) {
        return refused;
    }
    let Some(clock) = &state.clock_control else {
        return refused();
    };
    let (status, body) = apply(clock, &body);
    if status != StatusCode::OK {
        return answer(status, body);
    }
    let recording = clock.clone();
    let recorded = tokio::task::spawn_blocking(move || recording.record()).await;
    match recorded {
        Ok(Ok(())) => answer(status, body),
        Ok(Err(error)) => unrecorded(clock, &error.to_string()),
        Err(error) => unrecorded(clock, &error.to_string()),
    }
}

/// The clock moved, but where to could not be kept: a restart may start it earlier.
fn unrecorded(clock: &ManualClock, cause: &str) -> Response {
    let message = format!(
        "the clock moved, but its time could not be recorded ({cause}): a restart, or the next \
         leader, may start it where it was last recorded"
    );
    tracing::warn!(%cause, "a manual clock's move was not recorded");
    let mut body = now(clock);
    body["message"] = Value::String(message);
    answer(StatusCode::SERVICE_UNAVAILABLE, body)
}

/// What a `POST` body asks of the clock, done: the status and JSON to answer. Every time it
/// can reach is one the wire formats can write (`clock::LATEST`).
pub fn apply(clock: &ManualClock, body: &[u8]) -> (StatusCode, Value) {
    let request: Value = match serde_json::from_slice(body) {
        Ok(Value::Object(fields)) => Value::Object(fields),
        _ => return bad(r#"the body must be {"advance": "<duration>"} or {"set": "<time>"}"#),
    };
    let moved = match (request.get("advance"), request.get("set")) {
        (Some(Value::String(text)), None) => match duration(text) {
            Ok(by) => clock.try_advance_millis(by),
            Err(why) => return bad(&format!("advance: {why} ({text})")),
        },
        (Some(_), None) => return bad(r#"advance: a duration with its unit, such as "300s""#),
        (None, Some(to)) => match instant(to) {
            Some(to) => clock.set(to),
            None => {
                return bad("set: an RFC 3339 time (2026-12-01T00:00:00Z) or epoch milliseconds")
            }
        },
        _ => return bad(r#"give one of "advance" (a duration such as "5m") or "set" (a time)"#),
    };
    match moved {
        Ok(()) => (StatusCode::OK, now(clock)),
        Err(Refused::Backwards(stays)) => (
            StatusCode::CONFLICT,
            json!({"message": "the clock never moves backwards", "now": rfc3339(stays)}),
        ),
        Err(Refused::PastLatest) => bad(&format!(
            "the clock goes no later than {}: later times cannot be written with the \
             four-digit years of RFC 3339, as SNS messages and Orderly's endpoints write them",
            rfc3339(LATEST)
        )),
    }
}

/// Milliseconds of a humantime duration. Months and years (`M`, `y`: 30.44 and 365.25 days in
/// humantime) are refused, as is what is not whole milliseconds: the clock never goes back,
/// so a `5M` meant as minutes could not be undone.
fn duration(text: &str) -> Result<u64, String> {
    let by = humantime::parse_duration(text).map_err(|error| error.to_string())?;
    let units = text
        .split(|c: char| !c.is_ascii_alphabetic())
        .filter(|u| !u.is_empty());
    if let Some(unit) = units
        .into_iter()
        .find(|u| matches!(*u, "M" | "month" | "months" | "y" | "year" | "years"))
    {
        return Err(format!("{unit} is no fixed length; give days (\"30d\")"));
    }
    if by.subsec_nanos() % 1_000_000 != 0 {
        return Err("the clock moves by whole milliseconds".into());
    }
    Ok(u64::try_from(by.as_millis()).unwrap_or(u64::MAX))
}

fn instant(value: &Value) -> Option<Timestamp> {
    match value {
        Value::Number(n) => n.as_u64().map(Timestamp),
        Value::String(text) => Timestamp::parse_rfc3339(text),
        _ => None,
    }
}

fn now(clock: &ManualClock) -> Value {
    let at = clock.now();
    json!({"now": rfc3339(at), "epochMillis": at.millis()})
}

fn answer(status: StatusCode, body: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn refused() -> Response {
    answer(
        StatusCode::FORBIDDEN,
        json!({"message": "the clock moves only when the server runs with --clock manual"}),
    )
}

fn bad(message: &str) -> (StatusCode, Value) {
    (StatusCode::BAD_REQUEST, json!({ "message": message }))
}
