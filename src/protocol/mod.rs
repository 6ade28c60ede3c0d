//! Wire protocols: request payloads to typed inputs, typed outputs and errors to bytes.
//! Holds no state; knows nothing of queues.

pub mod error;
pub mod lenient;
pub mod query_params;
pub mod sqs;
pub mod xml;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

pub use error::{ApiError, ErrorCode};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// AWS JSON 1.0 (`X-Amz-Target`).
    Json,
    /// AWS Query (form parameters in, XML out).
    Query,
}

/// A request body, decoded lazily into the action's input type.
pub enum Payload {
    Json(bytes::Bytes),
    Query(Value),
}

impl Payload {
    pub fn decode<T: DeserializeOwned + Default>(&self) -> Result<T, ApiError> {
        let result = match self {
            Payload::Json(body) if body.iter().all(u8::is_ascii_whitespace) => {
                return Ok(T::default())
            }
            Payload::Json(body) => serde_json::from_slice(body),
            Payload::Query(value) => T::deserialize(value),
        };
        result.map_err(|e| match self {
            Payload::Json(_) => ApiError::new(ErrorCode::SerializationException, e.to_string()),
            Payload::Query(_) => ApiError::invalid(e.to_string()),
        })
    }
}

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

pub fn encode_ok<T: Serialize>(
    protocol: Protocol,
    action: &str,
    output: &T,
    request_id: &str,
) -> Encoded {
    match protocol {
        Protocol::Json => Encoded {
            status: 200,
            content_type: JSON_CONTENT_TYPE,
            body: serde_json::to_vec(output).expect("responses serialize"),
            query_error: None,
        },
        Protocol::Query => {
            let value = serde_json::to_value(output).expect("responses serialize");
            Encoded {
                status: 200,
                content_type: XML_CONTENT_TYPE,
                body: xml::response(action, &value, request_id, xml::SQS_NAMESPACE).into_bytes(),
                query_error: None,
            }
        }
    }
}

pub fn encode_error(protocol: Protocol, error: &ApiError, request_id: &str) -> Encoded {
    let (shape, query_code, status) = error.code.wire();
    match protocol {
        Protocol::Json => Encoded {
            status,
            content_type: JSON_CONTENT_TYPE,
            body: serde_json::to_vec(
                &serde_json::json!({"__type": shape, "message": error.message}),
            )
            .expect("errors serialize"),
            query_error: Some(format!("{query_code};{}", error.code.fault())),
        },
        Protocol::Query => Encoded {
            status,
            content_type: XML_CONTENT_TYPE,
            body: xml::error(
                error.code.fault(),
                query_code,
                &error.message,
                request_id,
                xml::SQS_NAMESPACE,
            )
            .into_bytes(),
            query_error: None,
        },
    }
}
