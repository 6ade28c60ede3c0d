//! The captured protocols' messages, read and forgotten over HTTP: `GET /_orderly/sns/deliveries`
//! in Orderly's shape, and LocalStack's `GET /_aws/sns/sms-messages`
//! (`{"sms_messages": {number: [...]}, "region": ...}`) and
//! `GET /_aws/sns/platform-endpoint-messages` (`{"platform_endpoint_messages": {arn: [...]},
//! "region": ...}`), with LocalStack's field names (its `internal_api.py`). Also Publish to a
//! phone number, which is captured and never sent.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::render::encode_attributes;
use super::Service;
use crate::engine::topic::captured::{self, CapturedMessage};
use crate::engine::topic::{PublishRequest, SubscriptionProtocol};
use crate::engine::EngineError;
use crate::protocol::ApiError;

/// Which captured messages a read or a DELETE means.
#[derive(Default)]
pub struct CapturedFilter {
    pub protocol: Option<String>,
    pub endpoint: Option<String>,
}

impl CapturedFilter {
    fn wants(&self, m: &CapturedMessage) -> bool {
        self.protocol
            .as_deref()
            .is_none_or(|p| m.protocol.name() == p)
            && self.endpoint.as_deref().is_none_or(|e| *m.endpoint == *e)
    }
}

/// One of LocalStack's listings of captured messages by endpoint: the protocol, the query
/// parameter naming one endpoint, the answer's key and each message's endpoint field.
pub struct LocalStackListing {
    pub protocol: SubscriptionProtocol,
    pub parameter: &'static str,
    key: &'static str,
    endpoint_field: &'static str,
}

/// `GET /_aws/sns/sms-messages[?phoneNumber=]`.
pub const SMS_MESSAGES: LocalStackListing = LocalStackListing {
    protocol: SubscriptionProtocol::Sms,
    parameter: "phoneNumber",
    key: "sms_messages",
    endpoint_field: "PhoneNumber",
};

/// `GET /_aws/sns/platform-endpoint-messages[?endpointArn=]`: `application` endpoints'.
pub const PLATFORM_ENDPOINT_MESSAGES: LocalStackListing = LocalStackListing {
    protocol: SubscriptionProtocol::Application,
    parameter: "endpointArn",
    key: "platform_endpoint_messages",
    endpoint_field: "TargetArn",
};

impl LocalStackListing {
    fn lists(&self, m: &CapturedMessage, endpoint: Option<&str>) -> bool {
        m.protocol == self.protocol && endpoint.is_none_or(|e| *m.endpoint == *e)
    }
}

impl Service {
    /// Captured messages `wanted` picks, oldest first, with their ids; and how many were
    /// dropped for room.
    async fn captured_where(
        &self,
        wanted: impl Fn(&CapturedMessage) -> bool,
    ) -> Result<(Vec<(u64, CapturedMessage)>, u64), ApiError> {
        let (mut listed, dropped) = self.backend.captured_messages().await?;
        listed.retain(|(_, m)| wanted(m));
        Ok((listed, dropped))
    }

    /// Forgets the captured messages `unwanted` picks.
    async fn forget_where(
        &self,
        unwanted: impl Fn(&CapturedMessage) -> bool,
    ) -> Result<(), ApiError> {
        let (listed, _) = self.captured_where(unwanted).await?;
        let ids = listed.into_iter().map(|(id, _)| id).collect();
        Ok(self.backend.forget_captured(ids).await?)
    }

    /// `GET /_orderly/sns/deliveries`: oldest first.
    pub async fn captured_messages(&self, filter: &CapturedFilter) -> Result<Value, ApiError> {
        let (listed, dropped) = self.captured_where(|m| filter.wants(m)).await?;
        let deliveries: Vec<Value> = listed
            .iter()
            .map(|(_, m)| {
                json!({
                    "protocol": m.protocol.name(),
                    "endpoint": &*m.endpoint,
                    "subscriptionArn": m.subscription_arn.as_deref(),
                    "topicArn": m.topic_arn.as_deref(),
                    "messageId": &*m.message_id,
                    "type": m.kind,
                    "subject": m.subject,
                    "message": m.body,
                    "messageAttributes": encode_attributes(&m.attributes),
                    "messageStructure": m.structure,
                    "at": m.at.iso8601(),
                })
            })
            .collect();
        Ok(json!({ "deliveries": deliveries, "dropped": dropped }))
    }

    pub async fn forget_captured(&self, filter: &CapturedFilter) -> Result<(), ApiError> {
        self.forget_where(|m| filter.wants(m)).await
    }

    /// One of LocalStack's listings: the protocol's notifications by endpoint.
    pub async fn localstack_listing(
        &self,
        listing: &LocalStackListing,
        endpoint: Option<&str>,
    ) -> Result<Value, ApiError> {
        let (listed, _) = self.captured_where(|m| listing.lists(m, endpoint)).await?;
        let mut by_endpoint: Map<String, Value> = Map::new();
        if let Some(endpoint) = endpoint {
            by_endpoint.insert(endpoint.into(), Value::Array(Vec::new()));
        }
        for (_, m) in listed.iter().filter(|(_, m)| m.kind == "Notification") {
            let entry = json!({
                listing.endpoint_field: &*m.endpoint,
                "TopicArn": m.topic_arn.as_deref(),
                "SubscriptionArn": m.subscription_arn.as_deref(),
                "MessageId": &*m.message_id,
                "Message": m.body,
                "MessageAttributes": encode_attributes(&m.attributes),
                "MessageStructure": m.structure,
                "Subject": m.subject,
            });
            if let Value::Array(list) = by_endpoint
                .entry(m.endpoint.to_string())
                .or_insert_with(|| Value::Array(Vec::new()))
            {
                list.push(entry);
            }
        }
        Ok(json!({ listing.key: by_endpoint, "region": self.region() }))
    }

    /// A LocalStack listing's `DELETE`.
    pub async fn forget_listed(
        &self,
        listing: &LocalStackListing,
        endpoint: Option<&str>,
    ) -> Result<(), ApiError> {
        self.forget_where(|m| listing.lists(m, endpoint)).await
    }

    /// Publish with PhoneNumber: checked like any publish, captured, never sent.
    pub(super) async fn publish_to_phone(
        &self,
        number: &str,
        request: &PublishRequest,
    ) -> Result<Arc<str>, ApiError> {
        if !captured::check_phone_number(number) {
            return Err(EngineError::InvalidParameter(format!(
                "Invalid parameter: PhoneNumber Reason: {number} is not valid to publish to"
            ))
            .into());
        }
        crate::engine::topic::check_message(request)?;
        let message_id: Arc<str> = uuid::Uuid::new_v4().to_string().into();
        let record = captured::sms_to_number(number, request, &message_id, self.clock.now());
        self.backend.capture(vec![record]).await?;
        Ok(message_id)
    }
}
