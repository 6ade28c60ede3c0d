//! Passwords blanked out of text an operator sees (the errors printed when the settings do not
//! parse): over-blanking is harmless there, a password let through is not, so whatever could be
//! one is blanked.

/// `text` with `***` in place of:
/// - the password of every URL's user information (`scheme://user:PASSWORD@host`, up to the
///   last `@` on the line before the next URL, whatever the password holds: spaces, quotes,
///   `/`, `@`, `:`; with no `@` after it, everything after the first `:` up to a space or
///   quote, as a URL cut short by the splitting of a list may end in half a password);
/// - the value of every `password` parameter, in a connection string (`password=…`,
///   `password = '…'`, quoted with `\'` escapes, any whitespace around `=`, an unquoted value
///   running to the next unescaped whitespace) or a URL's query (`?password=…`,
///   `&pass%77ord=…`: names percent-decoded first; what follows in the query goes with it).
pub fn without_passwords(text: &str) -> String {
    blank_parameters(&blank_user_information(text))
}

/// Ends a URL's user information when no `@` follows.
fn ends_value(c: char) -> bool {
    c == '\'' || c == '"' || c.is_whitespace()
}

fn blank_user_information(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        // The line, up to the next URL: a password may hold anything but a line's end.
        let line = after.find(['\n', '\r']).unwrap_or(after.len());
        let line = after[..line]
            .find("://")
            .map_or(line, |next| next.min(line));
        // Its last '@' ends the user information (a path holding one is blanked with it);
        // with none, the first space or quote does.
        let (user_info, resume) = match after[..line].rfind('@') {
            Some(at_sign) => (&after[..at_sign], at_sign),
            None => {
                let end = after[..line].find(ends_value).unwrap_or(line);
                (&after[..end], end)
            }
        };
        match user_info.find(':') {
            Some(colon) => {
                out.push_str(&user_info[..=colon]);
                out.push_str("***");
            }
            None => out.push_str(user_info),
        }
        rest = &after[resume..];
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

/// A key at `at` (letters, digits, `_`, `%`) followed by `=` (whitespace around it allowed):
/// where the key ends and where its value begins.
fn key_then_equals(text: &str, at: usize) -> Option<(usize, usize)> {
    let key_len = text[at..]
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '%'))
        .unwrap_or(text.len() - at);
    if key_len == 0 {
        return None;
    }
    let key_end = at + key_len;
    let after_key = text[key_end..].trim_start_matches(char::is_whitespace);
    let after_equals = after_key
        .strip_prefix('=')?
        .trim_start_matches(char::is_whitespace);
    Some((key_end, text.len() - after_equals.len()))
}

/// Where the value beginning at `start` ends: past its closing quote when quoted (`'`, or `"`
/// though no connection string takes it; `\` escapes), else at the first whitespace not
/// escaped by `\` (a URL's `&` and what follows it go with the value).
fn value_end(text: &str, start: usize) -> usize {
    let value = &text[start..];
    let quote = value.chars().next().filter(|&c| c == '\'' || c == '"');
    let mut escaped = false;
    for (i, c) in value.char_indices().skip(usize::from(quote.is_some())) {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            c if Some(c) == quote => return start + i + c.len_utf8(),
            c if quote.is_none() && c.is_whitespace() => return start + i,
            _ => {}
        }
    }
    text.len()
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
            // In a URL's query, by name or percent-encoded name (what follows it in the query
            // goes with it).
            (
                "postgres://h/db?user=u&password=p4ss&sslmode=require",
                "postgres://h/db?user=u&password=***",
            ),
            (
                "postgres://h/db?pass%77ord=p4ss&sslmode=require x",
                "postgres://h/db?pass%77ord=*** x",
            ),
            // Tabs around '=', quotes, '&' and escaped spaces inside an unquoted value.
            ("password\t=\tsecret user=u", "password\t=\t*** user=u"),
            (r"password=ab'c&d\ e user=u", "password=*** user=u"),
            (r#"password="x y" user=u"#, "password=*** user=u"),
            // A URL whose password holds a space or a quote; one cut short by a list's split.
            (
                "'postgres://u:pa ss@h:x/db' for",
                "'postgres://u:***@h:x/db' for",
            ),
            ("'postgres://u:it's@h:x/db'", "'postgres://u:***@h:x/db'"),
            (
                "invalid value '2-3=postgres://u:pa' for",
                "invalid value '2-3=postgres://u:***' for",
            ),
            // Nothing past the line's end is taken for a password.
            (
                "postgres://u@h/db\nmail a:b@c",
                "postgres://u@h/db\nmail a:b@c",
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
