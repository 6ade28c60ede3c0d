//! Filter policy compilation in both scopes, and matching what compiles against a message
//! body and attributes made from the same input. Input: policy, a NUL byte, body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use orderly::engine::message::{AttributeData, AttributeValue, MessageAttributes};
use orderly::engine::topic::filter::{FilterPolicy, Scope};

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(2, |&b| b == 0);
    let policy = String::from_utf8_lossy(parts.next().unwrap_or_default());
    let body = String::from_utf8_lossy(parts.next().unwrap_or_default());
    // Attributes named like the body's top-level keys, so attribute rules get exercised.
    let attributes: Vec<(String, AttributeValue)> =
        serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.as_object().cloned())
            .map(|object| {
                object
                    .into_iter()
                    .take(10)
                    .map(|(name, value)| {
                        let (data_type, text) = match &value {
                            serde_json::Value::Number(n) => ("Number", n.to_string()),
                            serde_json::Value::Array(_) => ("String.Array", value.to_string()),
                            serde_json::Value::String(s) => ("String", s.clone()),
                            other => ("String", other.to_string()),
                        };
                        (
                            name,
                            AttributeValue {
                                data_type: data_type.to_string(),
                                data: AttributeData::String(text),
                            },
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
    let attributes = MessageAttributes::new(attributes);
    for scope in [Scope::MessageAttributes, Scope::MessageBody] {
        if let Ok(filter) = FilterPolicy::parse(&policy, scope) {
            let _ = filter.matches(&attributes, &body);
        }
    }
});
