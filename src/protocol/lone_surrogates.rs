//! JSON escapes of lone UTF-16 surrogates (`\ud800` with no trailing half after it, or a
//! trailing half alone). AWS's JSON front end reads them into its strings, and SQS then refuses
//! a message body or attribute holding one as invalid contents; serde_json refuses the whole
//! request instead. So a send whose request holds one is read again with each lone half
//! written as U+FFFF, which the same checks refuse, entry by entry in a batch.

/// What a lone half is written as: a character no message body or attribute may hold.
const STAND_IN: &[u8] = br"\uffff";

/// `body` with every escaped lone surrogate written as `STAND_IN`; none when it has none.
pub fn replaced(body: &[u8]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    let mut kept = 0;
    let mut at = 0;
    while at < body.len() {
        if body[at] != b'\\' {
            at += 1;
            continue;
        }
        let Some(unit) = escaped_unit(body, at) else {
            // Any other escape (`\\` included) is two bytes long.
            at += 2;
            continue;
        };
        let pair = (0xD800..0xDC00).contains(&unit)
            && escaped_unit(body, at + 6).is_some_and(|low| (0xDC00..0xE000).contains(&low));
        if pair {
            at += 12;
        } else if (0xD800..0xE000).contains(&unit) {
            let out = out.get_or_insert_with(|| Vec::with_capacity(body.len()));
            out.extend_from_slice(&body[kept..at]);
            out.extend_from_slice(STAND_IN);
            at += 6;
            kept = at;
        } else {
            at += 6;
        }
    }
    let mut out = out?;
    out.extend_from_slice(&body[kept..]);
    Some(out)
}

/// The UTF-16 unit of a `\uXXXX` escape at `at`, if one is there.
fn escaped_unit(body: &[u8], at: usize) -> Option<u32> {
    let escape = body.get(at..at + 6)?;
    if &escape[..2] != br"\u" {
        return None;
    }
    let hex = std::str::from_utf8(&escape[2..]).ok()?;
    u32::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::replaced;

    fn read(body: &str) -> Option<String> {
        replaced(body.as_bytes()).map(|b| String::from_utf8(b).unwrap())
    }

    #[test]
    fn only_lone_halves_are_replaced() {
        assert_eq!(
            read(r#"{"a":"x\ud800y"}"#).as_deref(),
            Some(r#"{"a":"x\uffffy"}"#)
        );
        assert_eq!(
            read(r#"{"a":"\uDC00"}"#).as_deref(),
            Some(r#"{"a":"\uffff"}"#)
        );
        // A leading half followed by another leading half: both lone.
        assert_eq!(
            read(r#""\ud800\ud801""#).as_deref(),
            Some(r#""\uffff\uffff""#)
        );
        // A leading half at the end of the body.
        assert_eq!(read(r#""\ud800"#).as_deref(), Some(r#""\uffff"#));
        // A pair, an escaped backslash before text that only looks like an escape, other
        // escapes and plain text: nothing to replace.
        assert_eq!(read(r#"{"a":"\ud83d\ude00 \\ud800 \n \u00e9 \u"}"#), None);
        assert_eq!(read("plain"), None);
        // The replaced body reads as JSON, with the stand-in where the half was.
        let fixed = read(r#"["\ud83d\ude00", "\udbff", "\\ud800"]"#).unwrap();
        let parsed: Vec<String> = serde_json::from_str(&fixed).unwrap();
        assert_eq!(parsed, ["\u{1f600}", "\u{ffff}", "\\ud800"]);
    }
}
