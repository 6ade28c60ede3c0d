//! Message move tasks on the embedded engine: the engine keeps their state; a tokio task here
//! paces each running one on the injected clock.

use std::sync::Arc;

use tokio::sync::Notify;

use super::Embedded;
use crate::backend::{Answer, MoveTasks, StartMove};
use crate::clock::Clock;
use crate::engine::move_task::{MoveTask, DEFAULT_RATE};
use crate::engine::Engine;

/// Steps per second of a running task; each step moves rate/10 messages.
const STEPS_PER_SECOND: i64 = 10;

/// Paces a running task until it completes, fails or is cancelled. Steps fall due on the
/// clock; after a jump (a test moving it) the steps owed are taken at once.
async fn pace(engine: Arc<Engine<Notify>>, clock: Arc<dyn Clock>, task: MoveTask) {
    // Up to STEPS_PER_SECOND steps a second; slow rates move one message per longer step.
    let rate = task.rate.unwrap_or(DEFAULT_RATE).max(1);
    let budget = (rate + STEPS_PER_SECOND - 1) / STEPS_PER_SECOND;
    let period = (1000 * budget / rate) as u64;
    let budget = budget as usize;
    let mut due = clock.now();
    loop {
        clock.sleep_until(due).await;
        due = due.plus_millis(period);
        let (touched, running) = engine.move_step(&task.id, &task.source_arn, budget, clock.now());
        for name in touched {
            if let Ok(entry) = engine.queue(&name) {
                entry.waiters.notify_one();
            }
        }
        if !running {
            break;
        }
        // Steps owed after a jump come one after another: let other tasks in between.
        tokio::task::yield_now().await;
    }
}

impl Embedded {
    fn run_move_task(&self, task: MoveTask) {
        let mut runners = self.move_runners.lock().unwrap_or_else(|p| p.into_inner());
        while runners.try_join_next().is_some() {}
        runners.spawn(pace(self.engine.clone(), self.clock.clone(), task));
    }
}

impl MoveTasks for Embedded {
    fn start_move_task<'a>(&'a self, request: StartMove<'a>) -> Answer<'a, MoveTask> {
        self.changing(move |engine| {
            let task = engine.start_move_task(
                request.source_arn,
                request.destination_arn,
                request.rate,
                self.clock.now(),
            )?;
            self.run_move_task(task.clone());
            Ok(task)
        })
    }

    fn list_move_tasks<'a>(&'a self, source_arn: &'a str) -> Answer<'a, Vec<MoveTask>> {
        self.reading(move |engine| Ok(engine.list_move_tasks(source_arn)?))
    }

    fn cancel_move_task<'a>(&'a self, handle: &'a str) -> Answer<'a, u64> {
        self.changing(move |engine| Ok(engine.cancel_move_task(handle)?))
    }

    fn resume_move_tasks(&self) {
        for task in self.engine.running_move_tasks() {
            tracing::info!(task = %task.id, source = %task.source_arn, moved = task.moved, "resuming message move task");
            self.run_move_task(task);
        }
    }

    fn stop_move_tasks(&self) -> Answer<'_, ()> {
        Box::pin(async move {
            // A step runs without awaiting, so aborting between awaits never cuts one in half.
            let mut runners =
                std::mem::take(&mut *self.move_runners.lock().unwrap_or_else(|p| p.into_inner()));
            runners.abort_all();
            while runners.join_next().await.is_some() {}
            Ok(())
        })
    }
}
