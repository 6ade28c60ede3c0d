//! Passwords blanked out of text an operator sees (the errors printed when the settings do not
//! parse): over-blanking is harmless there, a password let through is not, so whatever could be
//! one is blanked.

/// `text` with `***` in place of:
/// - the password of every URL's user information (`scheme://user:PASSWORD@host`, up to the
///   last `@` before a space or quote, whatever the password holds: `/`, `@`, `:`);
/// - the value of every `password` parameter, in a connection string (`password=…`,
///   `password = '…'`, quoted with `\'` escapes) or a URL's query (`?password=…`,
///   `&pass%77ord=…`: names percent-decoded first).
pub fn without_passwords(text: &str) -> String {
    blank_parameters(&blank_user_information(text))
}

/// Ends a URL's user information, a parameter's value, or a key.
fn ends_value(c: char) -> bool {
    c == '\'' || c == '"' || c.is_whitespace()
}

fn blank_user_information(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        let end = after.find(ends_value).unwrap_or(after.len());
        // The last '@' before the end: a password may hold '/' and '@' (a path may too, and
        // is then blanked with it).
        match after[..end].rfind('@') {
            Some(at_sign) => {
                let user_info = &after[..at_sign];
                match user_info.find(':') {
                    Some(colon) => {
                        out.push_str(&user_info[..=colon]);
                        out.push_str("***");
                    }
                    None => out.push_str(user_info),
                }
                rest = &after[at_sign..];
            }
            None => rest = after,
        }
    }
    out.push_str(rest);
    out
}

/// Whether `key` (as written, perhaps percent-encoded) names the password.
fn is_password(key: &str) -> bool {
    let decoded = percent_encoding::percent_decode_str(key).decode_utf8_lossy();
    decoded.trim().eq_ignore_ascii_case("password")
}

fn blank_parameters(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    // Where a key may begin: the start, or after a separator of parameters.
    let mut key_may_begin = true;
    while let Some(c) = text[at..].chars().next() {
        if key_may_begin {
            if let Some((key_end, value_start)) = key_then_equals(text, at) {
                if is_password(&text[at..key_end]) {
                    out.push_str(&text[at..value_start]);
                    out.push_str("***");
                    at = value_end(text, value_start);
                    key_may_begin = false;
                    continue;
                }
            }
        }
        out.push(c);
        at += c.len_utf8();
        key_may_begin = matches!(c, '?' | '&' | ';' | '\'' | '"') || c.is_whitespace();
    }
    out
}

/// A key at `at` (letters, digits, `_`, `%`) followed by `=` (spaces around it allowed): where
/// the key ends and where its value begins.
fn key_then_equals(text: &str, at: usize) -> Option<(usize, usize)> {
    let key_len = text[at..]
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '%'))
        .unwrap_or(text.len() - at);
    if key_len == 0 {
        return None;
    }
    let key_end = at + key_len;
    let after_key = text[key_end..].trim_start_matches(' ');
    let after_equals = after_key.strip_prefix('=')?.trim_start_matches(' ');
    Some((key_end, text.len() - after_equals.len()))
}

/// Where the value beginning at `start` ends: past its closing quote when quoted (`\'` and
/// `\\` escaped), else at a space, a quote or `&`.
fn value_end(text: &str, start: usize) -> usize {
    let value = &text[start..];
    if let Some(quoted) = value.strip_prefix('\'') {
        let mut escaped = false;
        for (i, c) in quoted.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '\'' => return start + 1 + i + 1,
                _ => {}
            }
        }
        return text.len();
    }
    start
        + value
            .find(|c: char| ends_value(c) || c == '&')
            .unwrap_or(value.len())
}

#[cfg(test)]
mod tests {
    use super::without_passwords;

    #[test]
    fn passwords_are_blanked_in_urls_and_connection_strings() {
        let cases = [
            (
                "invalid value 'postgres://u:s3cret@h:x/db' for '--storage'",
                "invalid value 'postgres://u:***@h:x/db' for '--storage'",
            ),
            (
                "postgresql://u:p@ss@h1,h2/db and http://host/path",
                "postgresql://u:***@h1,h2/db and http://host/path",
            ),
            (
                "'host=h password=p4ss user=u'",
                "'host=h password=*** user=u'",
            ),
            ("postgres://u@h/db", "postgres://u@h/db"),
            // A base64 password holds '/' and '+'.
            (
                "postgres://u:ab/c+d==@h:5432/db",
                "postgres://u:***@h:5432/db",
            ),
            // Quoted, with an escaped quote and spaces inside.
            (
                r"host=h password='a b\'c' user=u",
                r"host=h password=*** user=u",
            ),
            (
                "host=h password = p4ss user=u",
                "host=h password = *** user=u",
            ),
            ("host=h PASSWORD=p4ss", "host=h PASSWORD=***"),
            // In a URL's query, by name or percent-encoded name.
            (
                "postgres://h/db?user=u&password=p4ss&sslmode=require",
                "postgres://h/db?user=u&password=***&sslmode=require",
            ),
            (
                "postgres://h/db?pass%77ord=p4ss&sslmode=require",
                "postgres://h/db?pass%77ord=***&sslmode=require",
            ),
            (
                "a passwordless=x password_file=y",
                "a passwordless=x password_file=y",
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(without_passwords(text), expected, "{text}");
        }
    }
}
