//! SQS request and response shapes, with AWS's member names. Requests decode from either
//! protocol (see `query_params`); responses serialize to JSON directly and to XML through `xml`.
//! Every member is optional here: the service reports a missing one as AWS does.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::json_answer::{JsonAnswer, Object};
use super::{borrowed, lenient};
use crate::engine::body::BodyText;
use crate::engine::message::{Md5Digest, MessageId};

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct CreateQueueInput {
    pub queue_name: Option<String>,
    pub attributes: BTreeMap<String, String>,
    #[serde(rename = "tags")]
    pub tags: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct QueueNameInput {
    pub queue_name: Option<String>,
    #[serde(rename = "QueueOwnerAWSAccountId")]
    pub queue_owner_account_id: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct QueueUrlInput {
    pub queue_url: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ListQueuesInput {
    pub queue_name_prefix: Option<String>,
    pub next_token: Option<String>,
    #[serde(deserialize_with = "lenient::int")]
    pub max_results: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ListDeadLetterSourceQueuesInput {
    pub queue_url: Option<String>,
    pub next_token: Option<String>,
    #[serde(deserialize_with = "lenient::int")]
    pub max_results: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct GetQueueAttributesInput {
    pub queue_url: Option<String>,
    pub attribute_names: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct SetQueueAttributesInput {
    pub queue_url: Option<String>,
    pub attributes: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TagQueueInput {
    pub queue_url: Option<String>,
    pub tags: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct UntagQueueInput {
    pub queue_url: Option<String>,
    pub tag_keys: Option<Vec<String>>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct AttributeValueWire {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub string_value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binary_value: Option<String>,
    #[serde(default, skip_serializing)]
    pub string_list_values: Option<Vec<String>>,
    #[serde(default, skip_serializing)]
    pub binary_list_values: Option<Vec<String>>,
    #[serde(default)]
    pub data_type: Option<String>,
}

/// SendMessage's input: one entry plus the queue.
pub type SendMessageInput<'a> = SendEntry<'a>;

/// One message to send. Strings borrow from the request body where JSON needs no unescaping,
/// so a send copies each only once, into the stored message.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct SendEntry<'a> {
    /// SendMessage's; entries of a batch ignore it, as they ignore any unknown member.
    #[serde(borrow, deserialize_with = "borrowed::text")]
    pub queue_url: Option<Cow<'a, str>>,
    #[serde(borrow, deserialize_with = "borrowed::text")]
    pub id: Option<Cow<'a, str>>,
    #[serde(borrow, deserialize_with = "borrowed::text")]
    pub message_body: Option<Cow<'a, str>>,
    #[serde(deserialize_with = "lenient::int")]
    pub delay_seconds: Option<i64>,
    pub message_attributes: BTreeMap<String, AttributeValueWire>,
    pub message_system_attributes: BTreeMap<String, AttributeValueWire>,
    #[serde(borrow, deserialize_with = "borrowed::text")]
    pub message_deduplication_id: Option<Cow<'a, str>>,
    #[serde(borrow, deserialize_with = "borrowed::text")]
    pub message_group_id: Option<Cow<'a, str>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct SendMessageBatchInput<'a> {
    pub queue_url: Option<String>,
    #[serde(borrow)]
    pub entries: Option<Vec<SendEntry<'a>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ReceiveMessageInput<'a> {
    #[serde(borrow, deserialize_with = "borrowed::text")]
    pub queue_url: Option<Cow<'a, str>>,
    pub attribute_names: Option<Vec<String>>,
    pub message_system_attribute_names: Option<Vec<String>>,
    pub message_attribute_names: Vec<String>,
    #[serde(deserialize_with = "lenient::int")]
    pub max_number_of_messages: Option<i64>,
    #[serde(deserialize_with = "lenient::int")]
    pub visibility_timeout: Option<i64>,
    #[serde(deserialize_with = "lenient::int")]
    pub wait_time_seconds: Option<i64>,
    pub receive_request_attempt_id: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct HandleEntry<'a> {
    #[serde(borrow, deserialize_with = "borrowed::text")]
    pub id: Option<Cow<'a, str>>,
    #[serde(borrow, deserialize_with = "borrowed::text")]
    pub receipt_handle: Option<Cow<'a, str>>,
    #[serde(deserialize_with = "lenient::int")]
    pub visibility_timeout: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DeleteMessageInput<'a> {
    #[serde(borrow, deserialize_with = "borrowed::text")]
    pub queue_url: Option<Cow<'a, str>>,
    #[serde(borrow, deserialize_with = "borrowed::text")]
    pub receipt_handle: Option<Cow<'a, str>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ChangeMessageVisibilityInput<'a> {
    #[serde(borrow, deserialize_with = "borrowed::text")]
    pub queue_url: Option<Cow<'a, str>>,
    #[serde(borrow, deserialize_with = "borrowed::text")]
    pub receipt_handle: Option<Cow<'a, str>>,
    #[serde(deserialize_with = "lenient::int")]
    pub visibility_timeout: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct HandleBatchInput<'a> {
    #[serde(borrow, deserialize_with = "borrowed::text")]
    pub queue_url: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub entries: Option<Vec<HandleEntry<'a>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AddPermissionInput {
    pub queue_url: Option<String>,
    pub label: Option<String>,
    #[serde(rename = "AWSAccountIds")]
    pub account_ids: Vec<String>,
    pub actions: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct RemovePermissionInput {
    pub queue_url: Option<String>,
    pub label: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct StartMessageMoveTaskInput {
    pub source_arn: Option<String>,
    pub destination_arn: Option<String>,
    #[serde(deserialize_with = "lenient::int")]
    pub max_number_of_messages_per_second: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ListMessageMoveTasksInput {
    pub source_arn: Option<String>,
    #[serde(deserialize_with = "lenient::int")]
    pub max_results: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct CancelMessageMoveTaskInput {
    pub task_handle: Option<String>,
}

// ---- responses ----

/// A string map serialized in insertion order (AWS lists system attributes in a fixed order).
#[derive(Debug, Default)]
pub struct Pairs(pub Vec<(String, String)>);

impl Serialize for Pairs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl Pairs {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[derive(Debug, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Empty {}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct QueueUrlOutput {
    pub queue_url: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ListQueuesOutput {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub queue_urls: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct ListDeadLetterSourceQueuesOutput {
    #[serde(rename = "queueUrls")]
    pub queue_urls: Vec<String>,
    #[serde(rename = "NextToken", skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct AttributesOutput {
    #[serde(skip_serializing_if = "Pairs::is_empty")]
    pub attributes: Pairs,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct TagsOutput {
    #[serde(skip_serializing_if = "Pairs::is_empty")]
    pub tags: Pairs,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct SendMessageOutput<'a> {
    /// A batch entry's id, borrowed from the request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<Cow<'a, str>>,
    #[serde(serialize_with = "id_text")]
    pub message_id: MessageId,
    #[serde(rename = "MD5OfMessageBody", serialize_with = "md5_text")]
    pub md5_of_message_body: Md5Digest,
    #[serde(
        rename = "MD5OfMessageAttributes",
        skip_serializing_if = "Option::is_none"
    )]
    pub md5_of_message_attributes: Option<String>,
    #[serde(
        rename = "MD5OfMessageSystemAttributes",
        skip_serializing_if = "Option::is_none"
    )]
    pub md5_of_message_system_attributes: Option<String>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "decimal_text"
    )]
    pub sequence_number: Option<u128>,
}

/// A message id in its hyphenated form, written without going through the heap.
fn id_text<S: serde::Serializer>(id: &MessageId, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(id.text().as_str())
}

/// An MD5 in lower-case hex, written without going through the heap.
fn md5_text<S: serde::Serializer>(md5: &Md5Digest, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(md5.hex().as_str())
}

/// A sequence number as the decimal string SQS answers with, written straight into the
/// response (no intermediate `String`).
fn decimal_text<S: serde::Serializer>(
    value: &Option<u128>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(number) => serializer.collect_str(number),
        None => serializer.serialize_none(),
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct BatchError {
    pub id: String,
    pub sender_fault: bool,
    pub code: String,
    pub message: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct BatchOutput<T> {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub successful: Vec<T>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<BatchError>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct IdOnly<'a> {
    /// Borrowed from the request's entry.
    pub id: Cow<'a, str>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct MessageWire {
    #[serde(serialize_with = "id_text")]
    pub message_id: MessageId,
    pub receipt_handle: String,
    #[serde(rename = "MD5OfBody", serialize_with = "md5_text")]
    pub md5_of_body: Md5Digest,
    /// Shared with the stored message, not copied.
    pub body: BodyText,
    #[serde(skip_serializing_if = "Pairs::is_empty")]
    pub attributes: Pairs,
    #[serde(
        rename = "MD5OfMessageAttributes",
        skip_serializing_if = "Option::is_none"
    )]
    pub md5_of_message_attributes: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub message_attributes: BTreeMap<String, AttributeValueWire>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ReceiveMessageOutput {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<MessageWire>,
}

// The answers of sends, receives and deletes write their own JSON (see `json_answer`), in
// the member order and with the omissions of their serde derives above.

impl JsonAnswer for MessageWire {
    fn write_json(&self, out: &mut Vec<u8>) {
        let mut object = Object::open(out);
        object
            .str("MessageId", self.message_id.text().as_str())
            .str("ReceiptHandle", &self.receipt_handle)
            .str("MD5OfBody", self.md5_of_body.hex().as_str())
            .str("Body", &self.body);
        if !self.attributes.is_empty() {
            object.serde("Attributes", &self.attributes);
        }
        object.opt_str(
            "MD5OfMessageAttributes",
            self.md5_of_message_attributes.as_deref(),
        );
        if !self.message_attributes.is_empty() {
            object.serde("MessageAttributes", &self.message_attributes);
        }
        object.close();
    }
}

impl JsonAnswer for ReceiveMessageOutput {
    fn size_hint(&self) -> usize {
        // Ids, handle and digest take about 200 bytes beside each body.
        self.messages
            .iter()
            .map(|m| m.body.len() + 256)
            .sum::<usize>()
            + 16
    }

    fn write_json(&self, out: &mut Vec<u8>) {
        let mut object = Object::open(out);
        if !self.messages.is_empty() {
            object.array("Messages", &self.messages);
        }
        object.close();
    }
}

impl JsonAnswer for SendMessageOutput<'_> {
    fn write_json(&self, out: &mut Vec<u8>) {
        let mut object = Object::open(out);
        object
            .opt_str("Id", self.id.as_deref())
            .str("MessageId", self.message_id.text().as_str())
            .str("MD5OfMessageBody", self.md5_of_message_body.hex().as_str())
            .opt_str(
                "MD5OfMessageAttributes",
                self.md5_of_message_attributes.as_deref(),
            )
            .opt_str(
                "MD5OfMessageSystemAttributes",
                self.md5_of_message_system_attributes.as_deref(),
            );
        if let Some(number) = self.sequence_number {
            object.display("SequenceNumber", number);
        }
        object.close();
    }
}

impl JsonAnswer for IdOnly<'_> {
    fn write_json(&self, out: &mut Vec<u8>) {
        Object::open(out).str("Id", &self.id).close();
    }
}

impl<T: JsonAnswer> JsonAnswer for BatchOutput<T> {
    fn write_json(&self, out: &mut Vec<u8>) {
        let mut object = Object::open(out);
        if !self.successful.is_empty() {
            object.array("Successful", &self.successful);
        }
        if !self.failed.is_empty() {
            object.serde("Failed", &self.failed);
        }
        object.close();
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct StartMessageMoveTaskOutput {
    pub task_handle: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct MoveTaskWire {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_handle: Option<String>,
    pub status: String,
    pub source_arn: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destination_arn: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_number_of_messages_per_second: Option<i64>,
    pub approximate_number_of_messages_moved: u64,
    pub approximate_number_of_messages_to_move: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    pub started_timestamp: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ListMessageMoveTasksOutput {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<MoveTaskWire>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CancelMessageMoveTaskOutput {
    pub approximate_number_of_messages_moved: u64,
}

#[cfg(test)]
mod tests;
