//! A response as the protocols leave it: status, content type and body.

/// A response ready for HTTP.
pub struct Encoded {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    /// `x-amzn-query-error` for JSON errors.
    pub query_error: Option<String>,
}

pub const JSON_CONTENT_TYPE: &str = "application/x-amz-json-1.0";
pub const XML_CONTENT_TYPE: &str = "text/xml";
