//! Applying an init file (`--init`, see `crate::init`) through the same handlers as the API, so
//! every AWS rule holds and errors say what AWS would. Idempotent: what exists already is left
//! as it is, and any difference from the file is reported, never overwritten.
//!
//! Queues are created first, without their redrive policies, which are set once every queue
//! exists: a file may name a dead-letter queue before or after the queues that use it.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{RequestContext, Service};
use crate::init::{attribute_text, InitError, InitFile, SubscriptionDecl};
use crate::protocol::sns::{CreateTopicInput, SubscribeInput, TagWire};
use crate::protocol::sqs::{CreateQueueInput, GetQueueAttributesInput, SetQueueAttributesInput};
use crate::protocol::ApiError;

/// What applying the file did.
#[derive(Debug, Default)]
pub struct InitReport {
    /// `queue prices.fifo`, `topic prices.fifo`, `subscription <arn>`.
    pub created: Vec<String>,
    /// Each a full sentence naming the file, the entry and the field.
    pub differences: Vec<String>,
}

/// The file, for messages.
pub struct InitPlace<'a> {
    pub file: &'a std::path::Path,
}

struct Entry<'a> {
    place: &'a InitPlace<'a>,
    /// `queues[0] (prices.fifo)`.
    label: String,
}

impl Entry<'_> {
    fn error(&self, field: impl Into<String>, message: impl Into<String>) -> InitError {
        InitError {
            file: self.place.file.to_path_buf(),
            entry: self.label.clone(),
            field: field.into(),
            message: message.into(),
        }
    }

    /// An API error, blamed on the attribute its message names if one does.
    fn refused(&self, error: ApiError, attributes: &BTreeMap<String, String>) -> InitError {
        let field = attributes
            .keys()
            .find(|name| error.message.contains(name.as_str()))
            .map(|name| format!("attributes.{name}"))
            .unwrap_or_default();
        self.error(field, error.message)
    }

    fn difference(&self, field: &str, wanted: &str, found: Option<&str>) -> String {
        format!(
            "{}: {}: {field}: the file says {wanted:?} but it is {}; left as it is",
            self.place.file.display(),
            self.label,
            found.map_or("not set".to_string(), |f| format!("{f:?}")),
        )
    }
}

impl Service {
    /// Creates what the file declares and does not exist yet. A file refused part way takes
    /// back what it created, so that the start it stops leaves things as they were, and the
    /// file, once corrected, applies whole (rather than find its own half, which it would
    /// never overwrite).
    pub async fn apply_init(
        &self,
        file: &InitFile,
        place: &InitPlace<'_>,
        ctx: &RequestContext,
    ) -> Result<InitReport, InitError> {
        let mut report = InitReport::default();
        let arns = Arns {
            region: self.region(),
            account: self.account_id(),
        };
        match self.apply_all(file, place, &arns, ctx, &mut report).await {
            Ok(()) => Ok(report),
            Err(error) => {
                self.take_back(&report.created, &arns, ctx).await;
                Err(error)
            }
        }
    }

    /// Deletes what `created` names (as `InitReport::created` does), the last made first.
    /// One that cannot be deleted is said and left.
    async fn take_back(&self, created: &[String], arns: &Arns<'_>, ctx: &RequestContext) {
        for made in created.iter().rev() {
            let taken = match made.split_once(' ') {
                Some(("queue", name)) => self.backend.delete_queue(name, self.clock.now()).await,
                Some(("topic", name)) => self.backend.delete_topic(&arns.of("sns", name)).await,
                Some(("subscription", arn)) => {
                    let base_url = self.base_url(ctx);
                    self.backend.unsubscribe(arn, true, &base_url).await
                }
                _ => continue,
            };
            if let Err(error) = taken {
                tracing::warn!(%error, "init: {made}, made before the file was refused, is left");
            }
        }
    }

    async fn apply_all(
        &self,
        file: &InitFile,
        place: &InitPlace<'_>,
        arns: &Arns<'_>,
        ctx: &RequestContext,
        report: &mut InitReport,
    ) -> Result<(), InitError> {
        // Redrive policies wait until every queue exists.
        let mut redrives = Vec::new();
        for (i, queue) in file.queues.iter().enumerate() {
            let entry = Entry {
                place,
                label: format!("queues[{i}] ({})", queue.name),
            };
            let mut attributes = texts(&queue.attributes);
            if let Some(policy) = attributes.remove("RedrivePolicy") {
                redrives.push((entry.label.clone(), queue.name.clone(), policy));
            }
            if self.backend.find_queue(&queue.name).await.is_ok() {
                let have = self.queue_attributes(&queue.name, ctx).await;
                compare(&entry, "attributes", &attributes, &have, report);
                let tags = self
                    .backend
                    .queue_tags(&queue.name)
                    .await
                    .unwrap_or_default();
                compare(&entry, "tags", &queue.tags, &tags, report);
                continue;
            }
            let input = CreateQueueInput {
                queue_name: Some(queue.name.clone()),
                attributes: attributes.clone(),
                tags: queue.tags.clone(),
            };
            self.create_queue(input, ctx)
                .await
                .map_err(|e| entry.refused(e, &attributes))?;
            report.created.push(format!("queue {}", queue.name));
        }
        for (label, name, policy) in redrives {
            let entry = Entry { place, label };
            let policy = arns.named_dead_letter_target(&policy, "sqs");
            let wanted = BTreeMap::from([("RedrivePolicy".to_string(), policy)]);
            if !report.created.contains(&format!("queue {name}")) {
                let have = self.queue_attributes(&name, ctx).await;
                compare(&entry, "attributes", &wanted, &have, report);
                continue;
            }
            let input = SetQueueAttributesInput {
                queue_url: Some(name),
                attributes: Some(wanted.clone()),
            };
            self.set_queue_attributes(input, ctx)
                .await
                .map_err(|e| entry.refused(e, &wanted))?;
        }
        self.apply_topics(file, place, arns, ctx, report).await?;
        for (i, subscription) in file.subscriptions.iter().enumerate() {
            let entry = Entry {
                place,
                label: format!("subscriptions[{i}] ({})", subscription.topic),
            };
            self.apply_subscription(subscription, &entry, arns, ctx, report)
                .await?;
        }
        Ok(())
    }

    async fn apply_topics(
        &self,
        file: &InitFile,
        place: &InitPlace<'_>,
        arns: &Arns<'_>,
        ctx: &RequestContext,
        report: &mut InitReport,
    ) -> Result<(), InitError> {
        let existing = self.backend.list_topics().await.unwrap_or_default();
        for (i, topic) in file.topics.iter().enumerate() {
            let entry = Entry {
                place,
                label: format!("topics[{i}] ({})", topic.name),
            };
            let attributes = texts(&topic.attributes);
            let arn = arns.of("sns", &topic.name);
            if existing.iter().any(|a| **a == *arn) {
                let have: BTreeMap<String, String> = self
                    .backend
                    .topic_attributes(&arn)
                    .await
                    .unwrap_or_default()
                    .into_iter()
                    .collect();
                compare(&entry, "attributes", &attributes, &have, report);
                let tags = self.backend.topic_tags(&arn).await.unwrap_or_default();
                compare(&entry, "tags", &topic.tags, &tags, report);
                continue;
            }
            let input = CreateTopicInput {
                name: Some(topic.name.clone()),
                attributes: attributes.clone(),
                tags: topic
                    .tags
                    .iter()
                    .map(|(key, value)| TagWire {
                        key: key.clone(),
                        value: value.clone(),
                    })
                    .collect(),
                data_protection_policy: None,
            };
            self.create_topic(input, ctx)
                .await
                .map_err(|e| entry.refused(e, &attributes))?;
            report.created.push(format!("topic {}", topic.name));
        }
        Ok(())
    }

    async fn apply_subscription(
        &self,
        declared: &SubscriptionDecl,
        entry: &Entry<'_>,
        arns: &Arns<'_>,
        ctx: &RequestContext,
        report: &mut InitReport,
    ) -> Result<(), InitError> {
        let topic_arn = arns.of("sns", &declared.topic);
        let (protocol, endpoint) = match (&declared.queue, &declared.endpoint) {
            (Some(queue), None) => (
                declared.protocol.clone().unwrap_or_else(|| "sqs".into()),
                arns.of("sqs", queue),
            ),
            (None, Some(endpoint)) => {
                let scheme = endpoint.split("://").next().unwrap_or_default();
                (
                    declared.protocol.clone().unwrap_or_else(|| scheme.into()),
                    endpoint.clone(),
                )
            }
            _ => return Err(entry.error("queue", "give either queue or endpoint")),
        };
        let mut attributes = texts(&declared.attributes);
        if let Some(policy) = attributes.get_mut("RedrivePolicy") {
            *policy = arns.named_dead_letter_target(policy, "sqs");
        }
        let existing = self
            .backend
            .list_subscriptions(Some(&topic_arn))
            .await
            .unwrap_or_default();
        let found = existing
            .iter()
            .find(|(_, s)| s.protocol.name() == protocol && s.endpoint == endpoint);
        if let Some((_, subscription)) = found {
            let have: BTreeMap<String, String> = self
                .backend
                .subscription_attributes(&subscription.arn)
                .await
                .unwrap_or_default()
                .into_iter()
                .collect();
            compare(entry, "attributes", &attributes, &have, report);
            return Ok(());
        }
        let input = SubscribeInput {
            topic_arn: Some(topic_arn),
            protocol: Some(protocol),
            endpoint: Some(endpoint),
            attributes: attributes.clone(),
            return_subscription_arn: Some("true".into()),
        };
        let subscribed = self
            .subscribe(input, ctx)
            .await
            .map_err(|e| entry.refused(e, &attributes))?;
        report
            .created
            .push(format!("subscription {}", subscribed.subscription_arn));
        Ok(())
    }

    /// Every attribute of a queue, as GetQueueAttributes answers them.
    async fn queue_attributes(&self, name: &str, ctx: &RequestContext) -> BTreeMap<String, String> {
        let input = GetQueueAttributesInput {
            queue_url: Some(name.to_string()),
            attribute_names: vec!["All".into()],
        };
        match self.get_queue_attributes(input, ctx).await {
            Ok(output) => output.attributes.0.into_iter().collect(),
            Err(_) => BTreeMap::new(),
        }
    }
}

fn texts(attributes: &BTreeMap<String, toml::Value>) -> BTreeMap<String, String> {
    attributes
        .iter()
        .map(|(name, value)| (name.clone(), attribute_text(value)))
        .collect()
}

/// Reports each value the file gives that differs from what exists.
fn compare(
    entry: &Entry<'_>,
    field: &str,
    wanted: &BTreeMap<String, String>,
    have: &BTreeMap<String, String>,
    report: &mut InitReport,
) {
    for (name, value) in wanted {
        let found = have.get(name).map(String::as_str);
        if !same(value, found) {
            let field = format!("{field}.{name}");
            report
                .differences
                .push(entry.difference(&field, value, found));
        }
    }
}

/// Equal as written, as JSON documents (key order, numbers written as strings), or as an unset
/// flag and `false`.
fn same(wanted: &str, found: Option<&str>) -> bool {
    let Some(found) = found else {
        return wanted.is_empty() || wanted.eq_ignore_ascii_case("false");
    };
    if wanted == found || wanted.eq_ignore_ascii_case(found) && is_flag(wanted) {
        return true;
    }
    match (
        serde_json::from_str::<Value>(wanted),
        serde_json::from_str::<Value>(found),
    ) {
        (Ok(a), Ok(b)) if a.is_object() || a.is_array() => scalars_as_text(a) == scalars_as_text(b),
        _ => false,
    }
}

fn is_flag(text: &str) -> bool {
    text.eq_ignore_ascii_case("true") || text.eq_ignore_ascii_case("false")
}

fn scalars_as_text(value: Value) -> Value {
    match value {
        Value::Number(n) => Value::String(n.to_string()),
        Value::Bool(b) => Value::String(b.to_string()),
        Value::Array(items) => Value::Array(items.into_iter().map(scalars_as_text).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, scalars_as_text(v)))
                .collect(),
        ),
        other => other,
    }
}

/// ARNs of this server's queues and topics, from a name or an ARN.
struct Arns<'a> {
    region: &'a str,
    account: &'a str,
}

impl Arns<'_> {
    fn of(&self, service: &str, name_or_arn: &str) -> String {
        if name_or_arn.starts_with("arn:") {
            return name_or_arn.to_string();
        }
        format!(
            "arn:aws:{service}:{}:{}:{name_or_arn}",
            self.region, self.account
        )
    }

    /// A redrive policy whose `deadLetterTargetArn` may be a bare queue name.
    fn named_dead_letter_target(&self, policy: &str, service: &str) -> String {
        let Ok(Value::Object(mut fields)) = serde_json::from_str::<Value>(policy) else {
            return policy.to_string();
        };
        if let Some(Value::String(target)) = fields.get_mut("deadLetterTargetArn") {
            *target = self.of(service, target);
        }
        Value::Object(fields).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_compare_as_the_api_writes_them() {
        assert!(same("30", Some("30")));
        assert!(same("True", Some("true")));
        assert!(same("false", None));
        assert!(!same("31", Some("30")));
        assert!(!same("true", None));
        assert!(same(
            r#"{"maxReceiveCount":5,"deadLetterTargetArn":"a"}"#,
            Some(r#"{"deadLetterTargetArn":"a","maxReceiveCount":"5"}"#)
        ));
        assert!(!same(
            r#"{"maxReceiveCount":5}"#,
            Some(r#"{"maxReceiveCount":"6"}"#)
        ));
    }

    #[test]
    fn names_become_arns_and_arns_stay() {
        let arns = Arns {
            region: "eu-west-1",
            account: "123456789012",
        };
        assert_eq!(arns.of("sqs", "q"), "arn:aws:sqs:eu-west-1:123456789012:q");
        assert_eq!(arns.of("sns", "arn:aws:sns:x:1:t"), "arn:aws:sns:x:1:t");
        let policy = arns.named_dead_letter_target(
            r#"{"deadLetterTargetArn":"dlq","maxReceiveCount":3}"#,
            "sqs",
        );
        assert!(
            policy.contains("arn:aws:sqs:eu-west-1:123456789012:dlq"),
            "{policy}"
        );
    }
}
