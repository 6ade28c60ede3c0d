//! AWS Signature Version 4, checked: the canonical request rebuilt from what arrived, the
//! string to sign, and the HMAC chain from the secret, for an `Authorization` header or a
//! presigned URL. Pure: the caller passes the time and looks secrets up.
//!
//! `--auth` checks requests with it (`auth.rs`); without it, Orderly accepts any signature.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// What arrived, as sent: the raw (still percent-encoded) path and query string.
pub struct Arrived<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a str,
    /// (lower-case name, value), every header as received.
    pub headers: &'a [(&'a str, &'a str)],
    pub body: &'a [u8],
}

/// Why a request's signature was not accepted; each maps to AWS's code.
#[derive(Debug, PartialEq, Eq)]
pub enum SignatureError {
    /// Neither an `Authorization` header nor `X-Amz-Signature`: `MissingAuthenticationToken`.
    Missing,
    /// Parts missing or malformed: `IncompleteSignature`.
    Incomplete(String),
    /// No such access key: `InvalidClientTokenId`.
    UnknownKey(String),
    /// `SignatureDoesNotMatch`.
    Mismatch,
    /// Outside the 5-minute skew, or a presigned URL past its expiry: `RequestExpired`.
    Expired,
}

/// A request whose signature checked out.
#[derive(Debug, PartialEq, Eq)]
pub struct Verified {
    pub access_key: String,
    pub region: String,
    pub service: String,
}

/// Clock skew AWS allows between a request's date and its own clock.
pub const MAX_SKEW_SECONDS: i64 = 300;

struct Parts<'a> {
    access_key: &'a str,
    scope_date: &'a str,
    region: &'a str,
    service: &'a str,
    signed_headers: &'a str,
    signature: &'a str,
    amz_date: &'a str,
    /// Presigned: seconds the URL is valid for.
    expires: Option<i64>,
}

/// Checks the request's signature at `now` (Unix seconds); `secret` looks up a key's secret.
pub fn verify<'s>(
    request: &Arrived<'_>,
    now: i64,
    secret: impl Fn(&str) -> Option<&'s str>,
) -> Result<Verified, SignatureError> {
    let query = decode_query(request.query)?;
    let header = |name: &str| {
        request
            .headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
    };
    let parts = match header("authorization") {
        Some(authorization) => from_header(authorization, header("x-amz-date"))?,
        None if query.iter().any(|(k, _)| k == "X-Amz-Signature") => from_query(&query)?,
        None => return Err(SignatureError::Missing),
    };
    let signed_at = parse_amz_date(parts.amz_date)
        .ok_or_else(|| SignatureError::Incomplete("X-Amz-Date is not yyyymmddThhmmssZ".into()))?;
    if !parts.amz_date.starts_with(parts.scope_date) {
        return Err(SignatureError::Incomplete(
            "the credential's date is not the request's".into(),
        ));
    }
    match parts.expires {
        Some(expires) if now > signed_at + expires || signed_at > now + MAX_SKEW_SECONDS => {
            return Err(SignatureError::Expired)
        }
        None if (now - signed_at).abs() > MAX_SKEW_SECONDS => return Err(SignatureError::Expired),
        _ => {}
    }
    let secret = secret(parts.access_key)
        .ok_or_else(|| SignatureError::UnknownKey(parts.access_key.to_string()))?;
    // Outside S3, presigned URLs sign the body's hash too (an empty one's, for a GET). A
    // declared hash must be the body's: a signature over it would otherwise cover any body.
    let payload_hash = hex(&Sha256::digest(request.body));
    if header("x-amz-content-sha256").is_some_and(|declared| declared != payload_hash) {
        return Err(SignatureError::Mismatch);
    }
    let canonical = canonical_request(request, &query, &parts, &payload_hash);
    let scope = format!(
        "{}/{}/{}/aws4_request",
        parts.scope_date, parts.region, parts.service
    );
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{}\n{scope}\n{}",
        parts.amz_date,
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let mut key = hmac(
        format!("AWS4{secret}").as_bytes(),
        parts.scope_date.as_bytes(),
    );
    for part in [parts.region, parts.service, "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    let expected = hex(&hmac(&key, string_to_sign.as_bytes()));
    // Compared in constant time: the signature is a secret-derived value.
    let matches = expected.len() == parts.signature.len()
        && expected
            .bytes()
            .zip(parts.signature.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    if !matches {
        return Err(SignatureError::Mismatch);
    }
    Ok(Verified {
        access_key: parts.access_key.to_string(),
        region: parts.region.to_string(),
        service: parts.service.to_string(),
    })
}

fn incomplete(what: &str) -> SignatureError {
    SignatureError::Incomplete(format!(
        "Authorization is missing or has a malformed {what}"
    ))
}

/// `AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…, Signature=…`
fn from_header<'a>(
    authorization: &'a str,
    amz_date: Option<&'a str>,
) -> Result<Parts<'a>, SignatureError> {
    let rest = authorization
        .strip_prefix("AWS4-HMAC-SHA256")
        .ok_or_else(|| incomplete("algorithm (only AWS4-HMAC-SHA256 is supported)"))?;
    let field = |name: &str| {
        rest.split(',')
            .map(str::trim)
            .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
    };
    let credential = field("Credential").ok_or_else(|| incomplete("Credential"))?;
    let (access_key, scope_date, region, service) = split_credential(credential)?;
    Ok(Parts {
        access_key,
        scope_date,
        region,
        service,
        signed_headers: field("SignedHeaders").ok_or_else(|| incomplete("SignedHeaders"))?,
        signature: field("Signature").ok_or_else(|| incomplete("Signature"))?,
        amz_date: amz_date.ok_or_else(|| incomplete("X-Amz-Date header"))?,
        expires: None,
    })
}

fn from_query(query: &[(String, String)]) -> Result<Parts<'_>, SignatureError> {
    let get = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .ok_or_else(|| incomplete(name))
    };
    if get("X-Amz-Algorithm")? != "AWS4-HMAC-SHA256" {
        return Err(incomplete("X-Amz-Algorithm"));
    }
    let (access_key, scope_date, region, service) = split_credential(get("X-Amz-Credential")?)?;
    let expires = get("X-Amz-Expires")?
        .parse::<i64>()
        .ok()
        .filter(|e| (1..=604_800).contains(e))
        .ok_or_else(|| incomplete("X-Amz-Expires"))?;
    Ok(Parts {
        access_key,
        scope_date,
        region,
        service,
        signed_headers: get("X-Amz-SignedHeaders")?,
        signature: get("X-Amz-Signature")?,
        amz_date: get("X-Amz-Date")?,
        expires: Some(expires),
    })
}

/// `AKID/yyyymmdd/region/service/aws4_request`
fn split_credential(credential: &str) -> Result<(&str, &str, &str, &str), SignatureError> {
    let parts: Vec<&str> = credential.split('/').collect();
    match parts.as_slice() {
        [key, date, region, service, "aws4_request"]
            if !key.is_empty() && date.len() == 8 && !region.is_empty() && !service.is_empty() =>
        {
            Ok((key, date, region, service))
        }
        _ => Err(incomplete("Credential")),
    }
}

fn canonical_request(
    request: &Arrived<'_>,
    query: &[(String, String)],
    parts: &Parts<'_>,
    payload_hash: &str,
) -> String {
    let mut pairs: Vec<(String, String)> = query
        .iter()
        .filter(|(k, _)| k != "X-Amz-Signature")
        .map(|(k, v)| (encode(k), encode(v)))
        .collect();
    pairs.sort();
    let canonical_query = pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&");
    let mut canonical_headers = String::new();
    for name in parts.signed_headers.split(';') {
        let values: Vec<String> = request
            .headers
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        canonical_headers.push_str(name);
        canonical_headers.push(':');
        canonical_headers.push_str(&values.join(","));
        canonical_headers.push('\n');
    }
    // Services other than S3 sign the path as it was sent, encoded once more.
    let path = if request.path.is_empty() {
        "/".to_string()
    } else {
        encode_path(request.path)
    };
    format!(
        "{}\n{path}\n{canonical_query}\n{canonical_headers}\n{}\n{payload_hash}",
        request.method, parts.signed_headers
    )
}

/// Query pairs percent-decoded (`+` is a literal plus in SigV4, not a space).
fn decode_query(query: &str) -> Result<Vec<(String, String)>, SignatureError> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(s)
                    .decode_utf8()
                    .map(|c| c.into_owned())
                    .map_err(|_| incomplete("query string"))
            };
            Ok((decode(k)?, decode(v)?))
        })
        .collect()
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~')
}

fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if is_unreserved(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn encode_path(path: &str) -> String {
    path.split('/').map(encode).collect::<Vec<_>>().join("/")
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `yyyymmddThhmmssZ` to Unix seconds.
fn parse_amz_date(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    let (year, month, day) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hour, minute, second) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    // Days from 1970-01-01 (Howard Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hour * 3_600 + minute * 60 + second)
}

#[cfg(test)]
mod tests;
