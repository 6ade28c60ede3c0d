//! Messages over shards: each queue's own shard.

use super::{on, Sharded};
use crate::backend::{Answer, BackendResult, Messages};
use crate::engine::queue::{ReceiveRequest, Received, SendReceipt, SendRequest};
use crate::engine::EngineResult;

impl Messages for Sharded {
    fn check_led_here(&self, queue: &str) -> BackendResult<()> {
        self.of_key(queue).map(|_| ())
    }

    fn send<'a>(&'a self, queue: &'a str, request: SendRequest) -> Answer<'a, SendReceipt> {
        on(self.of_key(queue), move |shard| shard.send(queue, request))
    }

    fn send_batch<'a>(
        &'a self,
        queue: &'a str,
        requests: Vec<SendRequest>,
    ) -> Answer<'a, Vec<EngineResult<SendReceipt>>> {
        on(self.of_key(queue), move |shard| {
            shard.send_batch(queue, requests)
        })
    }

    fn receive<'a>(
        &'a self,
        queue: &'a str,
        request: ReceiveRequest,
        wait_seconds: Option<u64>,
    ) -> Answer<'a, Vec<Received>> {
        on(self.of_key(queue), move |shard| {
            shard.receive(queue, request, wait_seconds)
        })
    }

    fn delete<'a>(
        &'a self,
        queue: &'a str,
        handles: Vec<&'a str>,
    ) -> Answer<'a, Vec<EngineResult<()>>> {
        on(self.of_key(queue), move |shard| {
            shard.delete(queue, handles)
        })
    }

    fn change_visibility<'a>(
        &'a self,
        queue: &'a str,
        changes: Vec<(&'a str, i64)>,
    ) -> Answer<'a, Vec<EngineResult<()>>> {
        on(self.of_key(queue), move |shard| {
            shard.change_visibility(queue, changes)
        })
    }
}
