//! Queue management actions: create, look up, list, delete, attributes, tags, permissions.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

use super::permissions;
use super::{RequestContext, Service};
use crate::engine::queue::config::ATTRIBUTE_NAMES;
use crate::protocol::sqs::*;
use crate::protocol::ApiError;

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
    pub(super) fn create_queue(
        &self,
        input: CreateQueueInput,
        ctx: &RequestContext,
    ) -> Result<QueueUrlOutput, ApiError> {
        let name = input
            .queue_name
            .ok_or_else(|| ApiError::missing("QueueName"))?;
        let now = self.clock.now();
        let entry =
            self.engine
                .create_queue(&name, &pairs(input.attributes), &pairs(input.tags), now)?;
        Ok(QueueUrlOutput {
            queue_url: self.queue_url(ctx, &entry.name),
        })
    }

    pub(super) fn get_queue_url(
        &self,
        input: QueueNameInput,
        ctx: &RequestContext,
    ) -> Result<QueueUrlOutput, ApiError> {
        let name = input
            .queue_name
            .ok_or_else(|| ApiError::missing("QueueName"))?;
        if input
            .queue_owner_account_id
            .as_deref()
            .is_some_and(|a| a != self.engine.account_id)
        {
            return Err(crate::engine::EngineError::QueueDoesNotExist.into());
        }
        let entry = self.engine.queue(&name)?;
        Ok(QueueUrlOutput {
            queue_url: self.queue_url(ctx, &entry.name),
        })
    }

    pub(super) fn list_queues(
        &self,
        input: ListQueuesInput,
        ctx: &RequestContext,
    ) -> Result<ListQueuesOutput, ApiError> {
        let names = self
            .engine
            .list_queues(input.queue_name_prefix.as_deref().unwrap_or(""));
        let (page, next_token) = paginate(names, input.next_token.as_deref(), input.max_results)?;
        Ok(ListQueuesOutput {
            queue_urls: page.iter().map(|n| self.queue_url(ctx, n)).collect(),
            next_token,
        })
    }

    pub(super) fn delete_queue(
        &self,
        input: QueueUrlInput,
        _ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let entry = self.queue_from_url(input.queue_url.as_deref())?;
        self.engine.delete_queue(&entry.name, self.clock.now())?;
        // Parked long polls notice the queue is gone and return empty.
        Self::wake_all(&entry);
        Ok(Empty {})
    }

    pub(super) fn get_queue_attributes(
        &self,
        input: GetQueueAttributesInput,
        _ctx: &RequestContext,
    ) -> Result<AttributesOutput, ApiError> {
        let entry = self.queue_from_url(input.queue_url.as_deref())?;
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
        let mut queue = entry.lock();
        queue.tick(self.clock.now());
        let counts = queue.counts();
        let attributes = ATTRIBUTE_NAMES
            .iter()
            .filter(|name| all || input.attribute_names.iter().any(|n| n == *name))
            .filter_map(|name| {
                let value = match *name {
                    "ApproximateNumberOfMessages" => Some(counts.visible.to_string()),
                    "ApproximateNumberOfMessagesNotVisible" => Some(counts.in_flight.to_string()),
                    "ApproximateNumberOfMessagesDelayed" => Some(counts.delayed.to_string()),
                    "QueueArn" => Some(queue.arn.to_string()),
                    other => queue.config().attribute(other),
                };
                value.map(|v| (name.to_string(), v))
            })
            .collect();
        Ok(AttributesOutput {
            attributes: Pairs(attributes),
        })
    }

    pub(super) fn set_queue_attributes(
        &self,
        input: SetQueueAttributesInput,
        _ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let entry = self.queue_from_url(input.queue_url.as_deref())?;
        let attributes = input
            .attributes
            .ok_or_else(|| ApiError::missing("Attributes"))?;
        self.engine
            .set_attributes(&entry.name, &pairs(attributes), self.clock.now())?;
        // A shorter delay or visibility default may make messages receivable sooner.
        Self::wake(&entry);
        Ok(Empty {})
    }

    pub(super) fn purge_queue(
        &self,
        input: QueueUrlInput,
        _ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let entry = self.queue_from_url(input.queue_url.as_deref())?;
        entry.lock().purge(self.clock.now())?;
        Ok(Empty {})
    }

    pub(super) fn tag_queue(
        &self,
        input: TagQueueInput,
        _ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let entry = self.queue_from_url(input.queue_url.as_deref())?;
        let tags = input.tags.ok_or_else(|| ApiError::missing("Tags"))?;
        entry.lock().tag(tags)?;
        Ok(Empty {})
    }

    pub(super) fn untag_queue(
        &self,
        input: UntagQueueInput,
        _ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let entry = self.queue_from_url(input.queue_url.as_deref())?;
        let keys = input.tag_keys.ok_or_else(|| ApiError::missing("TagKeys"))?;
        entry.lock().untag(&keys);
        Ok(Empty {})
    }

    pub(super) fn list_queue_tags(
        &self,
        input: QueueUrlInput,
        _ctx: &RequestContext,
    ) -> Result<TagsOutput, ApiError> {
        let entry = self.queue_from_url(input.queue_url.as_deref())?;
        let queue = entry.lock();
        Ok(TagsOutput {
            tags: Pairs(
                queue
                    .tags()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ),
        })
    }

    pub(super) fn add_permission(
        &self,
        input: AddPermissionInput,
        _ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let entry = self.queue_from_url(input.queue_url.as_deref())?;
        let label = input.label.ok_or_else(|| ApiError::missing("Label"))?;
        entry.lock().edit_policy(|policy, arn| {
            permissions::add_permission(policy, arn, &label, &input.account_ids, &input.actions)
                .map(Some)
        })?;
        Ok(Empty {})
    }

    pub(super) fn remove_permission(
        &self,
        input: RemovePermissionInput,
        _ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let entry = self.queue_from_url(input.queue_url.as_deref())?;
        let label = input.label.ok_or_else(|| ApiError::missing("Label"))?;
        entry
            .lock()
            .edit_policy(|policy, _| permissions::remove_permission(policy, &label))?;
        Ok(Empty {})
    }

    pub(super) fn list_dead_letter_source_queues(
        &self,
        input: ListDeadLetterSourceQueuesInput,
        ctx: &RequestContext,
    ) -> Result<ListDeadLetterSourceQueuesOutput, ApiError> {
        let entry = self.queue_from_url(input.queue_url.as_deref())?;
        let names = self.engine.dead_letter_sources(&entry.name)?;
        let (page, next_token) = paginate(names, input.next_token.as_deref(), input.max_results)?;
        Ok(ListDeadLetterSourceQueuesOutput {
            queue_urls: page.iter().map(|n| self.queue_url(ctx, n)).collect(),
            next_token,
        })
    }
}
