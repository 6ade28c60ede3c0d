//! Wire forms of messages: decoding sent attributes, rendering received messages.

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use crate::engine::message::{AttributeData, AttributeValue, Message, MessageAttributes};
use crate::engine::queue::Received;
use crate::protocol::sqs::{AttributeValueWire, MessageWire, Pairs};
use crate::protocol::ApiError;

/// Decodes `MessageAttributes` as sent. Shape errors here; AWS's value rules in the engine.
pub fn decode_attributes(
    wire: BTreeMap<String, AttributeValueWire>,
) -> Result<MessageAttributes, ApiError> {
    let mut out = Vec::with_capacity(wire.len());
    for (name, value) in wire {
        let data_type = value.data_type.unwrap_or_default();
        let binary = data_type.starts_with("Binary");
        // A value given only in the field the type does not name is kept as given, so the
        // rules can say which field it must use (SNS does, observed on AWS).
        let data = match (binary, value.string_value, value.binary_value) {
            (true, Some(text), None) => AttributeData::String(text),
            (false, None, Some(encoded)) => match STANDARD.decode(encoded.trim()) {
                Ok(bytes) => AttributeData::Binary(bytes),
                Err(_) => AttributeData::String(String::new()),
            },
            (true, _, encoded) => {
                let encoded = encoded.unwrap_or_default();
                AttributeData::Binary(STANDARD.decode(encoded.trim()).map_err(|_| {
                    ApiError::invalid(format!(
                        "The binary value of message (user) attribute '{name}' is not valid base64."
                    ))
                })?)
            }
            (false, text, _) => AttributeData::String(text.unwrap_or_default()),
        };
        out.push((name, AttributeValue { data_type, data }));
    }
    Ok(MessageAttributes::new(out))
}

/// `MessageSystemAttributes`: SQS accepts only AWSTraceHeader, as a String.
pub fn decode_trace_header(
    wire: BTreeMap<String, AttributeValueWire>,
) -> Result<Option<String>, ApiError> {
    let mut trace = None;
    for (name, value) in wire {
        if name != "AWSTraceHeader" {
            return Err(ApiError::invalid(format!(
                "Message system attribute name '{name}' is invalid."
            )));
        }
        if value.data_type.as_deref() != Some("String") {
            return Err(ApiError::invalid(
                "The message system attribute 'AWSTraceHeader' must be of type 'String'.",
            ));
        }
        trace = Some(value.string_value.unwrap_or_default());
    }
    Ok(trace)
}

pub fn encode_attributes(attributes: &MessageAttributes) -> BTreeMap<String, AttributeValueWire> {
    attributes
        .iter()
        .map(|(name, value)| {
            let (string_value, binary_value) = match &value.data {
                AttributeData::String(s) => (Some(s.clone()), None),
                AttributeData::Binary(b) => (None, Some(STANDARD.encode(b))),
            };
            (
                name.clone(),
                AttributeValueWire {
                    string_value,
                    binary_value,
                    string_list_values: None,
                    binary_list_values: None,
                    data_type: Some(value.data_type.clone()),
                },
            )
        })
        .collect()
}

/// System attribute names in the order AWS lists them.
const SYSTEM_ATTRIBUTES: &[&str] = &[
    "SenderId",
    "SentTimestamp",
    "ApproximateReceiveCount",
    "ApproximateFirstReceiveTimestamp",
    "SequenceNumber",
    "MessageDeduplicationId",
    "MessageGroupId",
    "AWSTraceHeader",
    "DeadLetterQueueSourceArn",
];

fn system_attribute(message: &Message, name: &str) -> Option<String> {
    Some(match name {
        "SenderId" => message.sender_id.to_string(),
        "SentTimestamp" => message.sent_at.millis().to_string(),
        "ApproximateReceiveCount" => message.receive_count.to_string(),
        "ApproximateFirstReceiveTimestamp" => message.first_receive_at?.millis().to_string(),
        "SequenceNumber" => message.sequence_number?.to_string(),
        "MessageDeduplicationId" => message.dedup_id.as_deref()?.to_string(),
        "MessageGroupId" => message.group_id.as_deref()?.to_string(),
        "AWSTraceHeader" => message.trace_header()?.to_string(),
        "DeadLetterQueueSourceArn" => message.dead_letter_source_arn()?.to_string(),
        _ => return None,
    })
}

/// A received message with the requested system and message attributes.
pub fn message_wire(
    received: Received,
    system_names: &[String],
    attribute_names: &[String],
) -> MessageWire {
    let message = received.message;
    let all = system_names.iter().any(|n| n == "All");
    let attributes = SYSTEM_ATTRIBUTES
        .iter()
        .filter(|name| all || system_names.iter().any(|n| n == *name))
        .filter_map(|name| system_attribute(&message, name).map(|v| (name.to_string(), v)))
        .collect();
    let selected = message.attributes.select(attribute_names);
    // The stored checksum covers every attribute; a subset needs its own.
    let md5 = if selected.len() == message.attributes.len() {
        message.attributes_md5().map(|m| m.to_string())
    } else {
        selected.md5()
    };
    MessageWire {
        message_id: message.id,
        receipt_handle: received.receipt_handle,
        md5_of_body: message.body_md5,
        body: message.body,
        attributes: Pairs(attributes),
        md5_of_message_attributes: md5,
        message_attributes: encode_attributes(&selected),
    }
}
