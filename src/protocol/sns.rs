//! SNS request and response shapes, with AWS's member names.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::sqs::{AttributeValueWire, Pairs};

#[derive(Debug, Default, Deserialize)]
pub struct TagWire {
    #[serde(rename = "Key", default)]
    pub key: String,
    #[serde(rename = "Value", default)]
    pub value: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct CreateTopicInput {
    pub name: Option<String>,
    pub attributes: BTreeMap<String, String>,
    pub tags: Vec<TagWire>,
    pub data_protection_policy: Option<String>,
}

/// PutDataProtectionPolicy and GetDataProtectionPolicy.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DataProtectionPolicyInput {
    pub resource_arn: Option<String>,
    pub data_protection_policy: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct DataProtectionPolicyOutput {
    pub data_protection_policy: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TopicArnInput {
    pub topic_arn: Option<String>,
    pub next_token: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct SetAttributeInput {
    pub topic_arn: Option<String>,
    pub subscription_arn: Option<String>,
    pub attribute_name: Option<String>,
    pub attribute_value: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct SubscribeInput {
    pub topic_arn: Option<String>,
    pub protocol: Option<String>,
    pub endpoint: Option<String>,
    pub attributes: BTreeMap<String, String>,
    pub return_subscription_arn: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ConfirmSubscriptionInput {
    pub topic_arn: Option<String>,
    pub token: Option<String>,
    pub authenticate_on_unsubscribe: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct SubscriptionArnInput {
    pub subscription_arn: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct PublishEntry {
    pub id: Option<String>,
    pub message: Option<String>,
    pub subject: Option<String>,
    pub message_structure: Option<String>,
    pub message_attributes: BTreeMap<String, AttributeValueWire>,
    pub message_deduplication_id: Option<String>,
    pub message_group_id: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct PublishInput {
    pub topic_arn: Option<String>,
    pub target_arn: Option<String>,
    pub phone_number: Option<String>,
    #[serde(flatten)]
    pub entry: PublishEntry,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct PublishBatchInput {
    pub topic_arn: Option<String>,
    pub publish_batch_request_entries: Option<Vec<PublishEntry>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct PermissionInput {
    pub topic_arn: Option<String>,
    pub label: Option<String>,
    #[serde(rename = "AWSAccountId")]
    pub aws_account_id: Option<Vec<String>>,
    pub action_name: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TagResourceInput {
    pub resource_arn: Option<String>,
    pub tags: Option<Vec<TagWire>>,
    pub tag_keys: Option<Vec<String>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct TopicArnOutput {
    pub topic_arn: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ListTopicsOutput {
    pub topics: Vec<TopicArnOutput>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct AttributesMap {
    pub attributes: Pairs,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct SubscriptionArnOutput {
    pub subscription_arn: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct SubscriptionWire {
    pub subscription_arn: String,
    pub owner: String,
    pub protocol: String,
    pub endpoint: String,
    pub topic_arn: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ListSubscriptionsOutput {
    pub subscriptions: Vec<SubscriptionWire>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct PublishOutput {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub message_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sequence_number: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct PublishBatchOutput {
    pub successful: Vec<PublishOutput>,
    pub failed: Vec<super::sqs::BatchError>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct TagOut {
    pub key: String,
    pub value: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ListTagsOutput {
    pub tags: Vec<TagOut>,
}
