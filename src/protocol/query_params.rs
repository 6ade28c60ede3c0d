//! The Query protocol's flattened parameters (`Attribute.1.Name=...`) turned into the JSON shape
//! the JSON protocol sends, so both protocols decode into the same typed requests.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::ApiError;

/// Dots a parameter name may hold. The deepest name an SDK sends has seven
/// (`PublishBatchRequestEntries.member.N.MessageAttributes.entry.N.Value.DataType`); a name
/// far deeper is refused before any decoder walks it, so no crafted name can exhaust the stack.
pub const MAX_NAME_DOTS: usize = 12;

/// The first parameter name nested deeper than any AWS parameter, if there is one.
pub fn too_deep<'a>(params: &[(&'a str, &str)]) -> Option<&'a str> {
    params
        .iter()
        .map(|(k, _)| *k)
        .find(|k| k.bytes().filter(|b| *b == b'.').count() > MAX_NAME_DOTS)
}

/// The message both Query decoders refuse a too-deep name with.
pub(crate) fn too_deep_message(name: &str) -> String {
    let shown: String = name.chars().take(64).collect();
    format!("The parameter name {shown}... is nested more than {MAX_NAME_DOTS} levels deep.")
}

/// One list or map parameter of a Query request: its flattened prefix and the JSON member it
/// becomes. Each action declares its own (`protocol::actions`); others are not decoded.
pub struct QueryList {
    prefix: &'static str,
    shape: Shape,
}

/// How a flattened parameter prefix maps onto a JSON member.
enum Shape {
    /// `P.N` -> list of strings.
    StringList(&'static str),
    /// `P.N.<key>` / `P.N.<value>` -> map of strings.
    StringMap(&'static str, &'static str, &'static str),
    /// `P.N.Name` + `P.N.Value.*` -> map of attribute-value objects.
    AttributeMap(&'static str),
    /// `P.N.*` -> list of objects, each with these lists of its own.
    StructList(&'static str, &'static [QueryList]),
}

const fn list(prefix: &'static str, shape: Shape) -> QueryList {
    QueryList { prefix, shape }
}

pub const ATTRIBUTES: QueryList =
    list("Attribute", Shape::StringMap("Attributes", "Name", "Value"));
/// CreateQueue's member is lower-case `tags`; TagQueue's is `Tags`.
pub const CREATION_TAGS: QueryList = list("Tag", Shape::StringMap("tags", "Key", "Value"));
pub const TAGS: QueryList = list("Tag", Shape::StringMap("Tags", "Key", "Value"));
pub const TAG_KEYS: QueryList = list("TagKey", Shape::StringList("TagKeys"));
pub const ATTRIBUTE_NAMES: QueryList = list("AttributeName", Shape::StringList("AttributeNames"));
pub const MESSAGE_ATTRIBUTE_NAMES: QueryList = list(
    "MessageAttributeName",
    Shape::StringList("MessageAttributeNames"),
);
pub const MESSAGE_SYSTEM_ATTRIBUTE_NAMES: QueryList = list(
    "MessageSystemAttributeName",
    Shape::StringList("MessageSystemAttributeNames"),
);
pub const ACCOUNT_IDS: QueryList = list("AWSAccountId", Shape::StringList("AWSAccountIds"));
pub const ACTION_NAMES: QueryList = list("ActionName", Shape::StringList("Actions"));
pub const MESSAGE_ATTRIBUTES: QueryList =
    list("MessageAttribute", Shape::AttributeMap("MessageAttributes"));
pub const MESSAGE_SYSTEM_ATTRIBUTES: QueryList = list(
    "MessageSystemAttribute",
    Shape::AttributeMap("MessageSystemAttributes"),
);
pub const SEND_ENTRIES: QueryList = list(
    "SendMessageBatchRequestEntry",
    Shape::StructList("Entries", &[MESSAGE_ATTRIBUTES, MESSAGE_SYSTEM_ATTRIBUTES]),
);
pub const DELETE_ENTRIES: QueryList = list(
    "DeleteMessageBatchRequestEntry",
    Shape::StructList("Entries", &[]),
);
pub const VISIBILITY_ENTRIES: QueryList = list(
    "ChangeMessageVisibilityBatchRequestEntry",
    Shape::StructList("Entries", &[]),
);

impl Shape {
    /// The JSON member the list becomes.
    fn member(&self) -> &'static str {
        match self {
            Shape::StringList(member)
            | Shape::StringMap(member, _, _)
            | Shape::AttributeMap(member)
            | Shape::StructList(member, _) => member,
        }
    }
}

/// Whether `name` is a declared list's JSON member name: botocore's Query serializer writes an
/// empty list as `Member=` (`Entries=`), under that name rather than the list's prefix.
fn is_member(name: &str, lists: &[QueryList]) -> bool {
    lists.iter().any(|l| l.shape.member() == name)
}

fn shape<'a>(prefix: &str, lists: &'a [QueryList]) -> Option<&'a Shape> {
    lists.iter().find(|l| l.prefix == prefix).map(|l| &l.shape)
}

/// Splits `N.rest` into (N, rest); indices sort numerically.
fn indexed<'a>(entries: &[(&'a str, &'a str)]) -> BTreeMap<u64, Vec<(&'a str, &'a str)>> {
    let mut out: BTreeMap<u64, Vec<(&str, &str)>> = BTreeMap::new();
    for (key, value) in entries {
        let (index, rest) = key.split_once('.').unwrap_or((key, ""));
        if let Ok(n) = index.parse::<u64>() {
            out.entry(n).or_default().push((rest, value));
        }
    }
    out
}

fn lookup<'a>(entries: &[(&str, &'a str)], key: &str) -> Option<&'a str> {
    entries.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

/// Converts Query parameters (without `Action` and `Version`) into a JSON object; a name
/// nested deeper than any AWS parameter is `InvalidParameterValue`.
/// `lists` are the action's declared list and map parameters.
pub fn to_json(params: &[(&str, &str)], lists: &[QueryList]) -> Result<Value, ApiError> {
    if let Some(name) = too_deep(params) {
        return Err(ApiError::invalid(too_deep_message(name)));
    }
    Ok(reshape(params, lists))
}

/// `to_json` on names already checked: recursion follows the dots, so it is bounded.
fn reshape(params: &[(&str, &str)], lists: &[QueryList]) -> Value {
    let mut object = Map::new();
    let mut nested: BTreeMap<&str, Vec<(&str, &str)>> = BTreeMap::new();
    for (key, value) in params {
        match key.split_once('.') {
            Some((prefix, rest)) => nested.entry(prefix).or_default().push((rest, value)),
            // An empty list may be sent as `AttributeName=` or `Entries=`: treat it as absent.
            None if shape(key, lists).is_some() => {}
            None if value.is_empty() && is_member(key, lists) => {}
            None => {
                object.insert(key.to_string(), Value::String(value.to_string()));
            }
        }
    }
    for (prefix, entries) in nested {
        let Some(shape) = shape(prefix, lists) else {
            continue;
        };
        let (member, value) = match shape {
            Shape::StringList(member) => (
                *member,
                Value::Array(
                    indexed(&entries)
                        .into_values()
                        .filter_map(|e| lookup(&e, "").map(|v| Value::String(v.into())))
                        .collect(),
                ),
            ),
            &Shape::StringMap(member, key_name, value_name) => {
                let mut map = Map::new();
                for e in indexed(&entries).into_values() {
                    if let Some(k) = lookup(&e, key_name) {
                        let v = lookup(&e, value_name).unwrap_or("");
                        map.insert(k.to_string(), Value::String(v.to_string()));
                    }
                }
                (member, Value::Object(map))
            }
            &Shape::AttributeMap(member) => {
                let mut map = Map::new();
                for e in indexed(&entries).into_values() {
                    let Some(name) = lookup(&e, "Name") else {
                        continue;
                    };
                    let mut attr = Map::new();
                    for (k, v) in &e {
                        if let Some(field) = k.strip_prefix("Value.") {
                            attr.insert(field.to_string(), Value::String(v.to_string()));
                        }
                    }
                    map.insert(name.to_string(), Value::Object(attr));
                }
                (member, Value::Object(map))
            }
            &Shape::StructList(member, nested) => (
                member,
                Value::Array(
                    indexed(&entries)
                        .into_values()
                        .map(|e| reshape(&e, nested))
                        .collect(),
                ),
            ),
        };
        object.insert(member.to_string(), value);
    }
    Value::Object(object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::SqsAction;

    const SEND: &[QueryList] = &[SEND_ENTRIES];
    use serde_json::json;

    #[test]
    fn flattened_members_become_json() {
        let params = [
            ("QueueName", "q"),
            ("Attribute.2.Name", "VisibilityTimeout"),
            ("Attribute.2.Value", "60"),
            ("Attribute.1.Name", "DelaySeconds"),
            ("Attribute.1.Value", "5"),
            ("Tag.1.Key", "team"),
            ("Tag.1.Value", ""),
        ];
        assert_eq!(
            to_json(&params, SqsAction::CreateQueue.query_lists()).unwrap(),
            json!({"QueueName":"q","Attributes":{"DelaySeconds":"5","VisibilityTimeout":"60"},"tags":{"team":""}})
        );
    }

    #[test]
    fn batch_entries_with_nested_attributes_and_numeric_index_order() {
        let params = [
            ("QueueUrl", "u"),
            ("SendMessageBatchRequestEntry.10.Id", "b"),
            ("SendMessageBatchRequestEntry.10.MessageBody", "second"),
            ("SendMessageBatchRequestEntry.2.Id", "a"),
            ("SendMessageBatchRequestEntry.2.MessageBody", "first"),
            (
                "SendMessageBatchRequestEntry.2.MessageAttribute.1.Name",
                "Foo",
            ),
            (
                "SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.DataType",
                "String",
            ),
            (
                "SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.StringValue",
                "Bar",
            ),
        ];
        assert_eq!(
            to_json(&params, SqsAction::SendMessageBatch.query_lists()).unwrap(),
            json!({"QueueUrl":"u","Entries":[
                {"Id":"a","MessageBody":"first","MessageAttributes":{"Foo":{"DataType":"String","StringValue":"Bar"}}},
                {"Id":"b","MessageBody":"second"}]})
        );
    }

    #[test]
    fn a_prefix_means_what_its_action_declares() {
        let params = [("Tag.1.Key", "team"), ("Tag.1.Value", "x")];
        let decoded = |action: SqsAction| to_json(&params, action.query_lists()).unwrap();
        assert_eq!(
            decoded(SqsAction::CreateQueue),
            json!({"tags":{"team":"x"}})
        );
        assert_eq!(decoded(SqsAction::TagQueue), json!({"Tags":{"team":"x"}}));
        // Not one of SendMessage's parameters: not decoded at all.
        assert_eq!(decoded(SqsAction::SendMessage), json!({}));
    }

    #[test]
    fn string_lists_and_empty_list_marker() {
        let params = [("AttributeName.1", "All"), ("MessageAttributeName", "")];
        assert_eq!(
            to_json(&params, SqsAction::ReceiveMessage.query_lists()).unwrap(),
            json!({"AttributeNames":["All"]})
        );
    }

    #[test]
    fn a_name_nested_past_the_bound_is_refused_without_recursing() {
        // 1,300 levels overflowed the stack before the bound.
        let name = "SendMessageBatchRequestEntry.1.".repeat(1_300) + "Id";
        let error = to_json(&[(name.as_str(), "x")], SEND).unwrap_err();
        assert_eq!(
            error.code,
            crate::protocol::ErrorCode::InvalidParameterValue
        );
        let deepest_real = "SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue";
        assert!(to_json(&[(deepest_real, "x")], SEND).is_ok());
        let at_bound = "a.".repeat(MAX_NAME_DOTS) + "b";
        assert!(to_json(&[(at_bound.as_str(), "x")], SEND).is_ok());
        let past = "a.".repeat(MAX_NAME_DOTS + 1) + "b";
        assert!(to_json(&[(past.as_str(), "x")], SEND).is_err());
    }
}
