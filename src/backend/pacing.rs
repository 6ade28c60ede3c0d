//! The pace of a message move task: steps fall due on the injected
//! clock, each moving a bounded number of messages, so the task keeps its rate. After a jump of
//! the clock (a test moving it) the steps owed are taken one after another.

use std::future::Future;
use std::sync::Arc;

use crate::clock::Clock;
use crate::engine::move_task::DEFAULT_RATE;
use crate::engine::Timestamp;

/// Steps per second of a running task; each step moves rate/10 messages.
const STEPS_PER_SECOND: i64 = 10;

/// Calls `step(budget, now)` at the pace `rate` (messages a second; `None`: the default) allows
/// until it answers false (the task stopped running).
pub async fn pace<F, Fut>(clock: Arc<dyn Clock>, rate: Option<i64>, mut step: F)
where
    F: FnMut(usize, Timestamp) -> Fut,
    Fut: Future<Output = bool>,
{
    // Up to STEPS_PER_SECOND steps a second; slow rates move one message per longer step.
    let rate = rate.unwrap_or(DEFAULT_RATE).max(1);
    let budget = (rate + STEPS_PER_SECOND - 1) / STEPS_PER_SECOND;
    let period = (1000 * budget / rate) as u64;
    let budget = budget as usize;
    let mut due = clock.now();
    loop {
        clock.sleep_until(due).await;
        due = due.plus_millis(period);
        if !step(budget, clock.now()).await {
            break;
        }
        // Steps owed after a jump come one after another: let other tasks in between.
        tokio::task::yield_now().await;
    }
}
