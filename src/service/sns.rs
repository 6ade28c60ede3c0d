//! The SNS actions: topics, subscriptions, publishing and tags.

use super::batch::failure;
use super::permissions;
use super::render::decode_attributes;
use super::sns_params::{distinct_tags, invalid, page, pairs, required};
use super::{RequestContext, Service};
use crate::backend::{Confirm, CreateTopic, Subscribe};
use crate::engine::namespace::Namespaces;
use crate::engine::topic::{EndpointKind, Publication, PublishRequest, SubscriptionProtocol};
use crate::engine::EngineError;
use crate::protocol::sns::*;
use crate::protocol::sqs::{Empty, Pairs};
use crate::protocol::{ApiError, Encoded, ErrorCode, Payload, Protocol, SnsAction};

/// Whether a topic's ARN lives in the caller's region and account: ListTopics shows only those.
fn in_namespace(arn: &str, ctx: &RequestContext) -> bool {
    Namespaces::of_arn(arn).is_some_and(|ns| ns == ctx.namespace)
}

fn published(id: Option<String>, publication: Publication) -> PublishOutput {
    PublishOutput {
        id,
        message_id: publication.message_id.to_string(),
        sequence_number: publication.sequence_number.map(|s| s.to_string()),
    }
}

impl Service {
    pub(super) async fn route_sns(
        &self,
        action: SnsAction,
        payload: &Payload,
        ctx: &RequestContext,
    ) -> Result<Encoded, ApiError> {
        let protocol = Protocol::SnsQuery;
        // Each handler must take and answer what its action declares (`protocol::actions`).
        macro_rules! call {
            ($shape:ident, $handler:ident) => {
                sns_call!(self, (payload, protocol, ctx, action), $shape, $handler)
            };
        }
        self.check_sns_request(action, payload, ctx).await?;
        use SnsAction as A;
        match action {
            A::CreateTopic => call!(CreateTopic, create_topic),
            A::DeleteTopic => call!(DeleteTopic, delete_topic),
            A::ListTopics => call!(ListTopics, list_topics),
            A::GetTopicAttributes => call!(GetTopicAttributes, get_topic_attributes),
            A::SetTopicAttributes => call!(SetTopicAttributes, set_topic_attributes),
            A::Subscribe => call!(Subscribe, subscribe),
            A::Unsubscribe => call!(Unsubscribe, unsubscribe),
            A::ConfirmSubscription => call!(ConfirmSubscription, confirm_subscription),
            A::ListSubscriptions => call!(ListSubscriptions, list_subscriptions),
            A::ListSubscriptionsByTopic => {
                call!(ListSubscriptionsByTopic, list_subscriptions_by_topic)
            }
            A::GetSubscriptionAttributes => {
                call!(GetSubscriptionAttributes, get_subscription_attributes)
            }
            A::SetSubscriptionAttributes => {
                call!(SetSubscriptionAttributes, set_subscription_attributes)
            }
            A::Publish => call!(Publish, publish),
            A::PublishBatch => call!(PublishBatch, publish_batch),
            A::TagResource => call!(TagResource, tag_resource),
            A::UntagResource => call!(UntagResource, untag_resource),
            A::ListTagsForResource => call!(ListTagsForResource, list_tags_for_resource),
            A::AddPermission => call!(AddPermission, add_topic_permission),
            A::RemovePermission => call!(RemovePermission, remove_topic_permission),
            A::GetDataProtectionPolicy => {
                call!(GetDataProtectionPolicy, get_data_protection_policy)
            }
            A::PutDataProtectionPolicy => {
                call!(PutDataProtectionPolicy, put_data_protection_policy)
            }
            A::CreatePlatformApplication
            | A::GetPlatformApplicationAttributes
            | A::SetPlatformApplicationAttributes
            | A::ListPlatformApplications
            | A::DeletePlatformApplication
            | A::CreatePlatformEndpoint
            | A::GetEndpointAttributes
            | A::SetEndpointAttributes
            | A::ListEndpointsByPlatformApplication
            | A::DeleteEndpoint
            | A::SetSMSAttributes
            | A::GetSMSAttributes
            | A::CheckIfPhoneNumberIsOptedOut
            | A::ListPhoneNumbersOptedOut
            | A::OptInPhoneNumber
            | A::GetSMSSandboxAccountStatus
            | A::CreateSMSSandboxPhoneNumber
            | A::VerifySMSSandboxPhoneNumber
            | A::DeleteSMSSandboxPhoneNumber
            | A::ListSMSSandboxPhoneNumbers
            | A::ListOriginationNumbers => self.route_sns_mobile(action, payload, ctx).await,
        }
    }

    /// The region and account rules for the ARN a request names (`access::check_sns_use`).
    async fn check_sns_request(
        &self,
        action: SnsAction,
        payload: &Payload,
        ctx: &RequestContext,
    ) -> Result<(), ApiError> {
        let Payload::Query(parameters) = payload else {
            return Ok(());
        };
        let named = ["TopicArn", "SubscriptionArn", "ResourceArn", "TargetArn"]
            .into_iter()
            .find_map(|name| Some((name, parameters.get(name)?.as_str()?)))
            // A platform endpoint's region and account are checked by the publish to it.
            .filter(|(name, arn)| !(*name == "TargetArn" && arn.contains(":endpoint/")));
        let Some((parameter, arn)) = named else {
            return Ok(());
        };
        // AWS names the parameter "Topic" in ConfirmSubscription's refusal (shared/spec/sns.md).
        // Its token is its authority: a queue's owner confirms another account's topic.
        if action == SnsAction::ConfirmSubscription {
            return self.check_sns_region(ctx, "Topic", arn);
        }
        self.check_sns_use(ctx, action, parameter, arn).await
    }

    pub(super) async fn create_topic(
        &self,
        input: CreateTopicInput,
        ctx: &RequestContext,
    ) -> Result<TopicArnOutput, ApiError> {
        let name = required(input.name, "Name")?;
        let name = match self.namespaces.key(&ctx.namespace, &name) {
            Some(key) => key.into_owned(),
            None => return Err(invalid("Invalid parameter: Topic Name")),
        };
        let tags = distinct_tags(input.tags)?;
        // Checked before the topic is made, so a refused policy leaves no topic behind.
        let protection = input.data_protection_policy.filter(|p| !p.is_empty());
        if let Some(policy) = &protection {
            if name.ends_with(".fifo") {
                return Err(invalid(
                    "Invalid parameter: DataProtectionPolicy Reason: message data protection is not supported for FIFO topics",
                ));
            }
            crate::engine::topic::data_protection::check_policy(policy)?;
        }
        let arn = self
            .backend
            .create_topic(CreateTopic {
                name,
                attributes: pairs(input.attributes),
                tags,
            })
            .await?;
        if let Some(policy) = protection {
            self.backend
                .put_data_protection_policy(&arn, policy)
                .await?;
        }
        Ok(TopicArnOutput {
            topic_arn: arn.to_string(),
        })
    }

    async fn delete_topic(
        &self,
        input: TopicArnInput,
        _ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        self.backend
            .delete_topic(&required(input.topic_arn, "TopicArn")?)
            .await?;
        Ok(Empty {})
    }

    async fn list_topics(
        &self,
        input: TopicArnInput,
        ctx: &RequestContext,
    ) -> Result<ListTopicsOutput, ApiError> {
        let mut all = self.backend.list_topics().await?;
        all.retain(|arn| in_namespace(arn, ctx));
        let (topics, next_token) = page(all, input.next_token.as_deref())?;
        Ok(ListTopicsOutput {
            topics: topics
                .into_iter()
                .map(|arn| TopicArnOutput {
                    topic_arn: arn.to_string(),
                })
                .collect(),
            next_token,
        })
    }

    pub(super) async fn get_topic_attributes(
        &self,
        input: TopicArnInput,
        _ctx: &RequestContext,
    ) -> Result<AttributesMap, ApiError> {
        let arn = required(input.topic_arn, "TopicArn")?;
        let attributes = self.backend.topic_attributes(&arn).await?;
        Ok(AttributesMap {
            attributes: Pairs(attributes),
        })
    }

    /// AddPermission: a statement appended to the topic's policy.
    async fn add_topic_permission(
        &self,
        input: PermissionInput,
        _ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let accounts = required(input.aws_account_id, "AWSAccountId")?;
        let actions = required(input.action_name, "ActionName")?;
        self.edit_topic_policy(input.topic_arn, input.label, move |policy, arn, label| {
            permissions::add_topic_permission(policy, arn, label, &accounts, &actions)
        })
        .await
    }

    /// RemovePermission: the labelled statement taken out of the topic's policy.
    async fn remove_topic_permission(
        &self,
        input: PermissionInput,
        _ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        self.edit_topic_policy(input.topic_arn, input.label, |policy, _, label| {
            permissions::remove_topic_permission(policy, label)
        })
        .await
    }

    /// Rewrites a topic's policy in storage: `edit(policy, topic ARN, label)`.
    async fn edit_topic_policy(
        &self,
        topic_arn: Option<String>,
        label: Option<String>,
        edit: impl FnOnce(&str, &str, &str) -> Result<String, EngineError> + Send + 'static,
    ) -> Result<Empty, ApiError> {
        let topic_arn = required(topic_arn, "TopicArn")?;
        let label = required(label, "Label")?;
        self.backend
            .edit_topic_policy(
                &topic_arn,
                Box::new(move |policy, arn| edit(policy, arn, &label)),
            )
            .await?;
        Ok(Empty {})
    }

    async fn set_topic_attributes(
        &self,
        input: SetAttributeInput,
        _ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let arn = required(input.topic_arn, "TopicArn")?;
        let name = required(input.attribute_name, "AttributeName")?;
        let value = input.attribute_value.unwrap_or_default();
        self.backend
            .set_topic_attribute(&arn, &name, &value)
            .await?;
        Ok(Empty {})
    }

    pub(super) async fn subscribe(
        &self,
        input: SubscribeInput,
        ctx: &RequestContext,
    ) -> Result<SubscriptionArnOutput, ApiError> {
        let topic_arn = required(input.topic_arn, "TopicArn")?;
        let protocol = required(input.protocol, "Protocol")?;
        let webhook = SubscriptionProtocol::parse(&protocol).map(SubscriptionProtocol::kind);
        if webhook == Some(EndpointKind::Webhook) {
            if let Some(endpoint) = &input.endpoint {
                if let Some(host) = self.webhooks.allow_list.refused_host(endpoint) {
                    return Err(ApiError::new(
                        ErrorCode::InvalidParameter,
                        format!("Invalid parameter: Endpoint Reason: {host} is not in this server's webhook allow-list"),
                    ));
                }
            }
        }
        let base_url = self.base_url(ctx);
        let subscribed = self
            .backend
            .subscribe(Subscribe {
                topic_arn: &topic_arn,
                protocol: &protocol,
                endpoint: input.endpoint.as_deref(),
                attributes: pairs(input.attributes),
                base_url: &base_url,
                principal: &ctx.principal,
            })
            .await?;
        if protocol == "sqs" {
            let queue = input.endpoint.as_deref().unwrap_or_default();
            if let Some(refusal) = self.sns_would_refuse(&topic_arn, queue).await {
                // Said once, when subscribed: delivered here all the same, never on AWS.
                tracing::warn!(subscription = %subscribed.arn, "{refusal}");
            }
        }
        let return_arn = input
            .return_subscription_arn
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        Ok(SubscriptionArnOutput {
            subscription_arn: if subscribed.pending && !return_arn {
                "pending confirmation".to_string()
            } else {
                subscribed.arn.to_string()
            },
        })
    }

    /// ConfirmSubscription, by a signed call or by a GET of the SubscribeURL.
    async fn confirm_subscription(
        &self,
        input: ConfirmSubscriptionInput,
        ctx: &RequestContext,
    ) -> Result<SubscriptionArnOutput, ApiError> {
        let topic_arn = required(input.topic_arn, "TopicArn")?;
        let token = required(input.token, "Token")?;
        let authenticate_on_unsubscribe =
            match input.authenticate_on_unsubscribe.as_deref() {
                None => false,
                Some(v) if v.eq_ignore_ascii_case("true") => true,
                Some(v) if v.eq_ignore_ascii_case("false") => false,
                Some(_) => return Err(invalid(
                    "Invalid parameter: AuthenticateOnUnsubscribe Reason: must be true or false",
                )),
            };
        let arn = self
            .backend
            .confirm_subscription(Confirm {
                topic_arn: &topic_arn,
                token: &token,
                authenticate_on_unsubscribe,
                authenticated: ctx.authenticated,
            })
            .await?;
        Ok(SubscriptionArnOutput {
            subscription_arn: arn.to_string(),
        })
    }

    async fn unsubscribe(
        &self,
        input: SubscriptionArnInput,
        ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let arn = required(input.subscription_arn, "SubscriptionArn")?;
        self.backend
            .unsubscribe(&arn, ctx.authenticated, &self.base_url(ctx))
            .await?;
        Ok(Empty {})
    }

    async fn subscriptions_page(
        &self,
        topic_arn: Option<&str>,
        token: Option<&str>,
        ctx: &RequestContext,
    ) -> Result<ListSubscriptionsOutput, ApiError> {
        let mut all = self.backend.list_subscriptions(topic_arn).await?;
        if topic_arn.is_none() {
            // The caller's own subscriptions in its region, to any account's topics.
            all.retain(|(_, subscription)| {
                Namespaces::of_arn(&subscription.arn).is_some_and(|ns| {
                    ns.region == ctx.namespace.region
                        && subscription.owner == *ctx.namespace.account
                })
            });
        }
        let (items, next_token) = page(all, token)?;
        Ok(ListSubscriptionsOutput {
            subscriptions: items
                .into_iter()
                .map(|(topic, s)| SubscriptionWire {
                    // AWS lists unconfirmed subscriptions under this placeholder.
                    subscription_arn: if s.pending {
                        "PendingConfirmation".to_string()
                    } else {
                        s.arn.to_string()
                    },
                    owner: s.owner.clone(),
                    protocol: s.protocol.name().to_string(),
                    endpoint: s.endpoint.clone(),
                    topic_arn: topic.to_string(),
                })
                .collect(),
            next_token,
        })
    }

    async fn list_subscriptions(
        &self,
        input: TopicArnInput,
        ctx: &RequestContext,
    ) -> Result<ListSubscriptionsOutput, ApiError> {
        self.subscriptions_page(None, input.next_token.as_deref(), ctx)
            .await
    }

    async fn list_subscriptions_by_topic(
        &self,
        input: TopicArnInput,
        ctx: &RequestContext,
    ) -> Result<ListSubscriptionsOutput, ApiError> {
        let topic_arn = required(input.topic_arn, "TopicArn")?;
        self.subscriptions_page(Some(&topic_arn), input.next_token.as_deref(), ctx)
            .await
    }

    pub(super) async fn get_subscription_attributes(
        &self,
        input: SubscriptionArnInput,
        _ctx: &RequestContext,
    ) -> Result<AttributesMap, ApiError> {
        let arn = required(input.subscription_arn, "SubscriptionArn")?;
        let attributes = self.backend.subscription_attributes(&arn).await?;
        Ok(AttributesMap {
            attributes: Pairs(attributes),
        })
    }

    async fn set_subscription_attributes(
        &self,
        input: SetAttributeInput,
        ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let arn = required(input.subscription_arn, "SubscriptionArn")?;
        let name = required(input.attribute_name, "AttributeName")?;
        let value = input.attribute_value.unwrap_or_default();
        self.backend
            .set_subscription_attribute(&arn, &name, &value, &self.base_url(ctx))
            .await?;
        Ok(Empty {})
    }

    /// `position`: the entry's place in a PublishBatch (from 1), which AWS's paths name.
    fn publish_request(
        entry: PublishEntry,
        position: Option<usize>,
        ctx: &RequestContext,
    ) -> Result<PublishRequest, ApiError> {
        let structured = match entry.message_structure.as_deref() {
            None => false,
            Some("json") => true,
            Some(other) => {
                return Err(invalid(format!(
                    "Invalid parameter: MessageStructure Reason: {other} is not a valid value"
                )))
            }
        };
        for (name, value) in &entry.message_attributes {
            if value.data_type.is_none() {
                let entry = position
                    .map(|at| format!("publishBatchRequestEntries.{at}.member."))
                    .unwrap_or_default();
                return Err(ApiError::new(
                    ErrorCode::ValidationError,
                    format!("1 validation error detected: Value null at '{entry}messageAttributes.{name}.member.dataType' failed to satisfy constraint: Member must not be null"),
                ));
            }
        }
        Ok(PublishRequest {
            message: required(entry.message, "Message")?,
            subject: entry.subject,
            structured,
            attributes: decode_attributes(entry.message_attributes)?,
            group_id: entry.message_group_id,
            dedup_id: entry.message_deduplication_id,
            trace_header: ctx.trace_header.clone(),
        })
    }

    /// The base of URLs we hand out (UnsubscribeURL), as the client reaches us.
    pub(super) fn base_url(&self, ctx: &RequestContext) -> String {
        format!(
            "{}://{}",
            ctx.scheme,
            self.hostname.as_deref().unwrap_or(&ctx.host)
        )
    }

    async fn publish(
        &self,
        input: PublishInput,
        ctx: &RequestContext,
    ) -> Result<PublishOutput, ApiError> {
        if let Some(number) = &input.phone_number {
            if input.topic_arn.is_some() || input.target_arn.is_some() {
                return Err(invalid(
                    "Invalid parameter: PhoneNumber Reason: only one of TopicArn, TargetArn and PhoneNumber may be given",
                ));
            }
            let request = Self::publish_request(input.entry, None, ctx)?;
            let message_id = self.publish_to_phone(number, &request).await?;
            return Ok(PublishOutput {
                id: None,
                message_id: message_id.to_string(),
                sequence_number: None,
            });
        }
        if let (None, Some(target)) = (&input.topic_arn, &input.target_arn) {
            if target.contains(":endpoint/") {
                let target = target.clone();
                let request = Self::publish_request(input.entry, None, ctx)?;
                return self.publish_to_endpoint(&target, &request, ctx).await;
            }
        }
        let topic_arn = input.topic_arn.or(input.target_arn).ok_or_else(|| {
            invalid(
                "Invalid parameter: TopicArn or TargetArn Reason: no value for required parameter",
            )
        })?;
        self.backend.check_topic_led_here(&topic_arn)?;
        let request = Self::publish_request(input.entry, None, ctx)?;
        let publication = self
            .backend
            .publish(&topic_arn, request, &self.base_url(ctx))
            .await?;
        Ok(published(None, publication))
    }

    async fn publish_batch(
        &self,
        input: PublishBatchInput,
        ctx: &RequestContext,
    ) -> Result<PublishBatchOutput, ApiError> {
        let topic_arn = required(input.topic_arn, "TopicArn")?;
        self.backend.check_topic_led_here(&topic_arn)?;
        let entries = required(
            input.publish_batch_request_entries,
            "PublishBatchRequestEntries",
        )?;
        if entries.is_empty() {
            return Err(ApiError::new(
                ErrorCode::EmptyBatchRequest,
                "The batch request doesn't contain any entries.",
            ));
        }
        if entries.len() > 10 {
            return Err(ApiError::new(
                ErrorCode::TooManyEntriesInBatchRequest,
                "The batch request contains more entries than permissible.",
            ));
        }
        let mut seen = std::collections::HashSet::new();
        let mut total = 0;
        let mut ids = Vec::with_capacity(entries.len());
        let mut requests = Vec::with_capacity(entries.len());
        for (at, entry) in entries.into_iter().enumerate() {
            let id = required(entry.id.clone(), "Id")?;
            if id.len() > 80 {
                return Err(ApiError::new(
                    ErrorCode::InvalidBatchEntryId,
                    format!("The Id of a batch entry in the batch request is too long: {id}"),
                ));
            }
            if id.is_empty()
                || !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(ApiError::new(
                    ErrorCode::InvalidBatchEntryId,
                    format!("The Id of a batch entry in the batch request contains an impermissible character: {id}"),
                ));
            }
            if !seen.insert(id.clone()) {
                return Err(ApiError::new(
                    ErrorCode::BatchEntryIdsNotDistinct,
                    "Two or more batch entries in the request have the same Id.",
                ));
            }
            let request = Self::publish_request(entry, Some(at + 1), ctx)?;
            total += request.message.len() + request.attributes.size();
            ids.push(id);
            requests.push(request);
        }
        if total > crate::engine::topic::MAX_MESSAGE_BYTES {
            return Err(ApiError::new(
                ErrorCode::BatchRequestTooLong,
                "The length of all the messages put together is more than the limit.",
            ));
        }
        let results = self
            .backend
            .publish_batch(&topic_arn, requests, &self.base_url(ctx))
            .await?;
        let mut output = PublishBatchOutput {
            successful: Vec::new(),
            failed: Vec::new(),
        };
        for (id, result) in ids.into_iter().zip(results) {
            match result {
                Ok(publication) => output.successful.push(published(Some(id), publication)),
                Err(error) => output.failed.push(failure(&id, error.into())),
            }
        }
        Ok(output)
    }

    async fn tag_resource(
        &self,
        input: TagResourceInput,
        _ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let arn = required(input.resource_arn, "ResourceArn")?;
        let tags = distinct_tags(required(input.tags, "Tags")?)?;
        self.backend.tag_topic(&arn, tags).await?;
        Ok(Empty {})
    }

    async fn untag_resource(
        &self,
        input: TagResourceInput,
        _ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let arn = required(input.resource_arn, "ResourceArn")?;
        let keys = required(input.tag_keys, "TagKeys")?;
        self.backend.untag_topic(&arn, keys).await?;
        Ok(Empty {})
    }

    async fn get_data_protection_policy(
        &self,
        input: DataProtectionPolicyInput,
        _ctx: &RequestContext,
    ) -> Result<DataProtectionPolicyOutput, ApiError> {
        let arn = required(input.resource_arn, "ResourceArn")?;
        let policy = self.backend.data_protection_policy(&arn).await?;
        Ok(DataProtectionPolicyOutput {
            data_protection_policy: policy,
        })
    }

    async fn put_data_protection_policy(
        &self,
        input: DataProtectionPolicyInput,
        _ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let arn = required(input.resource_arn, "ResourceArn")?;
        let policy = required(input.data_protection_policy, "DataProtectionPolicy")?;
        self.backend
            .put_data_protection_policy(&arn, policy)
            .await?;
        Ok(Empty {})
    }

    async fn list_tags_for_resource(
        &self,
        input: TagResourceInput,
        _ctx: &RequestContext,
    ) -> Result<ListTagsOutput, ApiError> {
        let arn = required(input.resource_arn, "ResourceArn")?;
        let tags = self.backend.topic_tags(&arn).await?;
        Ok(ListTagsOutput {
            tags: tags
                .into_iter()
                .map(|(key, value)| TagOut { key, value })
                .collect(),
        })
    }
}
