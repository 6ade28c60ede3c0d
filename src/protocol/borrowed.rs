//! Strings that borrow from the request body when they can: serde borrows a `Cow<str>` only as
//! a field of its own, never inside an `Option`, hence this wrapper.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};

#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

/// An optional string, borrowed unless the JSON escaped something in it.
pub fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    Ok(Option::<Text<'de>>::deserialize(d)?.map(|t| t.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Probe<'a> {
        #[serde(borrow, deserialize_with = "text", default)]
        plain: Option<Cow<'a, str>>,
        #[serde(borrow, deserialize_with = "text", default)]
        escaped: Option<Cow<'a, str>>,
        #[serde(borrow, deserialize_with = "text", default)]
        absent: Option<Cow<'a, str>>,
    }

    #[test]
    fn borrows_plain_strings_and_owns_unescaped_ones() {
        let json = r#"{"plain":"price 42","escaped":"a\"b\n"}"#;
        let probe: Probe = serde_json::from_str(json).unwrap();
        assert!(matches!(probe.plain, Some(Cow::Borrowed("price 42"))));
        assert!(matches!(probe.escaped.as_deref(), Some("a\"b\n")));
        assert!(matches!(probe.escaped, Some(Cow::Owned(_))));
        assert!(probe.absent.is_none());

        let value = serde_json::json!({"plain": "q", "absent": null});
        let probe = Probe::deserialize(&value).unwrap();
        assert!(matches!(probe.plain, Some(Cow::Borrowed("q"))));
        assert!(probe.absent.is_none());
    }
}
