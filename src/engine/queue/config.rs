//! Queue attributes: defaults, ranges, FIFO-only rules, and their string forms on the wire.

use serde_json::Value;

use crate::engine::error::{EngineError, EngineResult};
use crate::engine::time::Timestamp;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DedupScope {
    Queue,
    MessageGroup,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThroughputLimit {
    PerQueue,
    PerMessageGroupId,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedrivePolicy {
    pub dead_letter_target_arn: String,
    pub max_receive_count: u32,
}

impl RedrivePolicy {
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "deadLetterTargetArn": self.dead_letter_target_arn,
            "maxReceiveCount": self.max_receive_count,
        })
        .to_string()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedrivePermission {
    AllowAll,
    DenyAll,
    ByQueue(Vec<String>),
}

/// Every settable attribute of a queue.
#[derive(Clone, Debug)]
pub struct QueueConfig {
    pub fifo: bool,
    pub delay_seconds: u32,
    pub maximum_message_size: u32,
    pub retention_seconds: u32,
    pub receive_wait_seconds: u32,
    pub visibility_timeout: u32,
    pub policy: Option<String>,
    pub redrive_policy: Option<RedrivePolicy>,
    pub redrive_allow_policy: Option<(RedrivePermission, String)>,
    pub kms_master_key_id: Option<String>,
    pub kms_data_key_reuse_seconds: Option<u32>,
    pub sqs_managed_sse: bool,
    pub content_based_dedup: bool,
    pub dedup_scope: DedupScope,
    pub throughput_limit: ThroughputLimit,
    pub created_at: Timestamp,
    pub last_modified_at: Timestamp,
}

/// Attribute names GetQueueAttributes knows, in the order `All` lists them.
pub const ATTRIBUTE_NAMES: &[&str] = &[
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesDelayed",
    "ApproximateNumberOfMessagesNotVisible",
    "ContentBasedDeduplication",
    "CreatedTimestamp",
    "DeduplicationScope",
    "DelaySeconds",
    "FifoQueue",
    "FifoThroughputLimit",
    "KmsDataKeyReusePeriodSeconds",
    "KmsMasterKeyId",
    "LastModifiedTimestamp",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "Policy",
    "QueueArn",
    "ReceiveMessageWaitTimeSeconds",
    "RedriveAllowPolicy",
    "RedrivePolicy",
    "SqsManagedSseEnabled",
    "VisibilityTimeout",
];

const READ_ONLY: &[&str] = &[
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesDelayed",
    "ApproximateNumberOfMessagesNotVisible",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
    "QueueArn",
];

const FIFO_ONLY: &[&str] = &[
    "FifoQueue",
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "FifoThroughputLimit",
];

fn invalid_value(name: &str) -> EngineError {
    EngineError::InvalidAttributeValue(format!("Invalid value for the parameter {name}."))
}

fn parse_range(name: &str, value: &str, min: u32, max: u32) -> EngineResult<u32> {
    value
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|v| (min..=max).contains(v))
        .ok_or_else(|| invalid_value(name))
}

fn parse_bool(name: &str, value: &str) -> EngineResult<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid_value(name)),
    }
}

impl QueueConfig {
    pub fn new(fifo: bool, now: Timestamp) -> Self {
        QueueConfig {
            fifo,
            delay_seconds: 0,
            maximum_message_size: 1_048_576,
            retention_seconds: 345_600,
            receive_wait_seconds: 0,
            visibility_timeout: 30,
            policy: None,
            redrive_policy: None,
            redrive_allow_policy: None,
            kms_master_key_id: None,
            kms_data_key_reuse_seconds: None,
            sqs_managed_sse: true,
            content_based_dedup: false,
            dedup_scope: DedupScope::Queue,
            throughput_limit: ThroughputLimit::PerQueue,
            created_at: now,
            last_modified_at: now,
        }
    }

    /// Builds the configuration of a new queue from CreateQueue's name and attributes.
    pub fn for_create(
        name: &str,
        attrs: &[(String, String)],
        now: Timestamp,
    ) -> EngineResult<Self> {
        let name = crate::engine::namespace::name_of(name);
        let fifo_attr = attrs.iter().find(|(n, _)| n == "FifoQueue");
        let fifo = match fifo_attr {
            Some((_, v)) => parse_bool("FifoQueue", v)?,
            None => false,
        };
        let fifo_name = || {
            EngineError::invalid(
                "The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end with .fifo suffix and be 1 to 80 in length.",
            )
        };
        // A FIFO queue's name is refused in the FIFO words, whatever is wrong with it.
        validate_queue_name(name).map_err(|standard| if fifo { fifo_name() } else { standard })?;
        let named_fifo = name.ends_with(".fifo");
        if fifo && !named_fifo {
            return Err(fifo_name());
        }
        if !fifo && named_fifo {
            return Err(EngineError::invalid(
                "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length",
            ));
        }
        let mut config = QueueConfig::new(fifo, now);
        config.apply(attrs)?;
        Ok(config)
    }

    /// Applies CreateQueue or SetQueueAttributes attributes; nothing changes on error.
    pub fn apply(&mut self, attrs: &[(String, String)]) -> EngineResult<()> {
        let mut next = self.clone();
        for (name, value) in attrs {
            next.set(name, value)?;
        }
        if next.throughput_limit == ThroughputLimit::PerMessageGroupId
            && next.dedup_scope != DedupScope::MessageGroup
        {
            return Err(EngineError::InvalidAttributeValue(
                "Invalid value for the parameter FifoThroughputLimit. Reason: To set FifoThroughputLimit to perMessageGroupId, the DeduplicationScope must be messageGroup.".into(),
            ));
        }
        if next.kms_master_key_id.is_some() && next.sqs_managed_sse {
            let both_given = attrs
                .iter()
                .any(|(n, v)| n == "SqsManagedSseEnabled" && v == "true")
                && attrs
                    .iter()
                    .any(|(n, v)| n == "KmsMasterKeyId" && !v.is_empty());
            if both_given {
                return Err(EngineError::InvalidAttributeName(
                    "You can use one type of server-side encryption (SSE) at one time. You can either enable KMS SSE or SQS SSE.".into(),
                ));
            }
            // Setting a KMS key switches SQS-managed encryption off, as AWS does.
            next.sqs_managed_sse = false;
        }
        *self = next;
        Ok(())
    }

    fn set(&mut self, name: &str, value: &str) -> EngineResult<()> {
        if READ_ONLY.contains(&name) {
            return Err(EngineError::InvalidAttributeName(format!(
                "Unknown Attribute {name}."
            )));
        }
        if !self.fifo && FIFO_ONLY.contains(&name) {
            return Err(EngineError::InvalidAttributeName(match name {
                "DeduplicationScope" | "FifoThroughputLimit" => {
                    format!("You can specify the {name} only when FifoQueue is set to true.")
                }
                _ => format!("Unknown Attribute {name}."),
            }));
        }
        match name {
            "DelaySeconds" => self.delay_seconds = parse_range(name, value, 0, 900)?,
            "MaximumMessageSize" => {
                self.maximum_message_size = parse_range(name, value, 1024, 1_048_576)?
            }
            "MessageRetentionPeriod" => {
                self.retention_seconds = parse_range(name, value, 60, 1_209_600)?
            }
            "ReceiveMessageWaitTimeSeconds" => {
                self.receive_wait_seconds = parse_range(name, value, 0, 20)?
            }
            "VisibilityTimeout" => self.visibility_timeout = parse_range(name, value, 0, 43_200)?,
            "Policy" => {
                if value.is_empty() {
                    self.policy = None;
                } else {
                    serde_json::from_str::<Value>(value).map_err(|_| invalid_value(name))?;
                    self.policy = Some(value.to_string());
                }
            }
            "RedrivePolicy" => {
                self.redrive_policy = if value.is_empty() {
                    None
                } else {
                    Some(parse_redrive_policy(value)?)
                }
            }
            "RedriveAllowPolicy" => {
                self.redrive_allow_policy = if value.is_empty() {
                    None
                } else {
                    Some((parse_redrive_allow_policy(value)?, value.to_string()))
                }
            }
            "KmsMasterKeyId" => {
                self.kms_master_key_id = (!value.is_empty()).then(|| value.to_string())
            }
            "KmsDataKeyReusePeriodSeconds" => {
                let v = parse_range(name, value, 60, 86_400)?;
                self.kms_data_key_reuse_seconds = (v != 300).then_some(v);
            }
            "SqsManagedSseEnabled" => self.sqs_managed_sse = parse_bool(name, value)?,
            "FifoQueue" => {
                if !parse_bool(name, value)? {
                    return Err(EngineError::InvalidAttributeValue(
                        "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported.".into(),
                    ));
                }
            }
            "ContentBasedDeduplication" => self.content_based_dedup = parse_bool(name, value)?,
            "DeduplicationScope" => {
                let scope = match value {
                    "queue" => DedupScope::Queue,
                    "messageGroup" => DedupScope::MessageGroup,
                    _ => return Err(invalid_value(name)),
                };
                // A queue's dedup keeps the scope it was created with (AWS-observed); the
                // attribute reports the new value.
                self.dedup_scope = scope;
            }
            "FifoThroughputLimit" => {
                self.throughput_limit = match value {
                    "perQueue" => ThroughputLimit::PerQueue,
                    "perMessageGroupId" => ThroughputLimit::PerMessageGroupId,
                    _ => return Err(invalid_value(name)),
                }
            }
            _ => {
                return Err(EngineError::InvalidAttributeName(format!(
                    "Unknown Attribute {name}."
                )))
            }
        }
        Ok(())
    }

    /// The string value of a stored (non-computed) attribute, if it applies to this queue.
    pub fn attribute(&self, name: &str) -> Option<String> {
        Some(match name {
            "DelaySeconds" => self.delay_seconds.to_string(),
            "MaximumMessageSize" => self.maximum_message_size.to_string(),
            "MessageRetentionPeriod" => self.retention_seconds.to_string(),
            "ReceiveMessageWaitTimeSeconds" => self.receive_wait_seconds.to_string(),
            "VisibilityTimeout" => self.visibility_timeout.to_string(),
            "CreatedTimestamp" => self.created_at.seconds().to_string(),
            "LastModifiedTimestamp" => self.last_modified_at.seconds().to_string(),
            "Policy" => self.policy.clone()?,
            "RedrivePolicy" => self.redrive_policy.as_ref()?.to_json(),
            "RedriveAllowPolicy" => self.redrive_allow_policy.as_ref()?.1.clone(),
            "KmsMasterKeyId" => self.kms_master_key_id.clone()?,
            "KmsDataKeyReusePeriodSeconds" => self.kms_data_key_reuse_seconds?.to_string(),
            "SqsManagedSseEnabled" => self.sqs_managed_sse.to_string(),
            "FifoQueue" if self.fifo => "true".into(),
            "ContentBasedDeduplication" if self.fifo => self.content_based_dedup.to_string(),
            "DeduplicationScope" if self.fifo => match self.dedup_scope {
                DedupScope::Queue => "queue".into(),
                DedupScope::MessageGroup => "messageGroup".into(),
            },
            "FifoThroughputLimit" if self.fifo => match self.throughput_limit {
                ThroughputLimit::PerQueue => "perQueue".into(),
                ThroughputLimit::PerMessageGroupId => "perMessageGroupId".into(),
            },
            _ => return None,
        })
    }

    /// CreateQueue idempotency: the first supplied attribute whose value differs from ours.
    pub fn first_difference(
        &self,
        requested: &QueueConfig,
        attrs: &[(String, String)],
    ) -> Option<String> {
        attrs
            .iter()
            .map(|(name, _)| name)
            .find(|name| self.attribute(name) != requested.attribute(name))
            .cloned()
    }
}

/// The rules a redrive policy's dead-letter target must meet: it exists (`target` is its
/// configuration, `None` when there is no such queue; it may be the source itself), is of the
/// source's type, and its redrive allow policy lets `source_arn` in.
pub fn check_dead_letter_target(
    config: &QueueConfig,
    source_arn: &str,
    target: Option<&QueueConfig>,
) -> EngineResult<()> {
    let Some(policy) = &config.redrive_policy else {
        return Ok(());
    };
    let invalid = |reason: &str| {
        EngineError::invalid(format!(
            "Value {} for parameter RedrivePolicy is invalid. Reason: {reason}",
            policy.to_json()
        ))
    };
    let target = target.ok_or_else(|| invalid("Dead letter target does not exist."))?;
    if target.fifo != config.fifo {
        return Err(invalid(
            "Dead-letter queue must be same type of queue as the source..",
        ));
    }
    let allowed = match target.redrive_allow_policy.as_ref().map(|p| &p.0) {
        None | Some(RedrivePermission::AllowAll) => true,
        Some(RedrivePermission::DenyAll) => false,
        Some(RedrivePermission::ByQueue(arns)) => arns.iter().any(|arn| arn == source_arn),
    };
    if !allowed {
        return Err(invalid(
            "Queue is not allowed to use the dead letter queue.",
        ));
    }
    Ok(())
}

/// Queue names: 1-80 of `[A-Za-z0-9_-]`, plus the `.fifo` suffix for FIFO queues.
pub fn validate_queue_name(name: &str) -> EngineResult<()> {
    let stem = name.strip_suffix(".fifo").unwrap_or(name);
    let ok = !stem.is_empty()
        && name.len() <= 80
        && stem
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(EngineError::invalid(
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length",
        ))
    }
}

fn parse_redrive_policy(raw: &str) -> EngineResult<RedrivePolicy> {
    let invalid = |reason: &str| {
        EngineError::invalid(format!(
            "Value {raw} for parameter RedrivePolicy is invalid. Reason: {reason}"
        ))
    };
    let json: Value = serde_json::from_str(raw)
        .map_err(|_| invalid("Redrive policy is not a valid JSON map."))?;
    let target = json
        .get("deadLetterTargetArn")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            invalid("Redrive policy does not contain mandatory attribute: deadLetterTargetArn.")
        })?;
    let count = match json.get("maxReceiveCount") {
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(s)) => s.trim().parse::<i64>().ok(),
        None => {
            return Err(invalid(
                "Redrive policy does not contain mandatory attribute: maxReceiveCount.",
            ))
        }
        _ => None,
    };
    let count = count.ok_or_else(|| invalid("Invalid value for maxReceiveCount."))?;
    if !(1..=1000).contains(&count) {
        return Err(invalid(&format!(
            "Invalid value for maxReceiveCount: {count}, valid values are from 1 to 1000 both inclusive."
        )));
    }
    Ok(RedrivePolicy {
        dead_letter_target_arn: target.to_string(),
        max_receive_count: count as u32,
    })
}

fn parse_redrive_allow_policy(raw: &str) -> EngineResult<RedrivePermission> {
    let invalid = |reason: &str| {
        EngineError::invalid(format!(
            "Value {raw} for parameter RedriveAllowPolicy is invalid. Reason: {reason}"
        ))
    };
    let json: Value = serde_json::from_str(raw)
        .map_err(|_| invalid("Redrive allow policy is not a valid JSON map."))?;
    let permission = json
        .get("redrivePermission")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            invalid("Redrive allow policy does not contain mandatory attribute: redrivePermission.")
        })?;
    let sources = json.get("sourceQueueArns");
    match (permission, sources) {
        ("allowAll", None) => Ok(RedrivePermission::AllowAll),
        ("denyAll", None) => Ok(RedrivePermission::DenyAll),
        ("byQueue", Some(Value::Array(arns))) if !arns.is_empty() && arns.len() <= 10 => {
            let arns: Option<Vec<String>> =
                arns.iter().map(|a| a.as_str().map(String::from)).collect();
            arns.map(RedrivePermission::ByQueue)
                .ok_or_else(|| invalid("sourceQueueArns must be strings."))
        }
        ("byQueue", _) => Err(invalid(
            "When redrivePermission is byQueue, sourceQueueArns must list 1 to 10 queue ARNs.",
        )),
        ("allowAll" | "denyAll", Some(_)) => Err(invalid(
            "sourceQueueArns may only be given when redrivePermission is byQueue.",
        )),
        _ => Err(invalid(
            "redrivePermission must be one of allowAll, denyAll, byQueue.",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn defaults_and_fifo_rules() {
        let c = QueueConfig::for_create("q", &[], Timestamp(5000)).unwrap();
        assert_eq!(c.attribute("VisibilityTimeout").unwrap(), "30");
        assert_eq!(c.attribute("MaximumMessageSize").unwrap(), "1048576");
        assert_eq!(c.attribute("FifoQueue"), None);
        let f = QueueConfig::for_create("q.fifo", &attrs(&[("FifoQueue", "true")]), Timestamp(0))
            .unwrap();
        assert_eq!(f.attribute("DeduplicationScope").unwrap(), "queue");
        assert!(QueueConfig::for_create("q.fifo", &[], Timestamp(0)).is_err());
        assert!(
            QueueConfig::for_create("q", &attrs(&[("FifoQueue", "true")]), Timestamp(0)).is_err()
        );
        assert_eq!(
            QueueConfig::for_create("q", &attrs(&[("FifoQueue", "false")]), Timestamp(0))
                .unwrap_err(),
            EngineError::InvalidAttributeName("Unknown Attribute FifoQueue.".into())
        );
        assert!(matches!(
            QueueConfig::for_create("q", &attrs(&[("DeduplicationScope", "queue")]), Timestamp(0)),
            Err(EngineError::InvalidAttributeName(m)) if m.contains("only when FifoQueue")
        ));
    }

    #[test]
    fn ranges_are_enforced() {
        let bad = [
            ("VisibilityTimeout", "43201"),
            ("DelaySeconds", "901"),
            ("MessageRetentionPeriod", "59"),
            ("MaximumMessageSize", "1023"),
            ("ReceiveMessageWaitTimeSeconds", "21"),
            ("VisibilityTimeout", "abc"),
        ];
        for (n, v) in bad {
            let r = QueueConfig::for_create("q", &attrs(&[(n, v)]), Timestamp(0));
            assert_eq!(
                r.unwrap_err(),
                EngineError::InvalidAttributeValue(format!("Invalid value for the parameter {n}.")),
                "{n}={v}"
            );
        }
        assert!(QueueConfig::for_create("q", &attrs(&[("Bogus", "1")]), Timestamp(0)).is_err());
    }

    #[test]
    fn throughput_limit_needs_group_scope() {
        let r = QueueConfig::for_create(
            "q.fifo",
            &attrs(&[
                ("FifoQueue", "true"),
                ("FifoThroughputLimit", "perMessageGroupId"),
            ]),
            Timestamp(0),
        );
        assert!(
            matches!(r, Err(EngineError::InvalidAttributeValue(m)) if m.contains("DeduplicationScope must be messageGroup"))
        );
    }

    #[test]
    fn redrive_policy_accepts_string_count_and_normalises() {
        let c = QueueConfig::for_create(
            "q",
            &attrs(&[("RedrivePolicy", r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":"3"}"#)]),
            Timestamp(0),
        )
        .unwrap();
        assert_eq!(
            c.attribute("RedrivePolicy").unwrap(),
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":3}"#
        );
        let bad = QueueConfig::for_create(
            "q",
            &attrs(&[(
                "RedrivePolicy",
                r#"{"deadLetterTargetArn":"a","maxReceiveCount":0}"#,
            )]),
            Timestamp(0),
        );
        assert!(
            matches!(bad, Err(EngineError::InvalidParameterValue(m)) if m.contains("from 1 to 1000"))
        );
    }

    #[test]
    fn names() {
        assert!(validate_queue_name("a-b_c").is_ok());
        assert!(validate_queue_name(&"a".repeat(80)).is_ok());
        assert!(validate_queue_name(&"a".repeat(81)).is_err());
        assert!(validate_queue_name("a b").is_err());
        assert!(validate_queue_name(".fifo").is_err());
        // A FIFO queue's name is refused in FIFO words (recorded from AWS for one too long).
        let fifo = attrs(&[("FifoQueue", "true")]);
        for name in [format!("{}.fifo", "x".repeat(76)), "a b.fifo".into()] {
            let refused = QueueConfig::for_create(&name, &fifo, Timestamp(0));
            assert!(
                matches!(&refused, Err(EngineError::InvalidParameterValue(m)) if m.starts_with("The name of a FIFO queue")),
                "{name}: {refused:?}"
            );
        }
    }

    #[test]
    fn kms_key_turns_off_managed_sse() {
        let mut c = QueueConfig::new(false, Timestamp(0));
        c.apply(&attrs(&[("KmsMasterKeyId", "alias/aws/sqs")]))
            .unwrap();
        assert_eq!(c.attribute("SqsManagedSseEnabled").unwrap(), "false");
        let mut d = QueueConfig::new(false, Timestamp(0));
        assert!(d
            .apply(&attrs(&[
                ("KmsMasterKeyId", "k"),
                ("SqsManagedSseEnabled", "true")
            ]),)
            .is_err());
    }
}
