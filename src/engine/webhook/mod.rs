//! Webhook (HTTP/S) delivery state: policies and retry schedules, the outbox of pending
//! deliveries, and confirmation tokens. Pure; the sender lives in `crate::delivery`.

pub mod changes;
pub mod delivery;
pub mod lifecycle;
pub mod outbox;
pub mod policy;
pub mod tokens;

pub use outbox::{Attempt, Delivery, Finished, Kind, LanePolicy, LaneStats, Outbox, Outcome};
pub use policy::{EffectivePolicy, RetryPolicy, SubscriptionPolicy, TopicPolicy};
