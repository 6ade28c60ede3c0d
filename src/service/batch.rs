//! Whole-request batch checks shared by the three batch actions.

use crate::protocol::{ApiError, ErrorCode};

/// 1-10 entries with distinct ids of `[A-Za-z0-9_-]{1,80}`.
pub fn check_entries<'a>(
    entry_name: &str,
    ids: impl ExactSizeIterator<Item = Option<&'a str>>,
) -> Result<(), ApiError> {
    let count = ids.len();
    if count == 0 {
        return Err(ApiError::new(
            ErrorCode::EmptyBatchRequest,
            format!("There should be at least one {entry_name} in the request."),
        ));
    }
    if count > 10 {
        return Err(ApiError::new(
            ErrorCode::TooManyEntriesInBatchRequest,
            format!("Maximum number of entries per request are 10. You have sent {count}."),
        ));
    }
    // At most ten ids: comparing them pairwise costs less than hashing them.
    let mut seen: [&str; 10] = [""; 10];
    for (index, id) in ids.enumerate() {
        let id = id.ok_or_else(|| ApiError::missing(&format!("{entry_name}.Id")))?;
        let valid = !id.is_empty()
            && id.len() <= 80
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid {
            return Err(ApiError::new(
                ErrorCode::InvalidBatchEntryId,
                "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long.",
            ));
        }
        if seen[..index].contains(&id) {
            return Err(ApiError::new(
                ErrorCode::BatchEntryIdsNotDistinct,
                format!("Id {id} repeated."),
            ));
        }
        seen[index] = id;
    }
    Ok(())
}

/// A batch result error entry from an API error.
pub fn failure(id: &str, error: ApiError) -> crate::protocol::sqs::BatchError {
    crate::protocol::sqs::BatchError {
        id: id.to_string(),
        sender_fault: error.code.fault() == "Sender",
        code: error.code.query_code().to_string(),
        message: error.message,
    }
}
