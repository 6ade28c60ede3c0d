//! Webhook (HTTP/S) delivery state: the outbox of pending deliveries with their retries, and
//! confirmation tokens; the policies they follow are `topic::delivery_policy`, the engine's
//! part that holds them `engine::webhooks`. Pure; the sender lives in `crate::delivery`.

pub mod changes;
pub mod delivery;
pub mod outbox;
pub mod tokens;

pub use outbox::{Attempt, Delivery, Finished, Kind, LanePolicy, LaneStats, Outbox, Outcome};
