//! The Query XML document as JSON, shaped the way LocalStack's developer endpoint answers a
//! request that accepts JSON (xmltodict's reading of the XML): one key per element, text as
//! strings, a repeated element as a list but a lone one as the element itself, an empty one as
//! null. Built from the same value `xml::response` writes, with the same element names.

use serde_json::{json, Map, Value};

use super::actions::SqsAction;

/// `{"<Action>Response": {"<Action>Result": …, "ResponseMetadata": {"RequestId": …}}}`.
pub fn response(action: SqsAction, result: &Value, request_id: &str) -> Value {
    let name = action.name();
    let members = match result {
        Value::Object(members) => convert_members(members),
        _ => Map::new(),
    };
    // An empty result element reads as null.
    let members = if members.is_empty() {
        Value::Null
    } else {
        Value::Object(members)
    };
    let mut body = Map::new();
    if action.xml_result() {
        body.insert(format!("{name}Result"), members);
    }
    body.insert(
        "ResponseMetadata".into(),
        json!({ "RequestId": request_id }),
    );
    json!({ format!("{name}Response"): body })
}

/// `{"ErrorResponse": {"Error": {"Type", "Code", "Message", "Detail": null}, "RequestId"}}`.
pub fn error(fault: &str, code: &str, message: &str, request_id: &str) -> Value {
    json!({"ErrorResponse": {
        "Error": {"Type": fault, "Code": code, "Message": message, "Detail": null},
        "RequestId": request_id,
    }})
}

fn text(value: &Value) -> Value {
    match value {
        Value::String(_) | Value::Null => value.clone(),
        Value::Object(members) => Value::Object(convert_members(members)),
        other => Value::String(other.to_string()),
    }
}

/// A lone item is the element itself; several are a list.
fn one_or_list(mut items: Vec<Value>) -> Value {
    if items.len() == 1 {
        items.pop().expect("one item")
    } else {
        Value::Array(items)
    }
}

fn named_pairs(map: &Map<String, Value>, key_name: &str) -> Value {
    one_or_list(
        map.iter()
            .map(|(name, value)| json!({ key_name: name, "Value": text(value) }))
            .collect(),
    )
}

fn convert_members(members: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (key, value) in members {
        let (name, converted) = match (key.as_str(), value) {
            ("Attributes", Value::Object(map)) => ("Attribute".into(), named_pairs(map, "Name")),
            ("Tags", Value::Object(map)) => ("Tag".into(), named_pairs(map, "Key")),
            ("MessageAttributes", Value::Object(map)) => {
                ("MessageAttribute".into(), named_pairs(map, "Name"))
            }
            ("Messages", Value::Array(items)) => (
                "Message".into(),
                one_or_list(items.iter().map(text).collect()),
            ),
            (_, Value::Array(items)) => {
                (key.clone(), one_or_list(items.iter().map(text).collect()))
            }
            _ => (key.clone(), text(value)),
        };
        if !(converted.is_array() && converted.as_array().is_some_and(Vec::is_empty)) {
            out.insert(name, converted);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receive_reads_as_xmltodict_reads_its_xml() {
        let message = |body: &str| {
            json!({"MessageId": "m", "Body": body, "Attributes": {"SenderId": "A", "ApproximateReceiveCount": 1},
                   "MessageAttributes": {"kind": {"StringValue": "price", "DataType": "String"}}})
        };
        let two = response(
            SqsAction::ReceiveMessage,
            &json!({"Messages": [message("a"), message("b")]}),
            "r",
        );
        let messages = &two["ReceiveMessageResponse"]["ReceiveMessageResult"]["Message"];
        assert_eq!(messages[1]["Body"], "b");
        assert_eq!(
            messages[0]["Attribute"][1],
            json!({"Name": "ApproximateReceiveCount", "Value": "1"})
        );
        assert_eq!(
            messages[0]["MessageAttribute"]["Value"]["StringValue"],
            "price"
        );
        assert_eq!(
            two["ReceiveMessageResponse"]["ResponseMetadata"]["RequestId"],
            "r"
        );

        let one = response(
            SqsAction::ReceiveMessage,
            &json!({"Messages": [message("a")]}),
            "r",
        );
        assert_eq!(
            one["ReceiveMessageResponse"]["ReceiveMessageResult"]["Message"]["Body"],
            "a"
        );
        let none = response(SqsAction::ReceiveMessage, &json!({}), "r");
        assert_eq!(
            none["ReceiveMessageResponse"]["ReceiveMessageResult"],
            Value::Null
        );
    }
}
