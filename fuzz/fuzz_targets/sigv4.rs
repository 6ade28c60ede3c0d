//! The SigV4 verifier on arbitrary Authorization headers, dates, query strings and bodies.
//! Input: authorization NUL x-amz-date NUL query NUL body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use orderly::http::sigv4::{verify, Arrived};

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(4, |&b| b == 0);
    let mut text = || String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let (authorization, date, query) = (text(), text(), text());
    let body = parts.next().unwrap_or_default();
    let mut headers = vec![("host", "localhost:4566"), ("x-amz-date", date.as_str())];
    if !authorization.is_empty() {
        headers.push(("authorization", authorization.as_str()));
    }
    let arrived = Arrived {
        method: "POST",
        path: "/000000000000/q.fifo",
        query: &query,
        headers: &headers,
        body,
    };
    let _ = verify(&arrived, 1_764_000_000, |key| (key == "AKID").then_some("secret"));
});
