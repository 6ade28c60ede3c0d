//! HTTP/S delivery policies: the retry schedule (a pure function of the policy and the retry
//! number), throttling and the request content type, parsed from the topic's and the
//! subscription's `DeliveryPolicy` and merged into the effective policy AWS reports.
//!
//! AWS documents the four retry phases and that each backoff function runs from
//! `minDelayTarget` to `maxDelayTarget`, but publishes only a chart of the curves. Orderly's
//! curves over the backoff phase (t from 0 at its first retry to 1 at its last):
//! linear `t`, arithmetic `t²`, geometric `min·(max/min)^t` (a constant ratio between
//! delays), exponential `(2^(10t) − 1)/(2^10 − 1)` (flat, then steep). No jitter is added,
//! so schedules are reproducible.

use serde_json::{json, Value};

/// AWS's hard limit on the total retry time of an HTTP/S policy.
pub const MAX_TOTAL_RETRY_SECONDS: u64 = 3_600;
/// AWS's limit on `numRetries`.
pub const MAX_RETRIES: u32 = 100;
/// Content type of notification POSTs unless a request policy says otherwise.
pub const DEFAULT_CONTENT_TYPE: &str = "text/plain; charset=UTF-8";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackoffFunction {
    Linear,
    Arithmetic,
    Geometric,
    Exponential,
}

impl BackoffFunction {
    fn name(self) -> &'static str {
        match self {
            BackoffFunction::Linear => "linear",
            BackoffFunction::Arithmetic => "arithmetic",
            BackoffFunction::Geometric => "geometric",
            BackoffFunction::Exponential => "exponential",
        }
    }

    /// Where a retry sits between min (0) and max (1), for position `t` in [0, 1].
    fn curve(self, t: f64, min: f64, max: f64) -> f64 {
        match self {
            BackoffFunction::Linear => min + (max - min) * t,
            BackoffFunction::Arithmetic => min + (max - min) * t * t,
            BackoffFunction::Geometric => min * (max / min).powf(t),
            BackoffFunction::Exponential => {
                min + (max - min) * (2f64.powf(10.0 * t) - 1.0) / 1023.0
            }
        }
    }
}

/// `healthyRetryPolicy`: delays in whole seconds, counts of retries per phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    pub min_delay: u32,
    pub max_delay: u32,
    /// Total retries across all phases (the first attempt is not a retry).
    pub num_retries: u32,
    pub num_no_delay: u32,
    pub num_min_delay: u32,
    pub num_max_delay: u32,
    pub backoff: BackoffFunction,
}

impl Default for RetryPolicy {
    /// AWS's default for HTTP/S: three retries, 20 seconds apart.
    fn default() -> Self {
        RetryPolicy {
            min_delay: 20,
            max_delay: 20,
            num_retries: 3,
            num_no_delay: 0,
            num_min_delay: 0,
            num_max_delay: 0,
            backoff: BackoffFunction::Linear,
        }
    }
}

impl RetryPolicy {
    fn backoff_retries(&self) -> u32 {
        self.num_retries
            .saturating_sub(self.num_no_delay)
            .saturating_sub(self.num_min_delay)
            .saturating_sub(self.num_max_delay)
    }

    /// Milliseconds to wait before retry number `retry` (1 is the first retry after the
    /// first attempt failed); `None` once the policy is exhausted.
    pub fn delay_before(&self, retry: u32) -> Option<u64> {
        if retry == 0 || retry > self.num_retries {
            return None;
        }
        let (min, max) = (self.min_delay as u64 * 1000, self.max_delay as u64 * 1000);
        let mut i = retry;
        if i <= self.num_no_delay {
            return Some(0);
        }
        i -= self.num_no_delay;
        if i <= self.num_min_delay {
            return Some(min);
        }
        i -= self.num_min_delay;
        let n = self.backoff_retries();
        if i <= n {
            let t = if n == 1 {
                1.0
            } else {
                (i - 1) as f64 / (n - 1) as f64
            };
            let delay = self.backoff.curve(t, min as f64, max as f64).round() as u64;
            return Some(delay.clamp(min, max));
        }
        Some(max)
    }

    /// Seconds from the first failure to the last retry.
    pub fn total_seconds(&self) -> u64 {
        (1..=self.num_retries)
            .filter_map(|r| self.delay_before(r))
            .sum::<u64>()
            / 1000
    }

    /// Reads a retry policy object; absent fields take AWS's defaults.
    fn parse(value: &Value, path: &str) -> Result<RetryPolicy, String> {
        let object = value
            .as_object()
            .ok_or_else(|| format!("{path} must be an object"))?;
        let default = RetryPolicy::default();
        let number = |key: &str, fallback: u32| -> Result<u32, String> {
            match object.get(key) {
                None | Some(Value::Null) => Ok(fallback),
                Some(v) => v
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| format!("{path}.{key} must be a non-negative integer")),
            }
        };
        let backoff = match object.get("backoffFunction") {
            None | Some(Value::Null) => BackoffFunction::Linear,
            Some(v) => match v.as_str().map(str::to_ascii_lowercase).as_deref() {
                Some("linear") => BackoffFunction::Linear,
                Some("arithmetic") => BackoffFunction::Arithmetic,
                Some("geometric") => BackoffFunction::Geometric,
                Some("exponential") => BackoffFunction::Exponential,
                _ => return Err(format!("{path}.backoffFunction must be one of linear, arithmetic, geometric, exponential")),
            },
        };
        let policy = RetryPolicy {
            min_delay: number("minDelayTarget", default.min_delay)?,
            max_delay: number("maxDelayTarget", default.max_delay)?,
            num_retries: number("numRetries", default.num_retries)?,
            num_no_delay: number("numNoDelayRetries", 0)?,
            num_min_delay: number("numMinDelayRetries", 0)?,
            num_max_delay: number("numMaxDelayRetries", 0)?,
            backoff,
        };
        policy.validate(path)?;
        Ok(policy)
    }

    fn validate(&self, path: &str) -> Result<(), String> {
        if self.min_delay < 1 {
            return Err(format!("{path}.minDelayTarget must be at least 1"));
        }
        if self.min_delay > self.max_delay {
            return Err(format!(
                "{path}.minDelayTarget must be less than or equal to maxDelayTarget"
            ));
        }
        if self.max_delay as u64 > MAX_TOTAL_RETRY_SECONDS {
            return Err(format!(
                "{path}.maxDelayTarget must be at most {MAX_TOTAL_RETRY_SECONDS}"
            ));
        }
        if self.num_retries > MAX_RETRIES {
            return Err(format!("{path}.numRetries must be at most {MAX_RETRIES}"));
        }
        let phases =
            self.num_no_delay as u64 + self.num_min_delay as u64 + self.num_max_delay as u64;
        if phases > self.num_retries as u64 {
            return Err(format!(
                "{path}: numNoDelayRetries + numMinDelayRetries + numMaxDelayRetries must not exceed numRetries"
            ));
        }
        if self.total_seconds() > MAX_TOTAL_RETRY_SECONDS {
            return Err(format!(
                "{path}: total retry time must not exceed {MAX_TOTAL_RETRY_SECONDS} seconds"
            ));
        }
        Ok(())
    }

    pub fn to_json(self) -> Value {
        json!({
            "minDelayTarget": self.min_delay,
            "maxDelayTarget": self.max_delay,
            "numRetries": self.num_retries,
            "numMaxDelayRetries": self.num_max_delay,
            "numNoDelayRetries": self.num_no_delay,
            "numMinDelayRetries": self.num_min_delay,
            "backoffFunction": self.backoff.name(),
        })
    }
}

fn parse_throttle(value: &Value, path: &str) -> Result<Option<u32>, String> {
    if value.is_null() {
        return Ok(None);
    }
    match value.get("maxReceivesPerSecond") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| *n >= 1)
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| format!("{path}.maxReceivesPerSecond must be a positive integer")),
    }
}

fn parse_content_type(value: &Value, path: &str) -> Result<Option<String>, String> {
    if value.is_null() {
        return Ok(None);
    }
    match value.get("headerContentType") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if is_media_type(s) => Ok(Some(s.clone())),
        Some(_) => Err(format!(
            "{path}.headerContentType must be a media type such as application/json"
        )),
    }
}

/// `type/subtype`, optionally with parameters (`text/plain; charset=UTF-8`).
fn is_media_type(s: &str) -> bool {
    let essence = s.split(';').next().unwrap_or("").trim();
    let mut parts = essence.split('/');
    let token = |p: Option<&str>| {
        p.is_some_and(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "!#$&-^_.+".contains(c))
        })
    };
    token(parts.next()) && token(parts.next()) && parts.next().is_none() && s.len() <= 256
}

fn parse_json(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("failed to parse JSON. {e}"))
}

/// A topic's `DeliveryPolicy` (its `http` section).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopicPolicy {
    pub retry: Option<RetryPolicy>,
    pub disable_overrides: bool,
    pub throttle: Option<u32>,
    pub content_type: Option<String>,
}

impl TopicPolicy {
    pub fn parse(text: &str) -> Result<TopicPolicy, String> {
        let json = parse_json(text)?;
        if !json.is_object() {
            return Err("the policy must be a JSON object".into());
        }
        let Some(http) = json.get("http").filter(|v| !v.is_null()) else {
            return Ok(TopicPolicy::default());
        };
        let retry = match http.get("defaultHealthyRetryPolicy") {
            None | Some(Value::Null) => None,
            Some(v) => Some(RetryPolicy::parse(v, "http.defaultHealthyRetryPolicy")?),
        };
        let disable_overrides = match http.get("disableSubscriptionOverrides") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("http.disableSubscriptionOverrides must be true or false".into()),
        };
        Ok(TopicPolicy {
            retry,
            disable_overrides,
            throttle: parse_throttle(
                http.get("defaultThrottlePolicy").unwrap_or(&Value::Null),
                "http.defaultThrottlePolicy",
            )?,
            content_type: parse_content_type(
                http.get("defaultRequestPolicy").unwrap_or(&Value::Null),
                "http.defaultRequestPolicy",
            )?,
        })
    }

    /// The topic's `EffectiveDeliveryPolicy`: defaults completed.
    pub fn effective_json(&self) -> String {
        let mut http = serde_json::Map::new();
        http.insert(
            "defaultHealthyRetryPolicy".into(),
            self.retry.unwrap_or_default().to_json(),
        );
        http.insert(
            "disableSubscriptionOverrides".into(),
            self.disable_overrides.into(),
        );
        if let Some(rate) = self.throttle {
            http.insert(
                "defaultThrottlePolicy".into(),
                json!({"maxReceivesPerSecond": rate}),
            );
        }
        http.insert(
            "defaultRequestPolicy".into(),
            json!({"headerContentType": self.content_type.as_deref().unwrap_or(DEFAULT_CONTENT_TYPE)}),
        );
        json!({ "http": http }).to_string()
    }
}

/// A subscription's `DeliveryPolicy`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubscriptionPolicy {
    pub retry: Option<RetryPolicy>,
    pub throttle: Option<u32>,
    pub content_type: Option<String>,
}

impl SubscriptionPolicy {
    pub fn parse(text: &str) -> Result<SubscriptionPolicy, String> {
        let json = parse_json(text)?;
        if !json.is_object() {
            return Err("the policy must be a JSON object".into());
        }
        let retry = match json.get("healthyRetryPolicy") {
            None | Some(Value::Null) => None,
            // AWS asks a subscription's retry policy for its shortest delay (recorded answer).
            Some(v) if v.get("minDelayTarget").is_none_or(Value::is_null) => {
                return Err("healthyRetryPolicy.minDelayTarget must be specified".into())
            }
            Some(v) => Some(RetryPolicy::parse(v, "healthyRetryPolicy")?),
        };
        Ok(SubscriptionPolicy {
            retry,
            throttle: parse_throttle(
                json.get("throttlePolicy").unwrap_or(&Value::Null),
                "throttlePolicy",
            )?,
            content_type: parse_content_type(
                json.get("requestPolicy").unwrap_or(&Value::Null),
                "requestPolicy",
            )?,
        })
    }

    /// The policy as AWS echoes it back: every section named, unset ones null.
    pub fn to_json(&self) -> String {
        json!({
            "healthyRetryPolicy": self.retry.map(RetryPolicy::to_json),
            "sicklyRetryPolicy": null,
            "throttlePolicy": self.throttle.map(|r| json!({"maxReceivesPerSecond": r})),
            "requestPolicy": self.content_type.as_ref().map(|c| json!({"headerContentType": c})),
            "guaranteed": false,
        })
        .to_string()
    }
}

/// What delivery to one subscription follows: the subscription's policy over the topic's
/// (unless the topic disables overrides), over AWS's defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EffectivePolicy {
    pub retry: RetryPolicy,
    pub throttle: Option<u32>,
    pub content_type: Option<String>,
}

impl EffectivePolicy {
    pub fn merge(topic: Option<&TopicPolicy>, subscription: Option<&SubscriptionPolicy>) -> Self {
        let default = TopicPolicy::default();
        let topic = topic.unwrap_or(&default);
        let subscription = subscription.filter(|_| !topic.disable_overrides);
        EffectivePolicy {
            retry: subscription
                .and_then(|s| s.retry)
                .or(topic.retry)
                .unwrap_or_default(),
            throttle: subscription.and_then(|s| s.throttle).or(topic.throttle),
            content_type: subscription
                .and_then(|s| s.content_type.clone())
                .or_else(|| topic.content_type.clone()),
        }
    }

    /// The Content-Type of notification POSTs.
    pub fn content_type(&self) -> &str {
        self.content_type.as_deref().unwrap_or(DEFAULT_CONTENT_TYPE)
    }

    /// A subscription's `EffectiveDeliveryPolicy`.
    pub fn to_json(&self) -> String {
        SubscriptionPolicy {
            retry: Some(self.retry),
            throttle: self.throttle,
            content_type: self.content_type.clone(),
        }
        .to_json()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(policy: &RetryPolicy) -> Vec<u64> {
        (1..=policy.num_retries + 1)
            .map_while(|r| policy.delay_before(r))
            .map(|ms| ms / 1000)
            .collect()
    }

    #[test]
    fn default_is_three_retries_twenty_seconds_apart() {
        assert_eq!(schedule(&RetryPolicy::default()), vec![20, 20, 20]);
        assert_eq!(RetryPolicy::default().delay_before(4), None);
        assert_eq!(RetryPolicy::default().delay_before(0), None);
    }

    #[test]
    fn linear_backoff_runs_from_min_to_max() {
        let policy = RetryPolicy {
            min_delay: 20,
            max_delay: 40,
            num_retries: 3,
            ..RetryPolicy::default()
        };
        assert_eq!(schedule(&policy), vec![20, 30, 40]);
    }

    #[test]
    fn phases_come_in_order() {
        let policy = RetryPolicy {
            min_delay: 1,
            max_delay: 10,
            num_retries: 9,
            num_no_delay: 2,
            num_min_delay: 2,
            num_max_delay: 2,
            backoff: BackoffFunction::Linear,
        };
        let delays: Vec<u64> = (1..=9).map(|r| policy.delay_before(r).unwrap()).collect();
        assert_eq!(
            delays,
            vec![0, 0, 1000, 1000, 1000, 5500, 10000, 10000, 10000]
        );
        assert_eq!(policy.delay_before(10), None);
    }

    #[test]
    fn every_curve_is_monotonic_between_min_and_max() {
        for backoff in [
            BackoffFunction::Linear,
            BackoffFunction::Arithmetic,
            BackoffFunction::Geometric,
            BackoffFunction::Exponential,
        ] {
            let policy = RetryPolicy {
                min_delay: 2,
                max_delay: 300,
                num_retries: 8,
                backoff,
                ..RetryPolicy::default()
            };
            let delays: Vec<u64> = (1..=8).map(|r| policy.delay_before(r).unwrap()).collect();
            assert_eq!(delays[0], 2000, "{backoff:?}");
            assert_eq!(delays[7], 300_000, "{backoff:?}");
            assert!(
                delays.windows(2).all(|w| w[0] <= w[1]),
                "{backoff:?}: {delays:?}"
            );
        }
        // Steeper functions stay lower in the middle of the phase.
        let middle = |backoff| {
            RetryPolicy {
                min_delay: 2,
                max_delay: 300,
                num_retries: 8,
                backoff,
                ..RetryPolicy::default()
            }
            .delay_before(4)
            .unwrap()
        };
        assert!(middle(BackoffFunction::Linear) > middle(BackoffFunction::Arithmetic));
        assert!(middle(BackoffFunction::Arithmetic) > middle(BackoffFunction::Geometric));
        assert!(middle(BackoffFunction::Geometric) > middle(BackoffFunction::Exponential));
    }

    #[test]
    fn partial_policies_are_completed_and_limits_enforced() {
        let topic = TopicPolicy::parse(
            r#"{"http":{"defaultHealthyRetryPolicy":{"minDelayTarget":5,"maxDelayTarget":6,"numRetries":1}}}"#,
        )
        .unwrap();
        assert_eq!(
            topic.effective_json(),
            r#"{"http":{"defaultHealthyRetryPolicy":{"minDelayTarget":5,"maxDelayTarget":6,"numRetries":1,"numMaxDelayRetries":0,"numNoDelayRetries":0,"numMinDelayRetries":0,"backoffFunction":"linear"},"disableSubscriptionOverrides":false,"defaultRequestPolicy":{"headerContentType":"text/plain; charset=UTF-8"}}}"#
        );
        for bad in [
            r#"{"healthyRetryPolicy":{"minDelayTarget":0}}"#,
            r#"{"healthyRetryPolicy":{"minDelayTarget":30,"maxDelayTarget":20}}"#,
            r#"{"healthyRetryPolicy":{"numRetries":101,"minDelayTarget":1,"maxDelayTarget":1}}"#,
            r#"{"healthyRetryPolicy":{"minDelayTarget":1,"numRetries":2,"numNoDelayRetries":3}}"#,
            r#"{"healthyRetryPolicy":{"minDelayTarget":3600,"maxDelayTarget":3600,"numRetries":2}}"#,
            r#"{"healthyRetryPolicy":{"minDelayTarget":1,"backoffFunction":"cubic"}}"#,
            r#"{"throttlePolicy":{"maxReceivesPerSecond":0}}"#,
            r#"{"requestPolicy":{"headerContentType":"not a type"}}"#,
            r#"[]"#,
            r#"{"#,
        ] {
            assert!(SubscriptionPolicy::parse(bad).is_err(), "{bad}");
        }
        for without_min in [
            r#"{"healthyRetryPolicy":{"numRetries":5}}"#,
            r#"{"healthyRetryPolicy":{}}"#,
        ] {
            assert_eq!(
                SubscriptionPolicy::parse(without_min).err().as_deref(),
                Some("healthyRetryPolicy.minDelayTarget must be specified"),
                "{without_min}"
            );
        }
    }

    #[test]
    fn subscription_overrides_topic_unless_disabled() {
        let sub = SubscriptionPolicy::parse(
            r#"{"healthyRetryPolicy":{"minDelayTarget":1,"maxDelayTarget":2,"numRetries":2},"requestPolicy":{"headerContentType":"application/json"}}"#,
        )
        .unwrap();
        assert_eq!(
            sub.to_json(),
            r#"{"healthyRetryPolicy":{"minDelayTarget":1,"maxDelayTarget":2,"numRetries":2,"numMaxDelayRetries":0,"numNoDelayRetries":0,"numMinDelayRetries":0,"backoffFunction":"linear"},"sicklyRetryPolicy":null,"throttlePolicy":null,"requestPolicy":{"headerContentType":"application/json"},"guaranteed":false}"#
        );
        let mut topic = TopicPolicy::parse(
            r#"{"http":{"defaultHealthyRetryPolicy":{"minDelayTarget":9,"maxDelayTarget":9,"numRetries":1},"defaultThrottlePolicy":{"maxReceivesPerSecond":5}}}"#,
        )
        .unwrap();
        let effective = EffectivePolicy::merge(Some(&topic), Some(&sub));
        assert_eq!(effective.retry.num_retries, 2);
        assert_eq!(effective.throttle, Some(5));
        assert_eq!(effective.content_type(), "application/json");
        topic.disable_overrides = true;
        let effective = EffectivePolicy::merge(Some(&topic), Some(&sub));
        assert_eq!(effective.retry.min_delay, 9);
        assert_eq!(effective.content_type(), DEFAULT_CONTENT_TYPE);
        assert_eq!(
            EffectivePolicy::merge(None, None).retry,
            RetryPolicy::default()
        );
    }
}
