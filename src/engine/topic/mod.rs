//! SNS topics: attributes, subscriptions, and what a publish decides (validation, topic-wide
//! deduplication, sequence numbers). Fan-out into subscriptions is
//! `engine::topics`'. Pure.

pub mod archive;
mod attribute_errors;
pub mod captured;
mod captured_message;
pub mod changes;
pub mod data_protection;
pub mod delivery_policy;
mod durability;
pub mod envelope;
pub mod filter;
pub mod protocol;
mod publication;
pub mod recent;
mod replay;
pub mod signing;
pub mod subscription;
pub mod subscription_copy;
pub mod subscription_edits;

pub use protocol::{EndpointKind, SubscriptionProtocol};
pub use publication::{Publication, PublishRequest};
pub use subscription::Subscription;

pub use filter::{FilterPolicy, Scope};

use crate::engine::error::invalid_parameter as invalid;
use delivery_policy::{EffectivePolicy, TopicPolicy};

use std::collections::BTreeMap;
use std::sync::Arc;

use super::check_xml_text;
use super::dedup::{DedupDigest, DedupHistory, DedupRecord};
use super::error::{EngineError, EngineResult};
use super::message::{
    content_dedup_id, validate_attribute, validate_token, MessageId, SequenceNumber,
};
use super::queue::DEDUP_WINDOW_MS;
use super::time::Timestamp;

/// SNS message size limit (body plus attributes).
pub const MAX_MESSAGE_BYTES: usize = 262_144;
/// SNS sequence numbers: 20-digit decimals like AWS's.
const SEQUENCE_BASE: u128 = 10_000_000_000_000_000_000;

const FEEDBACK_PREFIXES: &[&str] = &["HTTP", "Firehose", "Lambda", "Application", "SQS"];

fn is_feedback(name: &str) -> bool {
    FEEDBACK_PREFIXES.iter().any(|p| {
        name.strip_prefix(p).is_some_and(|rest| {
            matches!(
                rest,
                "SuccessFeedbackRoleArn" | "FailureFeedbackRoleArn" | "SuccessFeedbackSampleRate"
            )
        })
    })
}

/// Topic names: 1-256 of `[A-Za-z0-9_-]`, FIFO ones ending in `.fifo`.
pub fn validate_topic_name(name: &str, fifo: bool) -> EngineResult<()> {
    let stem = if fifo {
        name.strip_suffix(".fifo")
    } else {
        Some(name)
    };
    let ok = stem.is_some_and(|s| {
        !s.is_empty()
            && name.len() <= 256
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    });
    if ok {
        Ok(())
    } else {
        Err(invalid("Invalid parameter: Topic Name"))
    }
}

/// Whether CreateTopic's attributes ask for a FIFO topic, with the name checked against that:
/// AWS checks it before it looks for an existing topic of that name (observed on AWS).
pub fn checked_name(name: &str, attrs: &[(String, String)]) -> EngineResult<bool> {
    let fifo = match attrs
        .iter()
        .find(|(n, _)| n == "FifoTopic")
        .map(|(_, v)| v.as_str())
    {
        Some(v) if v.eq_ignore_ascii_case("true") => true,
        Some(v) if v.eq_ignore_ascii_case("false") => false,
        Some(_) => {
            return Err(invalid(
                "Invalid parameter: Attributes Reason: FifoTopic must be true or false",
            ))
        }
        None => false,
    };
    validate_topic_name(crate::engine::namespace::name_of(name), fifo)?;
    Ok(fifo)
}

pub struct Topic {
    pub name: Arc<str>,
    pub arn: Arc<str>,
    pub fifo: bool,
    pub owner: String,
    /// Attributes set explicitly (computed ones are added by `attributes`).
    settings: BTreeMap<String, String>,
    pub tags: BTreeMap<String, String>,
    /// In subscription order: fan-out visits them in this order.
    pub subscriptions: Vec<Arc<Subscription>>,
    pub deleted_subscriptions: u64,
    dedup: DedupHistory<DedupRecord>,
    next_seq: u64,
    pub archive: Option<archive::Archive>,
    /// The parsed `DeliveryPolicy` (HTTP/S subscriptions).
    pub delivery_policy: Option<TopicPolicy>,
    /// Set by DeleteTopic under the topic's lock: a request still holding the topic changes
    /// nothing (and logs nothing) after that.
    pub deleted: bool,
    /// Publishes accepted, and FIFO publishes suppressed as duplicates, since the server
    /// started (for metrics; not logged).
    pub published: u64,
    pub deduplicated: u64,
    /// Changes for the log, while one is attached.
    changes: Option<Vec<changes::TopicChange>>,
}

impl Topic {
    /// A topic with no settings, tags, subscriptions or history: what `new` and a restore fill.
    fn empty(name: Arc<str>, arn: Arc<str>, fifo: bool, owner: String) -> Topic {
        Topic {
            name,
            arn,
            fifo,
            owner,
            settings: BTreeMap::new(),
            tags: BTreeMap::new(),
            subscriptions: Vec::new(),
            deleted_subscriptions: 0,
            dedup: DedupHistory::default(),
            next_seq: 1,
            archive: None,
            delivery_policy: None,
            deleted: false,
            published: 0,
            deduplicated: 0,
            changes: None,
        }
    }

    pub fn new(
        name: &str,
        arn: String,
        owner: &str,
        attrs: &[(String, String)],
        now: Timestamp,
    ) -> EngineResult<Topic> {
        let fifo = checked_name(name, attrs)?;
        let mut topic = Topic::empty(name.into(), arn.into(), fifo, owner.to_string());
        for (n, v) in attrs.iter().filter(|(n, _)| n != "FifoTopic") {
            topic.set(n, v, "Attributes Reason: ", now)?;
        }
        Ok(topic)
    }

    /// Sets one attribute (CreateTopic or SetTopicAttributes).
    pub fn set(
        &mut self,
        name: &str,
        value: &str,
        prefix: &str,
        now: Timestamp,
    ) -> EngineResult<()> {
        check_xml_text(value).map_err(|_| invalid(format!("Invalid parameter: {prefix}{name}")))?;
        let fifo_only = matches!(
            name,
            "ContentBasedDeduplication" | "FifoThroughputScope" | "ArchivePolicy"
        );
        if fifo_only && !self.fifo {
            return Err(invalid(format!(
                "Invalid parameter: {prefix}{name} is only valid for FIFO topics"
            )));
        }
        let bad_value = || {
            invalid(format!(
                "Invalid parameter: {prefix}{name}: Invalid value [{value}]"
            ))
        };
        match name {
            // Turning a standard topic FIFO names its (non-.fifo) name as the fault (observed
            // on AWS); any other FifoTopic change is refused as an attribute that cannot be set
            // (sns.md §3.5, AWS-observed).
            "FifoTopic" if !self.fifo && value.eq_ignore_ascii_case("true") => {
                return Err(invalid("Invalid parameter: Topic Name"))
            }
            "FifoTopic" => return Err(invalid("Invalid parameter: AttributeName")),
            "ContentBasedDeduplication" => {
                if !value.eq_ignore_ascii_case("true") && !value.eq_ignore_ascii_case("false") {
                    return Err(bad_value());
                }
                self.settings
                    .insert(name.into(), value.to_ascii_lowercase());
                return Ok(());
            }
            "FifoThroughputScope" if !matches!(value, "Topic" | "MessageGroup") => {
                return Err(bad_value())
            }
            "SignatureVersion" if !matches!(value, "1" | "2") => return Err(bad_value()),
            "TracingConfig" if !matches!(value, "PassThrough" | "Active") => {
                return Err(bad_value())
            }
            "TracingConfig" if self.fifo => {
                return Err(invalid(format!(
                    "Invalid parameter: {prefix}TracingConfig is not supported for FIFO topics"
                )))
            }
            "ArchivePolicy" => {
                let days = archive::parse_archive_policy(value).map_err(|e| {
                    invalid(format!("Invalid parameter: {prefix}ArchivePolicy: {e}"))
                })?;
                match days {
                    None => {
                        self.archive = None;
                        self.settings.remove(name);
                    }
                    Some(days) => {
                        match &mut self.archive {
                            Some(archive) => archive.retention_days = days,
                            None => self.archive = Some(archive::Archive::new(days, now)),
                        }
                        self.settings.insert(name.to_string(), value.to_string());
                    }
                }
                return Ok(());
            }
            "DeliveryPolicy" => {
                self.delivery_policy = if value.is_empty() {
                    None
                } else {
                    Some(TopicPolicy::parse(value).map_err(|e| {
                        invalid(format!("Invalid parameter: {prefix}DeliveryPolicy: {e}"))
                    })?)
                };
            }
            "Policy" if !value.is_empty() => {
                serde_json::from_str::<serde_json::Value>(value).map_err(|e| {
                    invalid(format!(
                        "Invalid parameter: {prefix}{name}: failed to parse JSON. {e}"
                    ))
                })?;
            }
            "FifoThroughputScope"
            | "SignatureVersion"
            | "TracingConfig"
            | "Policy"
            | "DisplayName"
            | "KmsMasterKeyId" => {}
            other if is_feedback(other) => {}
            // SetTopicAttributes names the parameter alone, as for FifoTopic (seen on AWS).
            _ if prefix.is_empty() => return Err(invalid("Invalid parameter: AttributeName")),
            _ => {
                return Err(invalid(format!(
                    "Invalid parameter: {prefix}Unknown attribute {name}"
                )))
            }
        }
        if value.is_empty() && name != "DisplayName" {
            self.settings.remove(name);
        } else {
            self.settings.insert(name.to_string(), value.to_string());
        }
        Ok(())
    }

    /// CreateTopic idempotency: every requested attribute must equal what is stored.
    pub fn same_settings(&self, attrs: &[(String, String)]) -> bool {
        attrs.iter().all(|(name, value)| match name.as_str() {
            "FifoTopic" => value.eq_ignore_ascii_case(if self.fifo { "true" } else { "false" }),
            "ContentBasedDeduplication" => {
                self.settings
                    .get(name)
                    .map(String::as_str)
                    .unwrap_or("false")
                    == value.to_ascii_lowercase()
            }
            _ => self.settings.get(name) == Some(value),
        })
    }

    /// The topic's access policy: the one set, or the default AWS gives a new topic.
    pub fn policy(&self) -> String {
        self.settings
            .get("Policy")
            .cloned()
            .unwrap_or_else(|| self.default_policy())
    }

    fn default_policy(&self) -> String {
        serde_json::json!({
            "Version": "2008-10-17",
            "Id": "__default_policy_ID",
            "Statement": [{
                "Sid": "__default_statement_ID",
                "Effect": "Allow",
                "Principal": {"AWS": "*"},
                "Action": ["SNS:GetTopicAttributes", "SNS:SetTopicAttributes", "SNS:AddPermission",
                    "SNS:RemovePermission", "SNS:DeleteTopic", "SNS:Subscribe",
                    "SNS:ListSubscriptionsByTopic", "SNS:Publish"],
                "Resource": &*self.arn,
                "Condition": {"StringEquals": {"AWS:SourceOwner": &self.owner}},
            }],
        })
        .to_string()
    }

    /// GetTopicAttributes: computed attributes plus whatever was set.
    pub fn attributes(&self, now: Timestamp) -> Vec<(String, String)> {
        let confirmed = self.subscriptions.iter().filter(|s| !s.pending).count();
        let mut out = vec![
            ("TopicArn".to_string(), self.arn.to_string()),
            ("Owner".to_string(), self.owner.clone()),
            (
                "DisplayName".to_string(),
                self.settings
                    .get("DisplayName")
                    .cloned()
                    .unwrap_or_default(),
            ),
            ("Policy".to_string(), self.policy()),
            ("SubscriptionsConfirmed".to_string(), confirmed.to_string()),
            (
                "SubscriptionsPending".to_string(),
                (self.subscriptions.len() - confirmed).to_string(),
            ),
            (
                "SubscriptionsDeleted".to_string(),
                self.deleted_subscriptions.to_string(),
            ),
            (
                "EffectiveDeliveryPolicy".to_string(),
                self.delivery_policy
                    .clone()
                    .unwrap_or_default()
                    .effective_json(),
            ),
        ];
        if self.fifo {
            out.push(("FifoTopic".into(), "true".into()));
            out.push((
                "ContentBasedDeduplication".into(),
                self.settings
                    .get("ContentBasedDeduplication")
                    .cloned()
                    .unwrap_or_else(|| "false".into()),
            ));
        }
        for (name, value) in &self.settings {
            if !matches!(
                name.as_str(),
                "DisplayName" | "Policy" | "ContentBasedDeduplication" | data_protection::SETTING
            ) {
                out.push((name.clone(), value.clone()));
            }
        }
        if let Some(archive) = &self.archive {
            out.push((
                "BeginningArchiveTime".into(),
                archive.beginning(now).iso8601(),
            ));
        }
        out
    }

    /// The delivery policy an HTTP/S subscription follows.
    pub fn effective_policy(&self, sub: &Subscription) -> EffectivePolicy {
        EffectivePolicy::merge(self.delivery_policy.as_ref(), sub.delivery_policy.as_ref())
    }

    /// "1" (SHA1withRSA, the default) or "2" (SHA256withRSA).
    pub fn signature_version(&self) -> &str {
        self.settings
            .get("SignatureVersion")
            .map(String::as_str)
            .unwrap_or("1")
    }

    fn content_based(&self) -> bool {
        self.settings
            .get("ContentBasedDeduplication")
            .is_some_and(|v| v == "true")
    }

    fn group_scoped_dedup(&self) -> bool {
        self.settings
            .get("FifoThroughputScope")
            .is_some_and(|v| v == "MessageGroup")
    }

    /// Validates a publish against the topic type (attributes and size are checked by `check`).
    pub fn check_fifo_rules(&self, req: &PublishRequest) -> EngineResult<()> {
        if self.fifo {
            let Some(group) = &req.group_id else {
                return Err(invalid(
                    "Invalid parameter: The MessageGroupId parameter is required for FIFO topics",
                ));
            };
            validate_token("MessageGroupId", group)
                .map_err(|e| invalid(format!("Invalid parameter: {e}")))?;
            match &req.dedup_id {
                Some(id) => validate_token("MessageDeduplicationId", id).map_err(|e| invalid(format!("Invalid parameter: {e}")))?,
                None if self.content_based() => {}
                None => {
                    return Err(invalid(
                        "Invalid parameter: The topic should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly",
                    ))
                }
            }
        } else if req.dedup_id.is_some() {
            return Err(invalid(
                "Invalid parameter: MessageDeduplicationId Reason: The request includes MessageDeduplicationId parameter that is not valid for this topic type",
            ));
        } else if let Some(group) = &req.group_id {
            // Standard topics accept a group id (passed on to standard queues) of the same form.
            validate_token("MessageGroupId", group)
                .map_err(|e| invalid(format!("Invalid parameter: {e}")))?;
        }
        Ok(())
    }

    /// Decides one publish: a FIFO duplicate inside the window gets the original's ids.
    pub fn accept(&mut self, req: &PublishRequest, now: Timestamp) -> EngineResult<Publication> {
        self.check_fifo_rules(req)?;
        self.dedup.expire(now);
        if !self.fifo {
            self.published += 1;
            return Ok(Publication {
                message_id: uuid::Uuid::new_v4().to_string().into(),
                sequence_number: None,
                dedup_id: None,
                duplicate: false,
            });
        }
        let (key, dedup_id) = self.dedup_key(req);
        let digest = DedupDigest::of(&key);
        if let Some(original) = self.dedup.get(&digest, now) {
            self.deduplicated += 1;
            return Ok(Publication {
                message_id: original.message_id.text().as_str().into(),
                sequence_number: original.sequence_number.map(SequenceNumber::get),
                dedup_id: Some(dedup_id),
                duplicate: true,
            });
        }
        self.published += 1;
        let id = MessageId::random();
        let message_id: Arc<str> = id.text().as_str().into();
        let sequence_number = sequence_number(self.next_seq);
        self.next_seq += 1;
        let expires_at = now.plus_millis(DEDUP_WINDOW_MS);
        let publication = Publication {
            message_id: message_id.clone(),
            sequence_number: Some(sequence_number),
            dedup_id: Some(dedup_id),
            duplicate: false,
        };
        let archived = self.archive.is_some().then(|| archive::Archived {
            publication: publication.clone(),
            request: req.clone(),
            published_at: now,
        });
        self.note_published(
            &key,
            &message_id,
            sequence_number,
            expires_at,
            archived.as_ref(),
        );
        let original = DedupRecord {
            message_id: id,
            sequence_number: SequenceNumber::exact(sequence_number),
        };
        self.dedup.insert(digest, original, expires_at);
        if let (Some(archive), Some(item)) = (&mut self.archive, archived) {
            archive.push(item);
        }
        Ok(publication)
    }

    /// A FIFO publish's (deduplication key, deduplication id): the id given or the body's
    /// SHA-256; the key adds the group when deduplication is scoped by group.
    pub fn dedup_key(&self, req: &PublishRequest) -> (String, String) {
        let dedup_id = req
            .dedup_id
            .clone()
            .unwrap_or_else(|| content_dedup_id(&req.message));
        let key = if self.group_scoped_dedup() {
            format!("{}\u{0}{dedup_id}", req.group_id.as_deref().unwrap_or(""))
        } else {
            dedup_id.clone()
        };
        (key, dedup_id)
    }

    /// Subscription attributes as Get returns them.
    pub fn subscription_attributes(&self, sub: &Subscription) -> Vec<(String, String)> {
        let mut out = vec![
            (
                "ConfirmationWasAuthenticated".into(),
                sub.confirmation_authenticated.to_string(),
            ),
            ("Endpoint".into(), sub.endpoint.clone()),
            ("Owner".into(), sub.owner.clone()),
            ("PendingConfirmation".into(), sub.pending.to_string()),
            ("Protocol".into(), sub.protocol.name().into()),
            (
                "RawMessageDelivery".into(),
                sub.attribute("RawMessageDelivery").unwrap_or_default(),
            ),
            ("SubscriptionArn".into(), sub.arn.to_string()),
            ("SubscriptionPrincipal".into(), sub.principal()),
            ("TopicArn".into(), self.arn.to_string()),
        ];
        for (name, value) in &sub.attributes {
            out.push((name.clone(), value.clone()));
        }
        if let Some(replay) = &sub.replay {
            out.push(("ReplayStatus".into(), replay.status.into()));
        }
        if sub.is_webhook() {
            out.push((
                "EffectiveDeliveryPolicy".into(),
                self.effective_policy(sub).to_json(),
            ));
        }
        if sub.filter.is_some() {
            let scope = match sub.filter_scope {
                Scope::MessageAttributes => "MessageAttributes",
                Scope::MessageBody => "MessageBody",
            };
            out.push(("FilterPolicyScope".into(), scope.into()));
        }
        out
    }
}

/// The sequence number of a FIFO topic's `n`th publish: 20 digits, like AWS's.
pub fn sequence_number(n: u64) -> u128 {
    SEQUENCE_BASE + n as u128 * 1000
}

/// Checks a publish's parts that do not depend on the topic: subject, body, attributes, size,
/// message structure.
pub fn check_message(req: &PublishRequest) -> EngineResult<()> {
    if let Some(subject) = &req.subject {
        let ok = !subject.is_empty()
            && subject.chars().count() < 100
            && !subject.chars().any(char::is_control);
        if !ok {
            return Err(invalid("Invalid parameter: Subject"));
        }
    }
    if req.message.is_empty() {
        return Err(invalid("Invalid parameter: Empty message"));
    }
    // Each attribute follows the rules, refused in SNS's own words where they are known;
    // unlike SQS there is no count limit (raw delivery into a queue with more than 10 fails
    // for that subscription instead).
    for (name, value) in req.attributes.iter() {
        if let Some(text) = attribute_errors::sns_attribute_error(name, value) {
            return Err(EngineError::ParameterValueInvalid(text));
        }
        validate_attribute(name, value)
            .map_err(|e| EngineError::ParameterValueInvalid(e.to_string()))?;
    }
    if req.message.len() + req.attributes.size() > MAX_MESSAGE_BYTES {
        return Err(invalid("Invalid parameter: Message too long"));
    }
    if req.structured {
        let json: serde_json::Value = serde_json::from_str(&req.message).map_err(|_| {
            invalid("Invalid parameter: Message Structure - JSON message body failed to parse")
        })?;
        if !json
            .get("default")
            .is_some_and(serde_json::Value::is_string)
        {
            return Err(invalid(
                "Invalid parameter: Message Structure - No default entry in JSON message body",
            ));
        }
    }
    Ok(())
}

impl Topic {
    /// PutDataProtectionPolicy: stores the policy as given; an empty one removes it. FIFO
    /// topics take none (message data protection is for standard topics, sns.md §CreateTopic).
    pub fn set_data_protection_policy(&mut self, text: &str) -> EngineResult<()> {
        if self.fifo {
            return Err(data_protection::refused(
                "message data protection is not supported for FIFO topics",
            ));
        }
        if text.is_empty() {
            self.settings.remove(data_protection::SETTING);
            return Ok(());
        }
        data_protection::check_policy(text)?;
        self.settings
            .insert(data_protection::SETTING.into(), text.into());
        Ok(())
    }

    /// GetDataProtectionPolicy: the stored policy, empty if there is none.
    pub fn data_protection_policy(&self) -> String {
        self.settings
            .get(data_protection::SETTING)
            .cloned()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
