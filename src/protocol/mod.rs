//! Wire protocols: request payloads to typed inputs, typed outputs and errors to bytes.
//! Holds no state; knows nothing of queues or topics.

pub mod actions;
pub mod borrowed;
pub mod encoded;
pub mod error;
pub mod form;
pub mod json_answer;
pub mod lenient;
pub mod lone_surrogates;
pub mod query_json;
pub mod query_params;
pub mod sns;
pub mod sns_mobile;
pub mod sns_query;
pub mod sqs;
pub mod xml;
pub mod xml_json;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use actions::{Action, Shape, SnsAction, SqsAction};
pub use encoded::{Encoded, JSON_CONTENT_TYPE, XML_CONTENT_TYPE};
pub use error::{ApiError, ErrorCode};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// AWS JSON 1.0 (`X-Amz-Target`), SQS.
    Json,
    /// AWS Query (form parameters in, XML out), SQS.
    Query,
    /// AWS Query with the answer rendered as JSON, for a Query request that accepts JSON (AWS
    /// does so: `{"<Action>Response": {"<Action>Result": …, "ResponseMetadata": …}}`), SQS.
    QueryJson,
    /// SNS's Query dialect: its own list/map encoding, namespace and error codes.
    SnsQuery,
}

/// A request body, decoded lazily into the action's input type.
pub enum Payload {
    Json(bytes::Bytes),
    /// Query parameters already reshaped into the JSON form (SQS or SNS rules).
    Query(Value),
}

impl Payload {
    /// Decodes the input; it may borrow strings from this payload.
    pub fn decode<'a, T: Deserialize<'a> + Default>(
        &'a self,
        protocol: Protocol,
    ) -> Result<T, ApiError> {
        let result = match self {
            Payload::Json(body) if body.iter().all(u8::is_ascii_whitespace) => {
                return Ok(T::default())
            }
            // serde would build a request from a JSON array too (fields in order); AWS wants an object.
            Payload::Json(body)
                if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') =>
            {
                return Err(ApiError::new(
                    ErrorCode::SerializationException,
                    "The request body must be a JSON object.",
                ))
            }
            Payload::Json(body) => serde_json::from_slice(body),
            Payload::Query(value) => T::deserialize(value),
        };
        result.map_err(|e| match protocol {
            Protocol::Json => ApiError::new(ErrorCode::SerializationException, e.to_string()),
            Protocol::Query | Protocol::QueryJson => ApiError::invalid(e.to_string()),
            Protocol::SnsQuery => ApiError::new(
                ErrorCode::InvalidParameter,
                format!("Invalid parameter: {e}"),
            ),
        })
    }
}

impl Payload {
    /// This JSON payload with each escaped lone UTF-16 surrogate written as U+FFFF
    /// (`lone_surrogates`); none when it holds none, or is not JSON.
    pub fn lone_surrogates_replaced(&self) -> Option<Payload> {
        match self {
            Payload::Json(body) => lone_surrogates::replaced(body).map(|b| Payload::Json(b.into())),
            Payload::Query(_) => None,
        }
    }
}

/// The request parameters that name what it acts on, first found first.
const RESOURCE_PARAMETERS: [&str; 6] = [
    "QueueUrl",
    "QueueName",
    "TopicArn",
    "SubscriptionArn",
    "SourceArn",
    "ResourceArn",
];

impl Payload {
    /// The queue or topic a request names (for logs; parses a JSON body, so call it only
    /// when the line is written).
    pub fn resource(&self) -> Option<String> {
        let find = |value: &Value| {
            RESOURCE_PARAMETERS
                .iter()
                .find_map(|name| value.get(name)?.as_str().map(str::to_string))
        };
        match self {
            Payload::Query(value) => find(value),
            Payload::Json(body) => find(&serde_json::from_slice(body).ok()?),
        }
    }
}

fn json_ok(body: Vec<u8>) -> Encoded {
    Encoded {
        status: 200,
        content_type: JSON_CONTENT_TYPE,
        body,
        query_error: None,
    }
}

fn xml(status: u16, body: String) -> Encoded {
    Encoded {
        status,
        content_type: XML_CONTENT_TYPE,
        body: body.into_bytes(),
        query_error: None,
    }
}

/// A Query request without `Action`: 404 and a bare `<UnknownOperationException/>`, whatever
/// the request accepts (observed on AWS), not an error envelope.
pub fn unknown_operation() -> Encoded {
    xml(404, "<UnknownOperationException/>".into())
}

pub fn encode_ok<T: Serialize>(
    protocol: Protocol,
    action: Action,
    output: &T,
    request_id: &str,
) -> Encoded {
    if protocol == Protocol::Json {
        // Room for a batch answer up front: growing from empty would reallocate ten times.
        let mut body = Vec::with_capacity(2048);
        serde_json::to_writer(&mut body, output).expect("responses serialize");
        return json_ok(body);
    }
    let value = serde_json::to_value(output).expect("responses serialize");
    if let (Protocol::QueryJson, Action::Sqs(action)) = (protocol, action) {
        return query_json::response(action, value, request_id);
    }
    match action {
        Action::Sns(action) => xml(200, sns_query::response(action, &value, request_id)),
        Action::Sqs(action) => xml(
            200,
            xml::response(action, &value, request_id, xml::SQS_NAMESPACE),
        ),
    }
}

/// An answer of the hot path: its JSON is written by hand (see `json_answer`); the Query
/// protocol's XML as for every other answer.
pub fn encode_answer<T: Serialize + json_answer::JsonAnswer>(
    protocol: Protocol,
    action: Action,
    output: &T,
    request_id: &str,
) -> Encoded {
    if protocol != Protocol::Json {
        return encode_ok(protocol, action, output, request_id);
    }
    let mut body = Vec::with_capacity(output.size_hint());
    output.write_json(&mut body);
    json_ok(body)
}

pub fn encode_error(protocol: Protocol, error: &ApiError, request_id: &str) -> Encoded {
    let (shape, query_code, status) = error.code.wire();
    let fault = error.code.fault();
    match protocol {
        Protocol::Json => Encoded {
            status,
            content_type: JSON_CONTENT_TYPE,
            body: serde_json::to_vec(
                &serde_json::json!({"__type": shape, "message": error.message}),
            )
            .expect("errors serialize"),
            query_error: Some(format!("{query_code};{fault}")),
        },
        Protocol::QueryJson => query_json::error(status, (fault, query_code), error, request_id),
        Protocol::Query => xml(
            status,
            xml::error(
                xml::ErrorShape::Sqs,
                (fault, query_code),
                error.query_message(),
                request_id,
                xml::SQS_NAMESPACE,
            ),
        ),
        Protocol::SnsQuery => xml(
            status,
            xml::error(
                xml::ErrorShape::Sns,
                (fault, error.code.sns_code()),
                &error.message,
                request_id,
                sns_query::SNS_NAMESPACE,
            ),
        ),
    }
}
