//! The verifier against the AWS SDK's own signer (aws-sigv4) as the reference: what it signs
//! passes, and every kind of tampering or bad credential is told apart.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, SignableBody, SignableRequest, SignatureLocation, SigningSettings,
};
use aws_sigv4::sign::v4;

use super::*;

const NOW: i64 = 1_764_000_000; // 2025-11-24T16:00:00Z

/// A request as the SDK would send it: (headers, query) after signing.
struct Signed {
    headers: Vec<(String, String)>,
    query: String,
}

fn sign_request(
    method: &str,
    path_and_query: &str,
    body: &[u8],
    presign: bool,
    secret: &str,
    at: i64,
) -> Signed {
    let identity = Credentials::new("AKIDORDERLY", secret, None, None, "test").into();
    let mut settings = SigningSettings::default();
    if presign {
        settings.signature_location = SignatureLocation::QueryParams;
        settings.expires_in = Some(Duration::from_secs(300));
    }
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("sqs")
        .time(UNIX_EPOCH + Duration::from_secs(at as u64))
        .settings(settings)
        .build()
        .unwrap()
        .into();
    let base = [
        ("host", "localhost:4566"),
        ("content-type", "application/x-amz-json-1.0"),
    ];
    let uri = format!("http://localhost:4566{path_and_query}");
    let signable = SignableRequest::new(
        method,
        uri.as_str(),
        base.iter().copied(),
        SignableBody::Bytes(body),
    )
    .unwrap();
    let (instructions, _) = sign(signable, &params).unwrap().into_parts();
    let (added, params) = instructions.into_parts();
    let mut headers: Vec<(String, String)> = base
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    headers.extend(
        added
            .iter()
            .map(|h| (h.name().to_ascii_lowercase(), h.value().to_string())),
    );
    let mut query = path_and_query
        .split_once('?')
        .map(|(_, q)| q.to_string())
        .unwrap_or_default();
    for (k, v) in params {
        if !query.is_empty() {
            query.push('&');
        }
        query.push_str(&format!("{k}={}", encode(&v)));
    }
    Signed { headers, query }
}

fn check(
    signed: &Signed,
    method: &str,
    path: &str,
    body: &[u8],
    now: i64,
) -> Result<Verified, SignatureError> {
    let headers: Vec<(&str, &str)> = signed
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let arrived = Arrived {
        method,
        path,
        query: &signed.query,
        headers: &headers,
        body,
    };
    verify(&arrived, now, |key| {
        (key == "AKIDORDERLY").then_some("right secret")
    })
}

#[test]
fn what_the_sdk_signs_verifies_and_names_the_key() {
    let body = br#"{"QueueUrl":"http://localhost:4566/000000000000/q.fifo","MessageBody":"a b+c"}"#;
    let signed = sign_request("POST", "/", body, false, "right secret", NOW);
    let verified = check(&signed, "POST", "/", body, NOW).unwrap();
    assert_eq!(verified.access_key, "AKIDORDERLY");
    assert_eq!(
        (verified.region.as_str(), verified.service.as_str()),
        ("us-east-1", "sqs")
    );
    // A Query request to a queue's path with parameters in the URL.
    let path = "/000000000000/q.fifo";
    let signed = sign_request(
        "GET",
        "/000000000000/q.fifo?Action=ReceiveMessage&AttributeName.1=All&MessageAttributeName.1=a%20b",
        b"",
        false,
        "right secret",
        NOW,
    );
    check(&signed, "GET", path, b"", NOW).unwrap();
}

#[test]
fn a_presigned_url_verifies_until_it_expires() {
    let signed = sign_request("GET", "/?Action=ListQueues", b"", true, "right secret", NOW);
    assert!(
        signed.query.contains("X-Amz-Signature="),
        "{}",
        signed.query
    );
    check(&signed, "GET", "/", b"", NOW + 299).unwrap();
    assert_eq!(
        check(&signed, "GET", "/", b"", NOW + 301),
        Err(SignatureError::Expired)
    );
}

#[test]
fn tampering_a_wrong_secret_an_unknown_key_and_a_stale_date_are_told_apart() {
    let body = br#"{"QueueName":"q"}"#;
    let signed = sign_request("POST", "/", body, false, "right secret", NOW);
    assert_eq!(
        check(&signed, "POST", "/", br#"{"QueueName":"r"}"#, NOW),
        Err(SignatureError::Mismatch)
    );
    assert_eq!(
        check(&signed, "PUT", "/", body, NOW),
        Err(SignatureError::Mismatch)
    );
    let wrong = sign_request("POST", "/", body, false, "wrong secret", NOW);
    assert_eq!(
        check(&wrong, "POST", "/", body, NOW),
        Err(SignatureError::Mismatch)
    );
    let mut unknown = sign_request("POST", "/", body, false, "right secret", NOW);
    for (name, value) in &mut unknown.headers {
        if name == "authorization" {
            *value = value.replace("AKIDORDERLY", "AKIDSTRANGER");
        }
    }
    assert_eq!(
        check(&unknown, "POST", "/", body, NOW),
        Err(SignatureError::UnknownKey("AKIDSTRANGER".into()))
    );
    assert_eq!(
        check(&signed, "POST", "/", body, NOW + MAX_SKEW_SECONDS + 1),
        Err(SignatureError::Expired)
    );
    check(&signed, "POST", "/", body, NOW - MAX_SKEW_SECONDS).unwrap();
    // A declared payload hash that is not the body's.
    let mut lying = sign_request("POST", "/", body, false, "right secret", NOW);
    let other = hex(&Sha256::digest(b"another body"));
    lying.headers.push(("x-amz-content-sha256".into(), other));
    assert_eq!(
        check(&lying, "POST", "/", body, NOW),
        Err(SignatureError::Mismatch)
    );
}

#[test]
fn unsigned_and_malformed_requests() {
    let none = Signed {
        headers: vec![("host".into(), "localhost".into())],
        query: "Action=ListQueues".into(),
    };
    assert_eq!(
        check(&none, "GET", "/", b"", NOW),
        Err(SignatureError::Missing)
    );
    for authorization in [
        "AWS4-HMAC-SHA256 SignedHeaders=host, Signature=00",
        "AWS4-HMAC-SHA256 Credential=AKID/2025/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=00",
        "AWS4-HMAC-SHA256 Credential=AKID/20251124/us-east-1/sqs/aws4_request, Signature=00",
        "AWS AKID:signature",
        "",
    ] {
        let bad = Signed {
            headers: vec![
                ("host".into(), "localhost".into()),
                ("x-amz-date".into(), "20251124T160000Z".into()),
                ("authorization".into(), authorization.into()),
            ],
            query: String::new(),
        };
        assert!(
            matches!(check(&bad, "GET", "/", b"", NOW), Err(SignatureError::Incomplete(_))),
            "{authorization}"
        );
    }
}

#[test]
fn dates_parse_to_unix_seconds() {
    assert_eq!(parse_amz_date("19700101T000000Z"), Some(0));
    assert_eq!(parse_amz_date("20251124T160000Z"), Some(NOW));
    assert_eq!(parse_amz_date("20240229T235959Z"), Some(1_709_251_199));
    assert_eq!(parse_amz_date("2025-11-24T16:00:00Z"), None);
    assert_eq!(parse_amz_date("20251324T160000Z"), None);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(now > NOW);
}
