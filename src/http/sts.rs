//! What is not SQS or SNS: STS's GetCallerIdentity, which tools ask before anything else
//! (`aws sts get-caller-identity`, Terraform, CDK, test fixtures reading the account id), and
//! a plain answer naming any other service a request was meant for, rather than a signature
//! error that sends people looking for a credentials problem.

use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};

use crate::protocol::{encode_error, xml, ApiError, ErrorCode, Protocol};
use crate::service::RequestContext;

/// STS's API version, which its Query requests carry.
const STS_VERSION: &str = "2011-06-15";

/// The prefix of STS's JSON targets (`X-Amz-Target`).
const STS_TARGET: &str = "AWSSecurityTokenServiceV20110615.";

/// A Query request for STS or for a service Orderly does not serve, answered; `None` for SQS
/// and SNS. `signing_service` is the credential scope's; `strict` (with `--auth`): an
/// unsigned request is refused, as AWS refuses every one.
pub(super) fn query(
    signing_service: Option<&str>,
    params: &[(String, String)],
    action: &str,
    (ctx, strict): (&RequestContext, bool),
) -> Option<Response> {
    let version = params.iter().find(|(k, _)| k == "Version");
    let sts = signing_service == Some("sts")
        || (signing_service.is_none() && version.is_some_and(|(_, v)| v == STS_VERSION));
    if sts {
        return Some(match action {
            _ if strict && !ctx.authenticated => refused(Protocol::Query, &unsigned(), ctx),
            "GetCallerIdentity" => identity_xml(ctx),
            other => refused(Protocol::Query, &sts_action_not_served(other), ctx),
        });
    }
    let other = signing_service.filter(|s| !matches!(*s, "sqs" | "sns"))?;
    Some(refused(Protocol::Query, &not_served(other), ctx))
}

/// Whether an AWS JSON request that names no SQS operation is for STS or another service
/// (its target, or the service it is signed for, says so).
pub(super) fn elsewhere(target: Option<&str>, signing_service: Option<&str>) -> bool {
    target.is_some_and(|t| t.starts_with(STS_TARGET))
        || signing_service.is_some_and(|s| !matches!(s, "sqs" | "sns"))
}

/// An AWS JSON request whose target is not SQS's, answered.
pub(super) fn json(
    target: Option<&str>,
    signing_service: Option<&str>,
    (ctx, strict): (&RequestContext, bool),
) -> Response {
    if let Some(action) = target.and_then(|t| t.strip_prefix(STS_TARGET)) {
        return match action {
            _ if strict && !ctx.authenticated => refused(Protocol::Json, &unsigned(), ctx),
            "GetCallerIdentity" => identity_json(ctx),
            other => refused(Protocol::Json, &sts_action_not_served(other), ctx),
        };
    }
    let service = signing_service.unwrap_or("another service");
    refused(Protocol::Json, &not_served(service), ctx)
}

fn identity_xml(ctx: &RequestContext) -> Response {
    let mut body = String::with_capacity(512);
    body.push_str(
        "<GetCallerIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\
         <GetCallerIdentityResult><Arn>",
    );
    xml::escape(&ctx.principal, &mut body);
    body.push_str("</Arn><UserId>");
    xml::escape(&ctx.sender_id, &mut body);
    body.push_str("</UserId><Account>");
    xml::escape(&ctx.namespace.account, &mut body);
    body.push_str("</Account></GetCallerIdentityResult><ResponseMetadata><RequestId>");
    xml::escape(&ctx.request_id, &mut body);
    body.push_str("</RequestId></ResponseMetadata></GetCallerIdentityResponse>");
    answer("text/xml", body, ctx)
}

fn identity_json(ctx: &RequestContext) -> Response {
    let body = serde_json::json!({
        "Arn": &*ctx.principal,
        "UserId": &*ctx.sender_id,
        "Account": &*ctx.namespace.account,
    });
    answer(crate::protocol::JSON_CONTENT_TYPE, body.to_string(), ctx)
}

fn answer(content_type: &'static str, body: String, ctx: &RequestContext) -> Response {
    let mut response = body.into_response();
    let headers: &mut HeaderMap = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(id) = HeaderValue::from_str(&ctx.request_id) {
        headers.insert("x-amzn-requestid", id);
    }
    response
}

fn refused(protocol: Protocol, error: &ApiError, ctx: &RequestContext) -> Response {
    super::respond(
        encode_error(protocol, error, &ctx.request_id),
        &ctx.request_id,
    )
}

fn unsigned() -> ApiError {
    ApiError::new(
        ErrorCode::MissingAuthenticationToken,
        "Request is missing Authentication Token",
    )
}

fn sts_action_not_served(action: &str) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidAction,
        format!("Orderly serves STS's GetCallerIdentity only; {action} is not served."),
    )
}

fn not_served(signing_name: &str) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidAction,
        format!(
            "Orderly serves SQS, SNS and STS; this request is for {}.",
            display_name(signing_name)
        ),
    )
}

/// The name people know a service by, from the name requests are signed with.
fn display_name(signing_name: &str) -> String {
    let known = [
        ("cloudformation", "CloudFormation"),
        ("dynamodb", "DynamoDB"),
        ("s3", "S3"),
        ("lambda", "Lambda"),
        ("iam", "IAM"),
        ("kinesis", "Kinesis"),
        ("events", "EventBridge"),
        ("logs", "CloudWatch Logs"),
        ("monitoring", "CloudWatch"),
        ("secretsmanager", "Secrets Manager"),
        ("ssm", "Systems Manager"),
        ("kms", "KMS"),
        ("ec2", "EC2"),
        ("firehose", "Data Firehose"),
        ("states", "Step Functions"),
    ];
    let lower = signing_name.to_ascii_lowercase();
    match known.iter().find(|(name, _)| *name == lower) {
        Some((_, display)) => display.to_string(),
        None => signing_name.chars().take(64).collect(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_service_is_named_as_people_know_it_and_never_at_length() {
        assert_eq!(super::display_name("cloudformation"), "CloudFormation");
        assert_eq!(super::display_name("DynamoDB"), "DynamoDB");
        assert_eq!(super::display_name(&"x".repeat(500)).len(), 64);
    }
}
