//! `application/x-www-form-urlencoded` pairs (Query requests' URL query string and body),
//! decoded strictly: a name or value whose bytes are not UTF-8 is refused rather than stored
//! altered (lossy decoding would turn it into U+FFFD and answer with the altered body's MD5).

use std::borrow::Cow;

use percent_encoding::percent_decode;

/// Decodes `input` into (name, value) pairs, in order; empty segments (`a=1&&b=2`) are skipped.
pub fn decode(input: &[u8]) -> Result<Vec<(String, String)>, NotUtf8> {
    let mut pairs = Vec::new();
    for segment in input.split(|&b| b == b'&') {
        if segment.is_empty() {
            continue;
        }
        let (name, value) = match segment.iter().position(|&b| b == b'=') {
            Some(at) => (&segment[..at], &segment[at + 1..]),
            None => (segment, &[][..]),
        };
        let name = decode_one(name).ok_or(NotUtf8)?;
        let value = decode_one(value).ok_or(NotUtf8)?;
        pairs.push((name, value));
    }
    Ok(pairs)
}

/// A parameter whose decoded bytes are not UTF-8.
#[derive(Debug, PartialEq, Eq)]
pub struct NotUtf8;

/// One name or value, `+` as a space and `%XX` as its byte; none where that is not UTF-8.
pub fn decode_one(raw: &[u8]) -> Option<String> {
    let plus_free: Cow<[u8]> = if raw.contains(&b'+') {
        Cow::Owned(
            raw.iter()
                .map(|&b| if b == b'+' { b' ' } else { b })
                .collect(),
        )
    } else {
        Cow::Borrowed(raw)
    };
    percent_decode(&plus_free)
        .decode_utf8()
        .ok()
        .map(Cow::into_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn decodes_like_a_browser_form() {
        assert_eq!(
            decode(b"Action=SendMessage&MessageBody=a+b%2Bc%0D%0A%C3%AF&&Empty=&Flag").unwrap(),
            pairs(&[
                ("Action", "SendMessage"),
                ("MessageBody", "a b+c\r\nï"),
                ("Empty", ""),
                ("Flag", "")
            ])
        );
        assert_eq!(decode(b"").unwrap(), pairs(&[]));
        // A stray percent sign is kept, as form_urlencoded does.
        assert_eq!(decode(b"a=100%").unwrap(), pairs(&[("a", "100%")]));
    }

    #[test]
    fn bytes_that_are_not_utf8_are_refused() {
        assert_eq!(decode(b"MessageBody=%FF%FE"), Err(NotUtf8));
        assert_eq!(decode(b"Message\xffBody=x"), Err(NotUtf8));
        assert_eq!(decode(b"MessageBody=\xc3"), Err(NotUtf8));
        // U+FFFD sent as such is a character like any other.
        assert_eq!(
            decode("b=\u{FFFD}".as_bytes()).unwrap(),
            pairs(&[("b", "\u{FFFD}")])
        );
    }
}
