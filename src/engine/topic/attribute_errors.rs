//! SNS's own words for a message attribute it refuses (shared/spec/sns.md §3.11, step 3,
//! AWS-observed). SQS words the same faults differently (`message::validate_attribute`), and
//! SDK users read these texts, so each service answers in its own.

use crate::engine::message::{attribute_name_fault, AttributeData, AttributeValue, NameFault};

/// What SNS says of this attribute's name, type or value, if it refuses one of them. Rules
/// SNS's texts are not known for (reserved prefixes, number syntax, characters in values) are
/// left to the shared check.
pub fn sns_attribute_error(name: &str, value: &AttributeValue) -> Option<String> {
    name_error(name)
        .or_else(|| type_error(name, &value.data_type))
        .or_else(|| value_error(name, value))
}

/// SNS's words for the name rules (`message::attribute_name_fault`); an empty or reserved
/// name is left to the shared check.
fn name_error(name: &str) -> Option<String> {
    Some(match attribute_name_fault(name)? {
        NameFault::TooLong => "Length of message attribute name must be less than 256 bytes.".into(),
        NameFault::Character(bad) => format!(
            "Invalid non-alphanumeric character '#x{:X}' was found in the message attribute name. Can only include alphanumeric characters, hyphens, underscores, or dots.",
            bad as u32
        ),
        NameFault::LeadingDot => {
            "Invalid message attribute name starting with character '.' was found.".into()
        }
        NameFault::TrailingDot => {
            "Invalid message attribute name ending with character '.' was found.".into()
        }
        NameFault::SuccessiveDots => {
            "Message attribute name can not have successive '.' character.".into()
        }
        NameFault::Empty | NameFault::Reserved => return None,
    })
}

/// A type is `String`, `Number` or `Binary`, optionally followed by `.label`; a prefix with
/// nothing after its dot (`String.`) is refused too.
fn type_error(name: &str, data_type: &str) -> Option<String> {
    let (base, label) = match data_type.split_once('.') {
        Some((base, label)) => (base, Some(label)),
        None => (data_type, None),
    };
    let known = matches!(base, "String" | "Number" | "Binary");
    if data_type.is_empty() || known && label != Some("") {
        return None;
    }
    Some(format!(
        "The message attribute '{name}' has an invalid message attribute type, the set of supported type prefixes is Binary, Number, and String."
    ))
}

fn value_error(name: &str, value: &AttributeValue) -> Option<String> {
    let data_type = &value.data_type;
    let binary = data_type.starts_with("Binary");
    let empty = match &value.data {
        AttributeData::String(s) => s.is_empty(),
        AttributeData::Binary(b) => b.is_empty(),
    };
    let field = match (&value.data, binary) {
        (AttributeData::String(_), true) => Some("Binary"),
        (AttributeData::Binary(_), false) => Some("String"),
        _ => None,
    };
    if let Some(field) = field.filter(|_| !empty) {
        return Some(format!(
            "The message attribute '{name}' with type '{data_type}' must use field '{field}'."
        ));
    }
    empty.then(|| format!(
        "The message attribute '{name}' must contain non-empty message attribute value for message attribute type '{data_type}'."
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(data_type: &str, value: &str) -> AttributeValue {
        AttributeValue {
            data_type: data_type.into(),
            data: AttributeData::String(value.into()),
        }
    }

    fn binary(data_type: &str, value: &[u8]) -> AttributeValue {
        AttributeValue {
            data_type: data_type.into(),
            data: AttributeData::Binary(value.to_vec()),
        }
    }

    #[test]
    fn each_fault_in_sns_words() {
        let ok = string("String", "v");
        let cases: &[(&str, &AttributeValue, Option<&str>)] = &[
            ("price", &ok, None),
            ("attr.1øßä", &ok, None),
            ("n", &string("Number.float", "1.5"), None),
            ("b", &binary("Binary.png", b"x"), None),
            ("a^b", &ok, Some("Invalid non-alphanumeric character '#x5E' was found in the message attribute name. Can only include alphanumeric characters, hyphens, underscores, or dots.")),
            (".a", &ok, Some("Invalid message attribute name starting with character '.' was found.")),
            ("a.", &ok, Some("Invalid message attribute name ending with character '.' was found.")),
            ("a..b", &ok, Some("Message attribute name can not have successive '.' character.")),
            ("t", &string("Strin", "v"), Some("The message attribute 't' has an invalid message attribute type, the set of supported type prefixes is Binary, Number, and String.")),
            ("t", &string("String.", "v"), Some("The message attribute 't' has an invalid message attribute type, the set of supported type prefixes is Binary, Number, and String.")),
            ("e", &string("String", ""), Some("The message attribute 'e' must contain non-empty message attribute value for message attribute type 'String'.")),
            ("f", &binary("String", b"x"), Some("The message attribute 'f' with type 'String' must use field 'String'.")),
            ("g", &string("Binary", "x"), Some("The message attribute 'g' with type 'Binary' must use field 'Binary'.")),
        ];
        for (name, value, expected) in cases {
            assert_eq!(
                sns_attribute_error(name, value).as_deref(),
                *expected,
                "{name}"
            );
        }
        let long = "a".repeat(257);
        assert_eq!(
            sns_attribute_error(&long, &ok).as_deref(),
            Some("Length of message attribute name must be less than 256 bytes.")
        );
        assert_eq!(sns_attribute_error(&"a".repeat(256), &ok), None);
    }
}
