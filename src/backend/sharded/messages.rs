//! Messages over shards: each queue's own shard.

use super::Sharded;
use crate::backend::{Answer, Messages};
use crate::engine::queue::{ReceiveRequest, Received, SendReceipt, SendRequest};
use crate::engine::EngineResult;

impl Messages for Sharded {
    fn send<'a>(&'a self, queue: &'a str, request: SendRequest) -> Answer<'a, SendReceipt> {
        self.of_key(queue).send(queue, request)
    }

    fn send_batch<'a>(
        &'a self,
        queue: &'a str,
        requests: Vec<SendRequest>,
    ) -> Answer<'a, Vec<EngineResult<SendReceipt>>> {
        self.of_key(queue).send_batch(queue, requests)
    }

    fn receive<'a>(
        &'a self,
        queue: &'a str,
        request: ReceiveRequest,
        wait_seconds: Option<u64>,
    ) -> Answer<'a, Vec<Received>> {
        self.of_key(queue).receive(queue, request, wait_seconds)
    }

    fn delete<'a>(
        &'a self,
        queue: &'a str,
        handles: Vec<&'a str>,
    ) -> Answer<'a, Vec<EngineResult<()>>> {
        self.of_key(queue).delete(queue, handles)
    }

    fn change_visibility<'a>(
        &'a self,
        queue: &'a str,
        changes: Vec<(&'a str, i64)>,
    ) -> Answer<'a, Vec<EngineResult<()>>> {
        self.of_key(queue).change_visibility(queue, changes)
    }
}
