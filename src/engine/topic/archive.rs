//! Message archiving and replay for FIFO topics: `ArchivePolicy` keeps published messages for a
//! number of days; a subscription's `ReplayPolicy` asks for a time window of them again. Pure.

use std::collections::VecDeque;

use serde_json::Value;

use super::{Publication, PublishRequest};
use crate::engine::time::Timestamp;

const DAY_MS: u64 = 86_400_000;

/// One archived publish.
#[derive(Clone, Debug)]
pub struct Archived {
    pub publication: Publication,
    pub request: PublishRequest,
    pub published_at: Timestamp,
}

#[derive(Debug)]
pub struct Archive {
    pub retention_days: u64,
    /// When archiving was switched on: nothing older can be replayed.
    pub since: Timestamp,
    /// In publish (and sequence) order, so expiry pops from the front.
    messages: VecDeque<Archived>,
}

impl Archive {
    pub fn new(retention_days: u64, now: Timestamp) -> Self {
        Archive {
            retention_days,
            since: now,
            messages: VecDeque::new(),
        }
    }

    pub fn push(&mut self, archived: Archived) {
        self.expire(archived.published_at);
        self.messages.push_back(archived);
    }

    fn expire(&mut self, now: Timestamp) {
        let keep_from = Timestamp(now.0.saturating_sub(self.retention_days * DAY_MS));
        while self
            .messages
            .front()
            .is_some_and(|m| m.published_at < keep_from)
        {
            self.messages.pop_front();
        }
    }

    /// The earliest point a replay may start from.
    pub fn beginning(&self, now: Timestamp) -> Timestamp {
        self.since.max(Timestamp(
            now.0.saturating_sub(self.retention_days * DAY_MS),
        ))
    }

    pub fn clear(&mut self) {
        self.messages.clear();
    }

    /// Every archived message, oldest first (for snapshots).
    pub fn all(&self) -> impl Iterator<Item = &Archived> {
        self.messages.iter()
    }

    /// Archived messages published in `[start, end]`, oldest first.
    pub fn window(
        &self,
        start: Timestamp,
        end: Option<Timestamp>,
    ) -> impl Iterator<Item = &Archived> {
        self.messages
            .iter()
            .filter(move |m| m.published_at >= start && end.is_none_or(|e| m.published_at <= e))
    }
}

/// `{"MessageRetentionPeriod":"30"}` (days, 1-365, string or number); `{}` means off.
pub fn parse_archive_policy(value: &str) -> Result<Option<u64>, String> {
    let json: Value =
        serde_json::from_str(value).map_err(|e| format!("failed to parse JSON. {e}"))?;
    let Value::Object(map) = json else {
        return Err("must be a JSON object".into());
    };
    let Some(period) = map.get("MessageRetentionPeriod") else {
        return if map.is_empty() {
            Ok(None)
        } else {
            Err("MessageRetentionPeriod is required".into())
        };
    };
    let days = match period {
        Value::String(s) => s.trim().parse::<u64>().ok(),
        Value::Number(n) => n.as_u64(),
        _ => None,
    };
    match days {
        Some(d) if (1..=365).contains(&d) => Ok(Some(d)),
        _ => Err("MessageRetentionPeriod must be between 1 and 365 days".into()),
    }
}

/// A parsed `ReplayPolicy`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replay {
    pub start: Timestamp,
    pub end: Option<Timestamp>,
    /// `Pending`, `In progress`, `Completed` or `Failed`.
    pub status: &'static str,
}

/// `{"PointType":"Timestamp","StartingPoint":"<ISO>","EndingPoint":"<ISO>"}`.
pub fn parse_replay_policy(value: &str) -> Result<Replay, String> {
    let json: Value =
        serde_json::from_str(value).map_err(|e| format!("failed to parse JSON. {e}"))?;
    if json.get("PointType").and_then(Value::as_str) != Some("Timestamp") {
        return Err("PointType must be Timestamp".into());
    }
    let point = |key: &str| -> Result<Option<Timestamp>, String> {
        match json.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .and_then(Timestamp::parse_iso8601)
                .map(Some)
                .ok_or_else(|| format!("{key} must be an ISO-8601 UTC timestamp")),
        }
    };
    let start = point("StartingPoint")?.ok_or("StartingPoint is required")?;
    let end = point("EndingPoint")?;
    if end.is_some_and(|e| e <= start) {
        return Err("EndingPoint must be after StartingPoint".into());
    }
    Ok(Replay {
        start,
        end,
        status: "Pending",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::message::MessageAttributes;

    fn archived(at: u64) -> Archived {
        Archived {
            publication: Publication {
                message_id: "m".into(),
                sequence_number: Some(1),
                dedup_id: None,
                duplicate: false,
            },
            request: PublishRequest {
                message: "x".into(),
                subject: None,
                structured: false,
                attributes: MessageAttributes::default(),
                group_id: Some("g".into()),
                dedup_id: None,
                trace_header: None,
            },
            published_at: Timestamp(at),
        }
    }

    #[test]
    fn retention_and_windows() {
        let mut a = Archive::new(1, Timestamp(1_000));
        a.push(archived(1_000));
        a.push(archived(2_000));
        assert_eq!(a.window(Timestamp(1_500), None).count(), 1);
        assert_eq!(a.window(Timestamp(0), Some(Timestamp(1_000))).count(), 1);
        a.push(archived(1_000 + DAY_MS + 1));
        assert_eq!(a.window(Timestamp(0), None).count(), 2, "the first expired");
        assert_eq!(a.beginning(Timestamp(3 * DAY_MS)), Timestamp(2 * DAY_MS));
    }

    #[test]
    fn policies_parse() {
        assert_eq!(
            parse_archive_policy(r#"{"MessageRetentionPeriod":"30"}"#),
            Ok(Some(30))
        );
        assert_eq!(parse_archive_policy("{}"), Ok(None));
        assert!(parse_archive_policy(r#"{"MessageRetentionPeriod":"366"}"#).is_err());
        let r = parse_replay_policy(
            r#"{"PointType":"Timestamp","StartingPoint":"2025-01-15T10:00:00.000Z"}"#,
        )
        .unwrap();
        assert_eq!(
            r.start,
            Timestamp::parse_iso8601("2025-01-15T10:00:00.000Z").unwrap()
        );
        assert!(parse_replay_policy(
            r#"{"PointType":"Sequence","StartingPoint":"2025-01-15T10:00:00.000Z"}"#
        )
        .is_err());
        assert!(parse_replay_policy(
            r#"{"PointType":"Timestamp","StartingPoint":"2025-01-15T10:00:00.000Z","EndingPoint":"2025-01-15T09:00:00.000Z"}"#
        )
        .is_err());
    }
}
