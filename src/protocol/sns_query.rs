//! SNS's Query encoding: `Name.member.N` lists and `Name.entry.N.key/value` maps (also
//! `entry.N.Name/Value` for message attributes), turned into the JSON shape the typed
//! requests decode from; and SNS's XML, where lists wrap items in `<member>` and maps in `<entry>`.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::actions::SnsAction;
use super::query_params::{too_deep, too_deep_message};
use super::xml::escape;
use super::{ApiError, ErrorCode};

pub const SNS_NAMESPACE: &str = "http://sns.amazonaws.com/doc/2010-03-31/";

/// Parameters that are lists: an empty value (`PublishBatchRequestEntries=`) means an empty list.
const LISTS: &[&str] = &[
    "PublishBatchRequestEntries",
    "Tags",
    "TagKeys",
    "attributes",
];

#[derive(Default)]
struct Node {
    value: Option<String>,
    children: BTreeMap<String, Node>,
}

impl Node {
    fn insert(&mut self, path: &[&str], value: &str) {
        match path.split_first() {
            None => self.value = Some(value.to_string()),
            Some((head, rest)) => self
                .children
                .entry(head.to_string())
                .or_default()
                .insert(rest, value),
        }
    }

    /// Children keyed by numeric index, in index order.
    fn indexed(&self) -> Vec<&Node> {
        let mut items: Vec<(u64, &Node)> = self
            .children
            .iter()
            .filter_map(|(k, v)| k.parse::<u64>().ok().map(|n| (n, v)))
            .collect();
        items.sort_by_key(|(n, _)| *n);
        items.into_iter().map(|(_, v)| v).collect()
    }

    fn to_json(&self, name: &str) -> Value {
        if let Some(members) = self.children.get("member") {
            return Value::Array(
                members
                    .indexed()
                    .into_iter()
                    .map(|m| m.to_json(""))
                    .collect(),
            );
        }
        if let Some(entries) = self.children.get("entry") {
            let mut map = Map::new();
            for e in entries.indexed() {
                let key = e
                    .children
                    .get("key")
                    .or_else(|| e.children.get("Name"))
                    .and_then(|k| k.value.clone());
                let value = e.children.get("value").or_else(|| e.children.get("Value"));
                if let (Some(key), Some(value)) = (key, value) {
                    map.insert(key, value.to_json(""));
                }
            }
            return Value::Object(map);
        }
        if self.children.is_empty() {
            let text = self.value.clone().unwrap_or_default();
            if text.is_empty() && LISTS.contains(&name) {
                return Value::Array(Vec::new());
            }
            return Value::String(text);
        }
        Value::Object(
            self.children
                .iter()
                .map(|(k, v)| (k.clone(), v.to_json(k)))
                .collect(),
        )
    }
}

/// Converts SNS Query parameters (without `Action` and `Version`) into a JSON object; a name
/// nested deeper than any AWS parameter is `InvalidParameter` (the tree is walked recursively).
pub fn to_json(params: &[(&str, &str)]) -> Result<Value, ApiError> {
    if let Some(name) = too_deep(params) {
        return Err(ApiError::new(
            ErrorCode::InvalidParameter,
            too_deep_message(name),
        ));
    }
    let mut root = Node::default();
    for (key, value) in params {
        let path: Vec<&str> = key.split('.').collect();
        root.insert(&path, value);
    }
    // The top level is always an object, even for a request with no parameters.
    Ok(Value::Object(
        root.children
            .iter()
            .map(|(k, v)| (k.clone(), v.to_json(k)))
            .collect(),
    ))
}

fn escape_sns(text: &str, out: &mut String) {
    for part in text.split_inclusive('\'') {
        match part.strip_suffix('\'') {
            Some(before) => {
                escape(before, out);
                out.push_str("&apos;");
            }
            None => escape(part, out),
        }
    }
}

fn write_value(name: &str, value: &Value, out: &mut String) {
    out.push('<');
    out.push_str(name);
    out.push('>');
    match value {
        Value::Array(items) => {
            for item in items {
                write_value("member", item, out);
            }
        }
        Value::Object(map) if name == "Attributes" || name == "attributes" => {
            for (k, v) in map {
                out.push_str("<entry><key>");
                escape_sns(k, out);
                out.push_str("</key><value>");
                escape_sns(v.as_str().unwrap_or_default(), out);
                out.push_str("</value></entry>");
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                write_value(k, v, out);
            }
        }
        Value::String(s) => escape_sns(s, out),
        Value::Null => {}
        other => out.push_str(&other.to_string()),
    }
    out.push_str("</");
    out.push_str(name);
    out.push('>');
}

pub fn response(action: SnsAction, result: &Value, request_id: &str) -> String {
    let has_result = action.xml_result();
    let action = action.name();
    let mut out = format!("<?xml version=\"1.0\"?><{action}Response xmlns=\"{SNS_NAMESPACE}\">");
    if has_result {
        write_value(&format!("{action}Result"), result, &mut out);
    }
    out.push_str(&format!(
        "<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata></{action}Response>"
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn members_and_entries_become_json() {
        let params = [
            ("TopicArn", "arn"),
            ("PublishBatchRequestEntries.member.2.Id", "b"),
            ("PublishBatchRequestEntries.member.2.Message", "two"),
            ("PublishBatchRequestEntries.member.1.Id", "a"),
            ("PublishBatchRequestEntries.member.1.Message", "one"),
            (
                "PublishBatchRequestEntries.member.1.MessageAttributes.entry.1.Name",
                "k",
            ),
            (
                "PublishBatchRequestEntries.member.1.MessageAttributes.entry.1.Value.DataType",
                "String",
            ),
            (
                "PublishBatchRequestEntries.member.1.MessageAttributes.entry.1.Value.StringValue",
                "v",
            ),
            ("Attributes.entry.1.key", "FifoTopic"),
            ("Attributes.entry.1.value", "true"),
            ("Tags.member.1.Key", "env"),
            ("Tags.member.1.Value", "dev"),
        ];
        assert_eq!(
            to_json(&params).unwrap(),
            json!({
                "Attributes": {"FifoTopic": "true"},
                "PublishBatchRequestEntries": [
                    {"Id": "a", "Message": "one", "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}}},
                    {"Id": "b", "Message": "two"}],
                "Tags": [{"Key": "env", "Value": "dev"}],
                "TopicArn": "arn"})
        );
        assert_eq!(
            to_json(&[("PublishBatchRequestEntries", "")]).unwrap(),
            json!({"PublishBatchRequestEntries": []})
        );
        assert_eq!(to_json(&[]).unwrap(), json!({}));
    }

    #[test]
    fn a_name_nested_past_the_bound_is_refused_without_recursing() {
        // 2,100 dots overflowed the stack in `Node::insert` before the bound.
        let name = "a.".repeat(2_100) + "b";
        let error = to_json(&[(name.as_str(), "1")]).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidParameter);
        let deepest_real =
            "PublishBatchRequestEntries.member.1.MessageAttributes.entry.1.Value.DataType";
        assert!(to_json(&[(deepest_real, "String")]).is_ok());
    }

    #[test]
    fn response_golden() {
        let result =
            json!({"Topics": [{"TopicArn": "a'b"}], "Attributes": {"k": "v"}, "Failed": []});
        assert_eq!(
            response(SnsAction::ListTopics, &result, "r"),
            concat!(
                r#"<?xml version="1.0"?><ListTopicsResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/">"#,
                "<ListTopicsResult><Topics><member><TopicArn>a&apos;b</TopicArn></member></Topics>",
                "<Attributes><entry><key>k</key><value>v</value></entry></Attributes><Failed></Failed></ListTopicsResult>",
                "<ResponseMetadata><RequestId>r</RequestId></ResponseMetadata></ListTopicsResponse>"
            )
        );
        assert!(!response(SnsAction::DeleteTopic, &json!({}), "r").contains("Result"));
    }
}
