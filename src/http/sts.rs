//! What is not SQS or SNS: STS's GetCallerIdentity, which tools ask before anything else
//! (`aws sts get-caller-identity`, Terraform, CDK, test fixtures reading the account id);
//! AssumeRole and GetSessionToken, whose temporary credentials (`sessions`) act in the role's
//! account or as the caller; and a plain answer naming any other service a request was meant
//! for, rather than a signature error that sends people looking for a credentials problem.

use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};

use super::identity::{derived_user_id, Caller};
use super::sessions::{Issued, Sessions};
use crate::protocol::{xml, ApiError, ErrorCode};
use crate::service::RequestContext;

/// STS's API version, which its Query requests carry.
const STS_VERSION: &str = "2011-06-15";

/// The prefix of STS's JSON targets (`X-Amz-Target`).
const STS_TARGET: &str = "AWSSecurityTokenServiceV20110615.";

/// Who asks, as far as STS cares.
pub(super) struct Asker<'a> {
    pub ctx: &'a RequestContext,
    /// `--auth`: unsigned requests are refused, and temporary credentials issue no more.
    pub strict: bool,
    pub sessions: &'a Sessions,
    /// Whether the request is signed with temporary credentials.
    pub from_session: bool,
}

/// A Query request for STS or for a service Orderly does not serve, answered (or the error to
/// answer it with); `None` for SQS and SNS. `signing_service` is the credential scope's.
pub(super) async fn query(
    signing_service: Option<&str>,
    params: &[(String, String)],
    action: &str,
    asker: &Asker<'_>,
) -> Option<Result<Response, ApiError>> {
    let ctx = asker.ctx;
    let version = params.iter().find(|(k, _)| k == "Version");
    let sts = signing_service == Some("sts")
        || (signing_service.is_none() && version.is_some_and(|(_, v)| v == STS_VERSION));
    if sts {
        let answered = match action {
            _ if !ctx.authenticated && (asker.strict || action != "GetCallerIdentity") => {
                Err(unsigned())
            }
            "GetCallerIdentity" => Ok(identity_xml(ctx)),
            "AssumeRole" => assume_role(asker, params).await,
            "GetSessionToken" => session_token(asker, params).await,
            other => Err(sts_action_not_served(other)),
        };
        return Some(answered);
    }
    let other = signing_service.filter(|s| !matches!(*s, "sqs" | "sns"))?;
    Some(Err(not_served(other)))
}

/// Seconds since the epoch on the machine's clock: credentials expire in real time, as the
/// SDKs that refresh them count it.
pub(super) fn machine_now() -> i64 {
    crate::clock::machine_millis() / 1000
}

/// The value of parameter `name`, if given.
fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// `DurationSeconds` within `range`, or `default` when absent.
fn duration(
    params: &[(String, String)],
    range: std::ops::RangeInclusive<i64>,
    default: i64,
) -> Result<i64, ApiError> {
    let Some(text) = param(params, "DurationSeconds") else {
        return Ok(default);
    };
    match text.parse::<i64>() {
        Ok(seconds) if range.contains(&seconds) => Ok(seconds),
        _ => Err(ApiError::new(
            ErrorCode::ValidationError,
            format!(
                "1 validation error detected: Value '{text}' at 'durationSeconds' failed to \
                 satisfy constraint: Member must have value between {} and {}",
                range.start(),
                range.end()
            ),
        )),
    }
}

/// With `--auth`, only the key file's keys are given temporary credentials.
fn may_issue(asker: &Asker<'_>) -> Result<(), ApiError> {
    if asker.strict && asker.from_session {
        return Err(ApiError::new(
            ErrorCode::AccessDenied,
            "Temporary credentials cannot be used to get more: sign with a key of the key file.",
        ));
    }
    Ok(())
}

async fn assume_role(asker: &Asker<'_>, params: &[(String, String)]) -> Result<Response, ApiError> {
    may_issue(asker)?;
    let role_arn = param(params, "RoleArn").ok_or_else(|| missing("roleArn"))?;
    let session_name =
        param(params, "RoleSessionName").ok_or_else(|| missing("roleSessionName"))?;
    let (account, role) = role_of(role_arn).ok_or_else(|| {
        ApiError::new(
            ErrorCode::ValidationError,
            format!("{role_arn} is invalid: a role's ARN is arn:aws:iam::<account>:role/<name>"),
        )
    })?;
    let fits = (2..=64).contains(&session_name.len())
        && session_name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_+=,.@-".contains(&b));
    if !fits {
        return Err(ApiError::new(
            ErrorCode::ValidationError,
            format!(
                "1 validation error detected: Value '{session_name}' at 'roleSessionName' \
                 failed to satisfy constraint: Member must have length between 2 and 64 and \
                 satisfy regular expression pattern: [\\w+=,.@-]*"
            ),
        ));
    }
    let seconds = duration(params, 900..=43_200, 3_600)?;
    let role_id = derived_user_id(role_arn).replacen("AIDA", "AROA", 1);
    let caller = Caller {
        account: account.into(),
        user_id: format!("{role_id}:{session_name}").into(),
        principal: format!("arn:aws:sts::{account}:assumed-role/{role}/{session_name}").into(),
    };
    let now = machine_now();
    let issued = (asker.sessions.issue(caller.clone(), (now, now + seconds))).await?;
    let mut body = String::with_capacity(1024);
    body.push_str(
        "<AssumeRoleResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\
         <AssumeRoleResult><AssumedRoleUser><AssumedRoleId>",
    );
    xml::escape(&caller.user_id, &mut body);
    body.push_str("</AssumedRoleId><Arn>");
    xml::escape(&caller.principal, &mut body);
    body.push_str("</Arn></AssumedRoleUser>");
    credentials_xml(&issued, &mut body);
    body.push_str("</AssumeRoleResult>");
    Ok(answer_xml("AssumeRoleResponse", body, asker.ctx))
}

async fn session_token(
    asker: &Asker<'_>,
    params: &[(String, String)],
) -> Result<Response, ApiError> {
    may_issue(asker)?;
    let seconds = duration(params, 900..=129_600, 43_200)?;
    let ctx = asker.ctx;
    let caller = Caller {
        account: ctx.namespace.account.clone(),
        user_id: ctx.sender_id.clone(),
        principal: ctx.principal.clone(),
    };
    let now = machine_now();
    let issued = (asker.sessions.issue(caller, (now, now + seconds))).await?;
    let mut body = String::with_capacity(1024);
    body.push_str(
        "<GetSessionTokenResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\
         <GetSessionTokenResult>",
    );
    credentials_xml(&issued, &mut body);
    body.push_str("</GetSessionTokenResult>");
    Ok(answer_xml("GetSessionTokenResponse", body, ctx))
}

fn credentials_xml(issued: &Issued, body: &mut String) {
    body.push_str("<Credentials><AccessKeyId>");
    body.push_str(&issued.access_key);
    body.push_str("</AccessKeyId><SecretAccessKey>");
    body.push_str(&issued.session.secret);
    body.push_str("</SecretAccessKey><SessionToken>");
    body.push_str(&issued.token);
    body.push_str("</SessionToken><Expiration>");
    let expires = crate::engine::Timestamp(issued.session.expires.max(0) as u64 * 1000);
    body.push_str(&crate::service::inspect::rfc3339(expires));
    body.push_str("</Expiration></Credentials>");
}

/// Ends a result with its metadata and closes the response element `response`.
fn answer_xml(response: &str, mut body: String, ctx: &RequestContext) -> Response {
    body.push_str("<ResponseMetadata><RequestId>");
    xml::escape(&ctx.request_id, &mut body);
    body.push_str("</RequestId></ResponseMetadata></");
    body.push_str(response);
    body.push('>');
    answer("text/xml", body, ctx)
}

/// The account and role name of `arn:aws:iam::<account>:role/<path/>name`.
fn role_of(arn: &str) -> Option<(&str, &str)> {
    let rest = arn.strip_prefix("arn:aws:iam::")?;
    let (account, resource) = rest.split_once(':')?;
    let path = resource.strip_prefix("role/")?;
    let name = path.rsplit('/').next()?;
    let valid = account.len() == 12
        && account.bytes().all(|b| b.is_ascii_digit())
        && !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_+=,.@-".contains(&b));
    valid.then_some((account, name))
}

fn missing(member: &str) -> ApiError {
    ApiError::new(
        ErrorCode::ValidationError,
        format!(
            "1 validation error detected: Value null at '{member}' failed to satisfy \
             constraint: Member must not be null"
        ),
    )
}

/// Whether an AWS JSON request that names no SQS operation is for STS or another service
/// (its target, or the service it is signed for, says so).
pub(super) fn elsewhere(target: Option<&str>, signing_service: Option<&str>) -> bool {
    target.is_some_and(|t| t.starts_with(STS_TARGET))
        || signing_service.is_some_and(|s| !matches!(s, "sqs" | "sns"))
}

/// An AWS JSON request whose target is not SQS's, answered (or the error to answer it with).
pub(super) fn json(
    target: Option<&str>,
    signing_service: Option<&str>,
    (ctx, strict): (&RequestContext, bool),
) -> Result<Response, ApiError> {
    if let Some(action) = target.and_then(|t| t.strip_prefix(STS_TARGET)) {
        return match action {
            _ if strict && !ctx.authenticated => Err(unsigned()),
            "GetCallerIdentity" => Ok(identity_json(ctx)),
            other => Err(sts_action_not_served(other)),
        };
    }
    let service = signing_service.unwrap_or("another service");
    Err(not_served(service))
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
    body.push_str("</Account></GetCallerIdentityResult>");
    answer_xml("GetCallerIdentityResponse", body, ctx)
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

fn unsigned() -> ApiError {
    ApiError::new(
        ErrorCode::MissingAuthenticationToken,
        "Request is missing Authentication Token",
    )
}

fn sts_action_not_served(action: &str) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidAction,
        format!(
            "Orderly serves STS's GetCallerIdentity, AssumeRole and GetSessionToken (over the \
             Query protocol); {action} is not served."
        ),
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
