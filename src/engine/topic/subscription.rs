//! A subscription of a topic: its endpoint and protocol, settable attributes (raw delivery,
//! filter policy and scope, delivery, redrive and replay policies), confirmation state, and
//! which copies of a publish it takes; who subscribes (`Subscriber`) and what Subscribe did
//! (`Subscribed`).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::captured_message::CapturedMessage;
use super::{archive, EndpointKind, FilterPolicy, Scope, SubscriptionProtocol};
use crate::engine::check_xml_text;
use crate::engine::error::invalid_parameter as invalid;
use crate::engine::error::EngineResult;
use crate::engine::message::MessageAttributes;
use crate::engine::topic::delivery_policy::SubscriptionPolicy;

/// Who subscribes: the account that owns the subscription, and the principal that asked
/// (`SubscriptionPrincipal`; `None` reports the owner's root).
#[derive(Clone, Copy)]
pub struct Subscriber<'a> {
    pub owner: &'a str,
    pub principal: Option<&'a str>,
}

/// What Subscribe did.
#[derive(Debug)]
pub struct Subscribed {
    pub arn: Arc<str>,
    pub protocol: SubscriptionProtocol,
    /// HTTP/S and email: waiting for the endpoint to confirm.
    pub pending: bool,
    /// An email endpoint's SubscriptionConfirmation, for the caller to record (nothing is
    /// sent; see `captured`).
    pub confirmation: Option<Box<CapturedMessage>>,
}

#[derive(Clone, Debug)]
pub struct Subscription {
    pub arn: Arc<str>,
    pub protocol: SubscriptionProtocol,
    /// For `sqs`, the queue ARN.
    pub endpoint: String,
    pub owner: String,
    pub raw_delivery: bool,
    /// Other attributes as set (FilterPolicy's text, DeliveryPolicy, RedrivePolicy, ...).
    pub attributes: BTreeMap<String, String>,
    /// The compiled FilterPolicy, so fan-out never parses it.
    pub filter: Option<Arc<FilterPolicy>>,
    pub filter_scope: Scope,
    /// The topic's type decides which dead-letter queues are allowed.
    pub fifo_topic: bool,
    /// The last replay asked for, with its status.
    pub replay: Option<archive::Replay>,
    /// False once a replay with an EndingPoint completed: no more live messages (AWS's model).
    pub live: bool,
    /// HTTP/S subscriptions wait for confirmation; nothing is delivered to them until then.
    pub pending: bool,
    /// Confirmed by a signed call (SQS subscriptions: by their owner, at once).
    pub confirmation_authenticated: bool,
    /// ConfirmSubscription's AuthenticateOnUnsubscribe: only signed calls may unsubscribe.
    pub authenticate_on_unsubscribe: bool,
    /// The parsed `DeliveryPolicy` of an HTTP/S subscription.
    pub delivery_policy: Option<SubscriptionPolicy>,
    /// What became of the last messages published to it (not persisted).
    pub recent: super::recent::Recent,
    /// `SubscriptionPrincipal`: the ARN of whoever subscribed; `None` for subscriptions made
    /// before it was kept (reported as the owner account's root).
    pub principal: Option<Arc<str>>,
}

impl Subscription {
    pub fn new(arn: Arc<str>, protocol: SubscriptionProtocol, endpoint: &str, owner: &str) -> Self {
        let fifo_topic = arn
            .split(':')
            .nth(5)
            .is_some_and(|topic| topic.ends_with(".fifo"));
        Subscription {
            arn,
            protocol,
            endpoint: endpoint.to_string(),
            owner: owner.to_string(),
            raw_delivery: false,
            attributes: BTreeMap::new(),
            filter: None,
            filter_scope: Scope::MessageAttributes,
            fifo_topic,
            replay: None,
            live: true,
            pending: false,
            confirmation_authenticated: true,
            authenticate_on_unsubscribe: false,
            delivery_policy: None,
            recent: Default::default(),
            principal: None,
        }
    }

    /// HTTP or HTTPS: delivered by POST, confirmed by the endpoint.
    /// `SubscriptionPrincipal` as GetSubscriptionAttributes reports it.
    pub fn principal(&self) -> String {
        match &self.principal {
            Some(principal) => principal.to_string(),
            None => format!("arn:aws:iam::{}:root", self.owner),
        }
    }

    pub fn is_webhook(&self) -> bool {
        self.protocol.kind() == EndpointKind::Webhook
    }

    /// The queue ARN of the subscription's dead-letter queue, if it has a redrive policy.
    pub fn dead_letter_arn(&self) -> Option<&str> {
        let policy = self.attributes.get("RedrivePolicy")?;
        let start = policy.find("arn:aws:sqs:")?;
        policy[start..].split('"').next()
    }

    /// Subscribe's attributes: the scope first, so the policy is parsed for the right scope.
    pub fn apply_all(&mut self, attrs: &[(String, String)]) -> EngineResult<()> {
        let (scope, rest): (Vec<_>, Vec<_>) =
            attrs.iter().partition(|(n, _)| n == "FilterPolicyScope");
        for (name, value) in scope.into_iter().chain(rest) {
            self.set(name, value, "Attributes Reason: ")?;
        }
        Ok(())
    }

    /// Subscribe again to the same endpoint: allowed (same ARN) when every attribute given
    /// equals what is stored, AWS's idempotency rule.
    pub fn check_resubscribe(&self, attrs: &[(String, String)]) -> EngineResult<()> {
        let mut candidate = self.clone();
        candidate.apply_all(attrs)?;
        if candidate.raw_delivery != self.raw_delivery || candidate.attributes != self.attributes {
            return Err(invalid("Invalid parameter: Attributes Reason: Subscription already exists with different attributes"));
        }
        Ok(())
    }

    /// Does a message pass this subscription's filter? `body` yields the parsed text the
    /// subscription would receive (parsed once per message, only if a body-scope filter asks).
    pub fn accepts<'a>(
        &self,
        attributes: &MessageAttributes,
        body: &dyn Fn() -> Option<&'a serde_json::Value>,
    ) -> bool {
        self.filter
            .as_ref()
            .is_none_or(|f| f.matches_parsed(attributes, body))
    }

    /// Applies one attribute; `prefix` is "Attributes Reason: " for Subscribe, "" for Set.
    pub fn set(&mut self, name: &str, value: &str, prefix: &str) -> EngineResult<()> {
        check_xml_text(value).map_err(|_| invalid(format!("Invalid parameter: {prefix}{name}")))?;
        match name {
            "RawMessageDelivery" if !self.protocol.delivers_raw() => {
                return Err(invalid(format!(
                    "Invalid parameter: {prefix}Delivery protocol [{}] does not support raw message delivery.",
                    self.protocol.name()
                )))
            }
            "RawMessageDelivery" => {
                self.raw_delivery = match value.to_ascii_lowercase().as_str() {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return Err(invalid(format!(
                            "Invalid parameter: {prefix}RawMessageDelivery: Invalid value [{value}]. Must be true or false."
                        )))
                    }
                }
            }
            "FilterPolicy" if value.is_empty() => {
                self.filter = None;
                self.attributes.remove(name);
            }
            "FilterPolicy" => {
                let policy = FilterPolicy::parse(value, self.filter_scope)
                    .map_err(|e| invalid(format!("Invalid parameter: {prefix}{e}")))?;
                self.filter = Some(Arc::new(policy));
                self.attributes.insert(name.to_string(), value.to_string());
            }
            "FilterPolicyScope" => {
                self.filter_scope = match value {
                    "MessageAttributes" => Scope::MessageAttributes,
                    "MessageBody" => Scope::MessageBody,
                    _ => {
                        return Err(invalid(format!(
                            "Invalid parameter: {prefix}FilterPolicyScope: Invalid value [{value}]. Please use either MessageBody or MessageAttributes"
                        )))
                    }
                };
                // The current policy must still make sense in the new scope.
                if let Some(text) = self.attributes.get("FilterPolicy") {
                    let policy = FilterPolicy::parse(text, self.filter_scope)
                        .map_err(|e| invalid(format!("Invalid parameter: {prefix}{e}")))?;
                    self.filter = Some(Arc::new(policy));
                }
            }
            "ReplayPolicy" => {
                if !self.fifo_topic {
                    return Err(invalid(format!("Invalid parameter: {prefix}ReplayPolicy: replay is only supported for FIFO topics")));
                }
                let replay = archive::parse_replay_policy(value)
                    .map_err(|e| invalid(format!("Invalid parameter: {prefix}ReplayPolicy: {e}")))?;
                self.replay = Some(replay);
                self.live = true;
                self.attributes.insert(name.to_string(), value.to_string());
            }
            "RedrivePolicy" if !value.is_empty() => {
                let json: serde_json::Value = serde_json::from_str(value).map_err(|e| {
                    invalid(format!("Invalid parameter: {prefix}RedrivePolicy: failed to parse JSON. {e}"))
                })?;
                // AWS names the first key it does not know (recorded answer).
                if let Some(unknown) = json
                    .as_object()
                    .and_then(|fields| fields.keys().find(|k| *k != "deadLetterTargetArn"))
                {
                    return Err(invalid(format!(
                        "Invalid parameter: {prefix}RedrivePolicy: invalid JSON. Attribute {unknown} is unknown."
                    )));
                }
                let target = json.get("deadLetterTargetArn").and_then(|v| v.as_str()).unwrap_or("");
                let parts: Vec<&str> = target.split(':').collect();
                if parts.len() != 6 || parts[0] != "arn" || parts[2] != "sqs" || parts[5].is_empty() {
                    return Err(invalid(format!(
                        "Invalid parameter: {prefix}RedrivePolicy: deadLetterTargetArn is an invalid arn"
                    )));
                }
                let fifo_endpoint = self.endpoint.ends_with(".fifo");
                if self.fifo_topic && fifo_endpoint && !parts[5].ends_with(".fifo") {
                    return Err(invalid(format!(
                        "Invalid parameter: {prefix}RedrivePolicy: must use a FIFO queue as DLQ for a FIFO Subscription to a FIFO Topic."
                    )));
                }
                // Stored in a normal form so dead_letter_arn can read it back.
                let normal = serde_json::json!({"deadLetterTargetArn": target}).to_string();
                self.attributes.insert(name.to_string(), normal);
            }
            "DeliveryPolicy" if self.is_webhook() => {
                if value.is_empty() {
                    self.delivery_policy = None;
                    self.attributes.remove(name);
                } else {
                    let policy = SubscriptionPolicy::parse(value).map_err(|e| {
                        invalid(format!("Invalid parameter: {prefix}DeliveryPolicy: {e}"))
                    })?;
                    // Echoed back normalised, as AWS does.
                    self.attributes.insert(name.to_string(), policy.to_json());
                    self.delivery_policy = Some(policy);
                }
            }
            "DeliveryPolicy" | "RedrivePolicy" | "SubscriptionRoleArn" => {
                if value.is_empty() {
                    self.attributes.remove(name);
                } else {
                    if name != "SubscriptionRoleArn" {
                        serde_json::from_str::<serde_json::Value>(value).map_err(|e| {
                            invalid(format!("Invalid parameter: {prefix}{name}: failed to parse JSON. {e}"))
                        })?;
                    }
                    self.attributes.insert(name.to_string(), value.to_string());
                }
            }
            _ => return Err(invalid("Invalid parameter: AttributeName")),
        }
        Ok(())
    }

    /// The value of one settable attribute, as Get returns it.
    pub(super) fn attribute(&self, name: &str) -> Option<String> {
        match name {
            "RawMessageDelivery" => Some(self.raw_delivery.to_string()),
            other => self.attributes.get(other).cloned(),
        }
    }
}
