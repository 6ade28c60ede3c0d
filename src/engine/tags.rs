//! Tag limits, as queues and topics share them.

use super::error::{EngineError, EngineResult};
use super::message::check_xml_text;

/// Tag limits: keys 1-128 characters, values up to 256, at most 50 per queue once applied.
pub fn check_tags<'a>(
    tags: impl Iterator<Item = (&'a str, &'a str)>,
    total_after: usize,
) -> EngineResult<()> {
    check_tag_text(tags)?;
    check_tag_count(total_after)
}

/// Tag keys and values: their lengths, and only characters an XML answer can carry.
pub fn check_tag_text<'a>(tags: impl Iterator<Item = (&'a str, &'a str)>) -> EngineResult<()> {
    for (key, value) in tags {
        check_xml_text(key)
            .and_then(|()| check_xml_text(value))
            .map_err(|bad| {
                EngineError::invalid(format!("Tags contain the invalid character '#x{bad:X}'."))
            })?;
        if key.is_empty() || key.chars().count() > 128 {
            return Err(EngineError::invalid(format!(
                "Tag key {key} is invalid. Tag keys must be 1 to 128 characters long."
            )));
        }
        if value.chars().count() > 256 {
            return Err(EngineError::invalid(format!(
                "Tag value for key {key} is invalid. Tag values can be at most 256 characters long."
            )));
        }
    }
    Ok(())
}

pub fn check_tag_count(total_after: usize) -> EngineResult<()> {
    if total_after > 50 {
        return Err(EngineError::invalid(
            "Too many tags added for queue. A queue can have at most 50 tags.",
        ));
    }
    Ok(())
}
