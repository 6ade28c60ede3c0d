//! Queue management actions: create, look up, list, delete, attributes, tags, permissions.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

use std::sync::Arc;

use super::permissions;
use super::{RequestContext, Service};
use crate::backend::{CreateQueue, PolicyEdit};
use crate::engine::namespace::Namespace;
use crate::engine::queue::config::ATTRIBUTE_NAMES;
use crate::engine::QueueConfig;
use crate::protocol::sqs::*;
use crate::protocol::{ApiError, SqsAction};

fn pairs(map: std::collections::BTreeMap<String, String>) -> Vec<(String, String)> {
    map.into_iter().collect()
}

/// One page of sorted names after `token`; `max` absent means up to 1000 and no token.
fn paginate(
    names: Vec<std::sync::Arc<str>>,
    token: Option<&str>,
    max: Option<i64>,
) -> Result<(Vec<std::sync::Arc<str>>, Option<String>), ApiError> {
    if let Some(m) = max {
        if !(1..=1000).contains(&m) {
            return Err(ApiError::invalid(format!(
                "Value {m} for parameter MaxResults is invalid. Reason: MaxResults must be an integer between 1 and 1000."
            )));
        }
    }
    let after = match token {
        Some(t) => Some(
            URL_SAFE_NO_PAD
                .decode(t)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| ApiError::invalid("Invalid NextToken value."))?,
        ),
        None => None,
    };
    let rest: Vec<_> = names
        .into_iter()
        .filter(|n| after.as_deref().is_none_or(|a| &**n > a))
        .collect();
    let limit = max.unwrap_or(1000) as usize;
    let more = rest.len() > limit;
    let page: Vec<_> = rest.into_iter().take(limit).collect();
    let token = (more && max.is_some())
        .then(|| page.last().map(|n| URL_SAFE_NO_PAD.encode(n.as_bytes())))
        .flatten();
    Ok((page, token))
}

impl Service {
    /// The key of the queue a queue URL names, if it exists and the caller may call `action`
    /// on it (`access::queue_key`).
    async fn queue_named(
        &self,
        ctx: &RequestContext,
        url: Option<&str>,
        action: SqsAction,
    ) -> Result<Arc<str>, ApiError> {
        let key = self.queue_key(ctx, url, action).await?;
        Ok(self.backend.find_queue(&key).await?)
    }

    pub(super) async fn create_queue(
        &self,
        input: CreateQueueInput,
        ctx: &RequestContext,
    ) -> Result<QueueUrlOutput, ApiError> {
        let name = input
            .queue_name
            .ok_or_else(|| ApiError::missing("QueueName"))?;
        let attributes = pairs(input.attributes);
        let now = self.clock.now();
        let name = match self.namespaces.key(&ctx.namespace, &name) {
            Some(key) => key.into_owned(),
            // A name no queue can have: refused in AWS's words.
            None => {
                return Err(crate::engine::queue::config::validate_queue_name(&name)
                    .err()
                    .unwrap_or(crate::engine::EngineError::QueueDoesNotExist)
                    .into())
            }
        };
        let config = QueueConfig::for_create(&name, &attributes, now)?;
        let request = CreateQueue {
            name,
            config,
            attributes,
            tags: pairs(input.tags),
            now,
        };
        let name = self.backend.create_queue(request).await?;
        Ok(QueueUrlOutput {
            queue_url: self.queue_url(ctx, &name),
        })
    }

    pub(super) async fn get_queue_url(
        &self,
        input: QueueNameInput,
        ctx: &RequestContext,
    ) -> Result<QueueUrlOutput, ApiError> {
        let name = input
            .queue_name
            .ok_or_else(|| ApiError::missing("QueueName"))?;
        // A queue of another account is found when its policy lets the caller GetQueueUrl.
        let owner = input
            .queue_owner_account_id
            .as_deref()
            .filter(|owner| *owner != &*ctx.namespace.account);
        let namespace = match owner {
            Some(_) if self.single_namespace() => {
                return Err(crate::engine::EngineError::QueueDoesNotExist.into())
            }
            Some(owner) => Namespace::new(&ctx.namespace.region, owner),
            None => ctx.namespace.clone(),
        };
        let key = self
            .namespaces
            .key(&namespace, &name)
            .ok_or(crate::engine::EngineError::QueueDoesNotExist)?;
        if owner.is_some() {
            let url = self.queue_url(ctx, &key);
            self.check_queue_use(ctx, &key, SqsAction::GetQueueUrl, &url)
                .await?;
        }
        let name = self.backend.find_queue(&key).await?;
        Ok(QueueUrlOutput {
            queue_url: self.queue_url(ctx, &name),
        })
    }

    pub(super) async fn list_queues(
        &self,
        input: ListQueuesInput,
        ctx: &RequestContext,
    ) -> Result<ListQueuesOutput, ApiError> {
        let prefix = input.queue_name_prefix.as_deref().unwrap_or("");
        // Keys of the caller's namespace begin with its key prefix (`engine::namespace`).
        let Some(prefix) = self.namespaces.key(&ctx.namespace, prefix) else {
            return Ok(ListQueuesOutput {
                queue_urls: Vec::new(),
                next_token: None,
            });
        };
        let mut names = self.backend.list_queues(&prefix).await?;
        names.retain(|key| self.namespaces.holds(&ctx.namespace, key));
        let (page, next_token) = paginate(names, input.next_token.as_deref(), input.max_results)?;
        Ok(ListQueuesOutput {
            queue_urls: page.iter().map(|n| self.queue_url(ctx, n)).collect(),
            next_token,
        })
    }

    pub(super) async fn delete_queue(
        &self,
        input: QueueUrlInput,
        ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let name = self
            .queue_named(ctx, input.queue_url.as_deref(), SqsAction::DeleteQueue)
            .await?;
        self.backend.delete_queue(&name, self.clock.now()).await?;
        self.pace.forget(&name);
        Ok(Empty {})
    }

    pub(super) async fn get_queue_attributes(
        &self,
        input: GetQueueAttributesInput,
        ctx: &RequestContext,
    ) -> Result<AttributesOutput, ApiError> {
        let name = self
            .queue_named(
                ctx,
                input.queue_url.as_deref(),
                SqsAction::GetQueueAttributes,
            )
            .await?;
        let all = input.attribute_names.iter().any(|n| n == "All");
        if let Some(unknown) = input
            .attribute_names
            .iter()
            .find(|n| *n != "All" && !ATTRIBUTE_NAMES.contains(&n.as_str()))
        {
            return Err(crate::engine::EngineError::InvalidAttributeName(format!(
                "Unknown Attribute {unknown}."
            ))
            .into());
        }
        let queue = self.backend.describe_queue(&name, self.clock.now()).await?;
        let counts = queue.counts;
        let attributes = ATTRIBUTE_NAMES
            .iter()
            .filter(|name| all || input.attribute_names.iter().any(|n| n == *name))
            .filter_map(|name| {
                let value = match *name {
                    "ApproximateNumberOfMessages" => Some(counts.visible.to_string()),
                    "ApproximateNumberOfMessagesNotVisible" => Some(counts.in_flight.to_string()),
                    "ApproximateNumberOfMessagesDelayed" => Some(counts.delayed.to_string()),
                    "QueueArn" => Some(queue.arn.to_string()),
                    other => queue.config.attribute(other),
                };
                value.map(|v| (name.to_string(), v))
            })
            .collect();
        Ok(AttributesOutput {
            attributes: Pairs(attributes),
        })
    }

    pub(super) async fn set_queue_attributes(
        &self,
        input: SetQueueAttributesInput,
        ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let name = self
            .queue_named(
                ctx,
                input.queue_url.as_deref(),
                SqsAction::SetQueueAttributes,
            )
            .await?;
        let attributes = input
            .attributes
            .ok_or_else(|| ApiError::missing("Attributes"))?;
        let now = self.clock.now();
        self.backend
            .set_queue_attributes(&name, pairs(attributes), now)
            .await?;
        Ok(Empty {})
    }

    pub(super) async fn purge_queue(
        &self,
        input: QueueUrlInput,
        ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let name = self
            .queue_named(ctx, input.queue_url.as_deref(), SqsAction::PurgeQueue)
            .await?;
        self.backend.purge_queue(&name, self.clock.now()).await?;
        self.pace.forget(&name);
        Ok(Empty {})
    }

    pub(super) async fn tag_queue(
        &self,
        input: TagQueueInput,
        ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let name = self
            .queue_named(ctx, input.queue_url.as_deref(), SqsAction::TagQueue)
            .await?;
        let tags = input.tags.ok_or_else(|| ApiError::missing("Tags"))?;
        self.backend.tag_queue(&name, tags).await?;
        Ok(Empty {})
    }

    pub(super) async fn untag_queue(
        &self,
        input: UntagQueueInput,
        ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let name = self
            .queue_named(ctx, input.queue_url.as_deref(), SqsAction::UntagQueue)
            .await?;
        let keys = input.tag_keys.ok_or_else(|| ApiError::missing("TagKeys"))?;
        self.backend.untag_queue(&name, keys).await?;
        Ok(Empty {})
    }

    pub(super) async fn list_queue_tags(
        &self,
        input: QueueUrlInput,
        ctx: &RequestContext,
    ) -> Result<TagsOutput, ApiError> {
        let name = self
            .queue_named(ctx, input.queue_url.as_deref(), SqsAction::ListQueueTags)
            .await?;
        let tags = self.backend.queue_tags(&name).await?;
        Ok(TagsOutput {
            tags: Pairs(tags.into_iter().collect()),
        })
    }

    pub(super) async fn add_permission(
        &self,
        input: AddPermissionInput,
        ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let name = self
            .queue_named(ctx, input.queue_url.as_deref(), SqsAction::AddPermission)
            .await?;
        let label = input.label.ok_or_else(|| ApiError::missing("Label"))?;
        let (accounts, actions) = (input.account_ids, input.actions);
        let edit: PolicyEdit = Box::new(move |policy, arn| {
            permissions::add_permission(policy, arn, &label, &accounts, &actions).map(Some)
        });
        self.backend.edit_queue_policy(&name, edit).await?;
        Ok(Empty {})
    }

    pub(super) async fn remove_permission(
        &self,
        input: RemovePermissionInput,
        ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let name = self
            .queue_named(ctx, input.queue_url.as_deref(), SqsAction::RemovePermission)
            .await?;
        let label = input.label.ok_or_else(|| ApiError::missing("Label"))?;
        let edit: PolicyEdit =
            Box::new(move |policy, _| permissions::remove_permission(policy, &label));
        self.backend.edit_queue_policy(&name, edit).await?;
        Ok(Empty {})
    }

    pub(super) async fn list_dead_letter_source_queues(
        &self,
        input: ListDeadLetterSourceQueuesInput,
        ctx: &RequestContext,
    ) -> Result<ListDeadLetterSourceQueuesOutput, ApiError> {
        let name = self
            .queue_named(
                ctx,
                input.queue_url.as_deref(),
                SqsAction::ListDeadLetterSourceQueues,
            )
            .await?;
        let names = self.backend.dead_letter_sources(&name).await?;
        let (page, next_token) = paginate(names, input.next_token.as_deref(), input.max_results)?;
        Ok(ListDeadLetterSourceQueuesOutput {
            queue_urls: page.iter().map(|n| self.queue_url(ctx, n)).collect(),
            next_token,
        })
    }
}
