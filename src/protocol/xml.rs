//! Query-protocol XML responses, written from the same serialized output the JSON protocol
//! sends. Maps and flattened lists follow SQS's element names; text is escaped as SQS does it.

use serde_json::{Map, Value};

use super::actions::SqsAction;

use crate::engine::body::allowed_char;

pub const SQS_NAMESPACE: &str = "http://queue.amazonaws.com/doc/2012-11-05/";

/// Escapes text as SQS does: besides `&`, `<`, `>`, also `"` and carriage return, because XML
/// parsers turn a literal CR into LF, which would break the client's body MD5 check.
pub fn escape(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\r' => out.push_str("&#xD;"),
            // XML cannot carry these even as references; they only get here echoed in an
            // error message (stored text is checked on the way in).
            c if !allowed_char(c) => out.push(char::REPLACEMENT_CHARACTER),
            _ => out.push(c),
        }
    }
}

/// The element name of one item of a flattened list.
fn list_item<'a>(member: &'a str, action: &str) -> std::borrow::Cow<'a, str> {
    match member {
        "QueueUrls" | "queueUrls" => "QueueUrl".into(),
        "Messages" => "Message".into(),
        "Successful" => format!("{action}ResultEntry").into(),
        "Failed" => "BatchResultErrorEntry".into(),
        "Results" => format!("{action}ResultEntry").into(),
        other => other.into(),
    }
}

fn text(value: &Value, out: &mut String) {
    match value {
        Value::String(s) => escape(s, out),
        Value::Null => {}
        other => out.push_str(&other.to_string()),
    }
}

fn element(name: &str, value: &Value, action: &str, out: &mut String) {
    out.push('<');
    out.push_str(name);
    out.push('>');
    match value {
        Value::Object(members) => write_members(members, action, out),
        other => text(other, out),
    }
    out.push_str("</");
    out.push_str(name);
    out.push('>');
}

fn write_members(members: &Map<String, Value>, action: &str, out: &mut String) {
    for (key, value) in members {
        match (key.as_str(), value) {
            ("Attributes", Value::Object(map)) => {
                for (name, v) in map {
                    out.push_str("<Attribute><Name>");
                    escape(name, out);
                    out.push_str("</Name>");
                    element("Value", v, action, out);
                    out.push_str("</Attribute>");
                }
            }
            ("Tags", Value::Object(map)) => {
                for (name, v) in map {
                    out.push_str("<Tag><Key>");
                    escape(name, out);
                    out.push_str("</Key>");
                    element("Value", v, action, out);
                    out.push_str("</Tag>");
                }
            }
            ("MessageAttributes", Value::Object(map)) => {
                for (name, v) in map {
                    out.push_str("<MessageAttribute><Name>");
                    escape(name, out);
                    out.push_str("</Name>");
                    element("Value", v, action, out);
                    out.push_str("</MessageAttribute>");
                }
            }
            (_, Value::Array(items)) => {
                let item = list_item(key, action);
                for v in items {
                    element(&item, v, action, out);
                }
            }
            _ => element(key, value, action, out),
        }
    }
}

/// A complete success response for `action`.
pub fn response(action: SqsAction, result: &Value, request_id: &str, namespace: &str) -> String {
    let (name, has_result) = (action.name(), action.xml_result());
    // AWS writes a receive that found nothing as `<ReceiveMessageResult/>` (observed on AWS;
    // other empty results are not known to differ, so they keep both tags).
    let self_closing = action == SqsAction::ReceiveMessage;
    let action = name;
    let mut out = String::with_capacity(256);
    out.push_str("<?xml version=\"1.0\"?><");
    out.push_str(action);
    out.push_str("Response xmlns=\"");
    out.push_str(namespace);
    out.push_str("\">");
    if has_result {
        out.push('<');
        out.push_str(action);
        out.push_str("Result>");
        let empty = out.len();
        if let Value::Object(members) = result {
            write_members(members, action, &mut out);
        }
        if self_closing && out.len() == empty {
            out.truncate(empty - 1);
            out.push_str("/>");
        } else {
            out.push_str("</");
            out.push_str(action);
            out.push_str("Result>");
        }
    }
    out.push_str("<ResponseMetadata><RequestId>");
    out.push_str(request_id);
    out.push_str("</RequestId></ResponseMetadata></");
    out.push_str(action);
    out.push_str("Response>");
    out
}

/// Which service's error shape: SQS's carries an empty `<Detail/>`, SNS's has none (AWS's
/// answers differ so, and botocore reports `Error.Detail` only when the element is there).
/// Source: shared/spec/sns.md §8, "Error: FIFO publish without group id"; sqs.md's Query errors.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ErrorShape {
    Sqs,
    Sns,
}

/// An `ErrorResponse` document.
pub fn error(
    shape: ErrorShape,
    (fault, code): (&str, &str),
    message: &str,
    request_id: &str,
    namespace: &str,
) -> String {
    let mut out = String::with_capacity(256);
    out.push_str("<?xml version=\"1.0\"?><ErrorResponse xmlns=\"");
    out.push_str(namespace);
    out.push_str("\"><Error><Type>");
    out.push_str(fault);
    out.push_str("</Type><Code>");
    escape(code, &mut out);
    out.push_str("</Code><Message>");
    escape(message, &mut out);
    out.push_str("</Message>");
    if shape == ErrorShape::Sqs {
        out.push_str("<Detail/>");
    }
    out.push_str("</Error><RequestId>");
    out.push_str(request_id);
    out.push_str("</RequestId></ErrorResponse>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn escapes_carriage_return_and_quotes() {
        let mut out = String::new();
        escape("a\r\n\"<&>'", &mut out);
        assert_eq!(out, "a&#xD;\n&quot;&lt;&amp;&gt;'");
    }

    #[test]
    fn characters_xml_cannot_hold_become_replacement_characters() {
        let mut out = String::new();
        escape("a\u{0}b\u{1b}c\u{fffe}d\te\u{10000}", &mut out);
        assert_eq!(out, "a\u{fffd}b\u{fffd}c\u{fffd}d\te\u{10000}");
    }

    #[test]
    fn receive_message_golden() {
        let result = json!({"Messages":[{
            "MessageId":"m1","ReceiptHandle":"h","MD5OfBody":"5d41402abc4b2a76b9719d911017c592","Body":"hello",
            "Attributes":{"SenderId":"s","MessageGroupId":"g1"},
            "MD5OfMessageAttributes":"ae7155c6026991b6d54b11589678bf9c",
            "MessageAttributes":{"Foo":{"StringValue":"Bar","DataType":"String"}}}]});
        assert_eq!(
            response(SqsAction::ReceiveMessage, &result, "rid", SQS_NAMESPACE),
            concat!(
                r#"<?xml version="1.0"?><ReceiveMessageResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/">"#,
                "<ReceiveMessageResult><Message><MessageId>m1</MessageId><ReceiptHandle>h</ReceiptHandle>",
                "<MD5OfBody>5d41402abc4b2a76b9719d911017c592</MD5OfBody><Body>hello</Body>",
                "<Attribute><Name>SenderId</Name><Value>s</Value></Attribute>",
                "<Attribute><Name>MessageGroupId</Name><Value>g1</Value></Attribute>",
                "<MD5OfMessageAttributes>ae7155c6026991b6d54b11589678bf9c</MD5OfMessageAttributes>",
                "<MessageAttribute><Name>Foo</Name><Value><StringValue>Bar</StringValue><DataType>String</DataType></Value></MessageAttribute>",
                "</Message></ReceiveMessageResult>",
                "<ResponseMetadata><RequestId>rid</RequestId></ResponseMetadata></ReceiveMessageResponse>"
            )
        );
    }

    #[test]
    fn empty_and_no_result_shapes() {
        assert!(
            response(SqsAction::ReceiveMessage, &json!({}), "r", SQS_NAMESPACE)
                .contains("<ReceiveMessageResult/><ResponseMetadata>")
        );
        assert!(
            !response(SqsAction::DeleteMessage, &json!({}), "r", SQS_NAMESPACE).contains("Result")
        );
        let batch = response(
            SqsAction::SendMessageBatch,
            &json!({"Successful":[{"Id":"a"}],"Failed":[{"Id":"b","SenderFault":true,"Code":"X"}]}),
            "r",
            SQS_NAMESPACE,
        );
        assert!(
            batch.contains("<SendMessageBatchResultEntry><Id>a</Id></SendMessageBatchResultEntry>")
        );
        assert!(batch.contains("<BatchResultErrorEntry><Id>b</Id><SenderFault>true</SenderFault><Code>X</Code></BatchResultErrorEntry>"));
    }
}
