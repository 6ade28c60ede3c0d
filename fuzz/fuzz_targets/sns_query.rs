//! SNS Query requests: form decoding, the member/entry tree and the typed decode of the
//! actions with nested parameters. Must never panic or overflow the stack.
#![no_main]

use libfuzzer_sys::fuzz_target;
use orderly::protocol::sns::{CreateTopicInput, PublishBatchInput, PublishInput, SubscribeInput};
use orderly::protocol::{form, sns_query, Payload, Protocol};

fuzz_target!(|data: &[u8]| {
    let Ok(params) = form::decode(data) else {
        return;
    };
    let pairs: Vec<(&str, &str)> = params
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let Ok(json) = sns_query::to_json(&pairs) else {
        return;
    };
    let payload = Payload::Query(json);
    let _ = payload.decode::<PublishBatchInput>(Protocol::SnsQuery);
    let _ = payload.decode::<PublishInput>(Protocol::SnsQuery);
    let _ = payload.decode::<CreateTopicInput>(Protocol::SnsQuery);
    let _ = payload.decode::<SubscribeInput>(Protocol::SnsQuery);
});
