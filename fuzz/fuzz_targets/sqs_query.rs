//! SQS Query requests: form decoding, the flattened-parameter reshaping and the typed decode
//! of the actions with nested parameters. Must never panic or overflow the stack.
#![no_main]

use libfuzzer_sys::fuzz_target;
use orderly::protocol::sqs::{
    CreateQueueInput, HandleBatchInput, ReceiveMessageInput, SendMessageBatchInput,
};
use orderly::protocol::{form, query_params, Payload, Protocol, SqsAction};

fuzz_target!(|data: &[u8]| {
    let Ok(params) = form::decode(data) else {
        return;
    };
    let action = params
        .iter()
        .find(|(k, _)| k == "Action")
        .map(|(_, v)| v.as_str())
        .unwrap_or("SendMessageBatch");
    let pairs: Vec<(&str, &str)> = params
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let lists = SqsAction::parse(action).map_or(&[][..], |a| a.query_lists());
    let Ok(json) = query_params::to_json(&pairs, lists) else {
        return;
    };
    let payload = Payload::Query(json);
    let _ = payload.decode::<SendMessageBatchInput>(Protocol::Query);
    let _ = payload.decode::<HandleBatchInput>(Protocol::Query);
    let _ = payload.decode::<ReceiveMessageInput>(Protocol::Query);
    let _ = payload.decode::<CreateQueueInput>(Protocol::Query);
});
