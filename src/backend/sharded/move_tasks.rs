//! Message move tasks over shards: each runs in its source's shard, told first what only other
//! shards know (whether a queue there names the source as its dead-letter queue, and the type
//! of a destination held there).

use super::{on, Sharded};
use crate::backend::{Answer, MoveTasks, StartMove};
use crate::engine::move_task::{decode_handle, MoveTask};
use crate::engine::redrive::Elsewhere;
use crate::engine::shard::Shard;

impl MoveTasks for Sharded {
    fn start_move_task<'a>(&'a self, mut request: StartMove<'a>) -> Answer<'a, MoveTask> {
        Box::pin(async move {
            let home = self.of_queue_arn(request.source_arn)?;
            // As redrive policies name it.
            let source = (self.namespaces.key_in_arn("sqs", request.source_arn))
                .map(|key| self.namespaces.arn("sqs", key));
            let dead_letter_sources = match source {
                Some(source) => !self
                    .naming_elsewhere(home.shard(), &source)
                    .await?
                    .is_empty(),
                None => false,
            };
            let mut elsewhere = Elsewhere {
                dead_letter_sources,
                destination_fifo: None,
            };
            let destination = request
                .destination_arn
                .and_then(|arn| self.namespaces.key_in_arn("sqs", arn));
            if let Some(key) = destination {
                if Shard::of(self.count(), key) != home.shard() {
                    let now = self.clock.now();
                    let found = self.target_of(key, now).await?;
                    elsewhere.destination_fifo = found.map(|found| found.fifo);
                }
            }
            request.elsewhere = elsewhere;
            home.start_move_task(request).await
        })
    }

    fn list_move_tasks<'a>(&'a self, source_arn: &'a str) -> Answer<'a, Vec<MoveTask>> {
        on(self.of_queue_arn(source_arn), move |shard| {
            shard.list_move_tasks(source_arn)
        })
    }

    fn cancel_move_task<'a>(&'a self, handle: &'a str) -> Answer<'a, u64> {
        match decode_handle(handle) {
            Some((_, source_arn)) => Box::pin(async move {
                self.of_queue_arn(&source_arn)?
                    .cancel_move_task(handle)
                    .await
            }),
            // Shard 0's engine refuses it as AWS does.
            None => on(self.shard(0), move |shard| shard.cancel_move_task(handle)),
        }
    }
}
