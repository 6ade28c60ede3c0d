//! What the SNS actions share: their parameter errors and their pages.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

use crate::protocol::{ApiError, ErrorCode};

/// SNS list pages hold 100 items.
const PAGE: usize = 100;

pub(super) fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidParameter, message)
}

pub(super) fn required<T>(value: Option<T>, name: &str) -> Result<T, ApiError> {
    value.ok_or_else(|| {
        invalid(format!(
            "Invalid parameter: {name} Reason: no value for required parameter"
        ))
    })
}

/// One page starting at the offset the token encodes.
pub(super) fn page<T>(
    items: Vec<T>,
    token: Option<&str>,
) -> Result<(Vec<T>, Option<String>), ApiError> {
    page_of(items, token, PAGE)
}

/// One page of `size` items starting at the offset the token encodes.
pub(super) fn page_of<T>(
    items: Vec<T>,
    token: Option<&str>,
    size: usize,
) -> Result<(Vec<T>, Option<String>), ApiError> {
    let start = match token {
        Some(t) => URL_SAFE_NO_PAD
            .decode(t)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|s| s.parse::<usize>().ok())
            .ok_or_else(|| invalid("Invalid parameter: NextToken"))?,
        None => 0,
    };
    let total = items.len();
    let page: Vec<T> = items.into_iter().skip(start).take(size).collect();
    let end = start.saturating_add(size);
    let next = (end < total).then(|| URL_SAFE_NO_PAD.encode(end.to_string()));
    Ok((page, next))
}

pub(super) fn pairs(map: std::collections::BTreeMap<String, String>) -> Vec<(String, String)> {
    map.into_iter().collect()
}

/// Tags as given, refused when two share a key (as AWS refuses them, creating a topic or
/// tagging one).
pub(super) fn distinct_tags(
    tags: Vec<crate::protocol::sns::TagWire>,
) -> Result<Vec<(String, String)>, ApiError> {
    let mut keys = std::collections::HashSet::new();
    if !tags.iter().all(|t| keys.insert(t.key.as_str())) {
        return Err(invalid(
            "Invalid parameter: Duplicated keys are not allowed.",
        ));
    }
    Ok(tags.into_iter().map(|t| (t.key, t.value)).collect())
}
