//! Message move tasks on the embedded engine: the engine keeps their state; a tokio task here
//! paces each running one on the injected clock.

use std::sync::Arc;

use tokio::sync::Notify;

use super::Embedded;
use crate::backend::{pacing, Answer, MoveTasks, StartMove, Work};
use crate::engine::move_task::MoveTask;
use crate::engine::{Engine, Timestamp};

/// One step of a running task, waking the long polls of the queues it moved messages into;
/// whether the task still runs.
fn step(engine: &Engine<Notify>, task: &MoveTask, budget: usize, now: Timestamp) -> bool {
    let (touched, running) = engine.move_step(&task.id, &task.source_arn, budget, now);
    for name in touched {
        if let Ok(entry) = engine.queues.get(&name) {
            entry.waiters.notify_one();
        }
    }
    running
}

impl Embedded {
    fn run_move_task(&self, task: MoveTask) {
        let engine: Arc<Engine<Notify>> = self.engine.clone();
        let rate = task.rate;
        let parcels_waiting = self.parcels_waiting.clone();
        self.move_runners.start(
            "move task",
            pacing::pace(self.clock.clone(), rate, move |budget, now| {
                let running = step(&engine, &task, budget, now);
                super::signal_parcels(&engine, parcels_waiting.as_deref());
                std::future::ready(running)
            }),
        );
    }
}

impl MoveTasks for Embedded {
    fn start_move_task<'a>(&'a self, request: StartMove<'a>) -> Answer<'a, MoveTask> {
        self.changing(move |engine| {
            let task = engine.start_move_task(
                request.source_arn,
                (request.destination_arn, request.elsewhere),
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
}

impl Work for Embedded {
    fn start_work(&self) {
        for task in self.engine.move_tasks.running() {
            tracing::info!(task = %task.id, source = %task.source_arn, moved = task.moved, "resuming message move task");
            self.run_move_task(task);
        }
    }

    fn carried(&self) -> Answer<'_, ()> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn stop_work(&self) -> Answer<'_, ()> {
        Box::pin(async move {
            // A step runs without awaiting, so aborting between awaits never cuts one in half.
            self.move_runners.stop().await;
            Ok(())
        })
    }
}
