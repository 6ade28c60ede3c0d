//! SQS JSON request bodies decoded into the typed inputs with the deepest shapes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use orderly::protocol::sqs::{
    CreateQueueInput, HandleBatchInput, ReceiveMessageInput, SendMessageBatchInput,
};
use orderly::protocol::{Payload, Protocol};

fuzz_target!(|data: &[u8]| {
    let payload = Payload::Json(data.to_vec().into());
    let _ = payload.decode::<SendMessageBatchInput>(Protocol::Json);
    let _ = payload.decode::<HandleBatchInput>(Protocol::Json);
    let _ = payload.decode::<ReceiveMessageInput>(Protocol::Json);
    let _ = payload.decode::<CreateQueueInput>(Protocol::Json);
});
