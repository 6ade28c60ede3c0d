//! STS's GetCallerIdentity, which tools ask before anything else, and a plain answer naming
//! any other service a request was meant for: over the Query protocol as the SDKs send it
//! (signed for `sts`), its JSON form, and unsigned.

use crate::common::{signed, start, xml_text};

/// A request for `service` with `body` (form or JSON, by `target`), signed with `key`.
pub(crate) async fn ask(
    server: &crate::common::Server,
    service: &str,
    key: &str,
    (target, body): (Option<&str>, &str),
) -> (u16, String) {
    let authorization = signed(service).replace("Credential=AKID/", &format!("Credential={key}/"));
    let mut request = reqwest::Client::new()
        .post(server.url())
        .header("authorization", authorization);
    request = match target {
        Some(target) => request
            .header("x-amz-target", target)
            .header("content-type", "application/x-amz-json-1.0"),
        None => request.header("content-type", "application/x-www-form-urlencoded"),
    };
    let answer = request
        .body(body.to_string())
        .send()
        .await
        .expect("answered");
    let status = answer.status().as_u16();
    (status, answer.text().await.expect("a body"))
}

pub(crate) const GET_CALLER_IDENTITY: &str = "Action=GetCallerIdentity&Version=2011-06-15";

#[tokio::test]
async fn get_caller_identity_names_the_keys_account_and_user() {
    let server = start().await;
    let (status, body) = ask(&server, "sts", "AKIDORDERLY", (None, GET_CALLER_IDENTITY)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("<GetCallerIdentityResponse"), "{body}");
    assert_eq!(xml_text(&body, "Account"), Some("000000000000"));
    assert_eq!(
        xml_text(&body, "Arn"),
        Some("arn:aws:iam::000000000000:user/AKIDORDERLY")
    );
    assert_eq!(xml_text(&body, "UserId"), Some("AIDAGQSWUKCKFNOMMEKH5"));

    // A 12-digit key is its own account.
    let (_, body) = ask(&server, "sts", "111122223333", (None, GET_CALLER_IDENTITY)).await;
    assert_eq!(xml_text(&body, "Account"), Some("111122223333"));

    // Unsigned: the account itself.
    let answer = reqwest::Client::new()
        .post(server.url())
        .header("content-type", "application/x-www-form-urlencoded")
        .body(GET_CALLER_IDENTITY)
        .send()
        .await
        .unwrap();
    let body = answer.text().await.unwrap();
    assert_eq!(
        xml_text(&body, "Arn"),
        Some("arn:aws:iam::000000000000:root")
    );
    assert_eq!(xml_text(&body, "UserId"), Some("000000000000"));

    // The JSON form.
    let target = "AWSSecurityTokenServiceV20110615.GetCallerIdentity";
    let (status, body) = ask(&server, "sts", "AKIDORDERLY", (Some(target), "{}")).await;
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(json["Account"], "000000000000");
    assert_eq!(json["UserId"], "AIDAGQSWUKCKFNOMMEKH5");
}

#[tokio::test]
async fn other_services_and_sts_actions_not_served_are_named_not_refused_as_signatures() {
    let server = start().await;
    let (status, body) = ask(
        &server,
        "cloudformation",
        "AKIDORDERLY",
        (None, "Action=DescribeStacks&Version=2010-05-15"),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(xml_text(&body, "Code"), Some("InvalidAction"));
    assert!(
        body.contains("this request is for CloudFormation"),
        "{body}"
    );
    assert!(!body.contains("SignatureDoesNotMatch"), "{body}");

    let target = "DynamoDB_20120810.ListTables";
    let (status, body) = ask(&server, "dynamodb", "AKIDORDERLY", (Some(target), "{}")).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("this request is for DynamoDB"), "{body}");

    let federation = "Action=GetFederationToken&Version=2011-06-15&Name=n";
    let (status, body) = ask(&server, "sts", "AKIDORDERLY", (None, federation)).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(xml_text(&body, "Code"), Some("InvalidAction"));
    assert!(body.contains("GetFederationToken is not served"), "{body}");

    // SQS and SNS are still themselves.
    let (status, body) = ask(&server, "sqs", "AKIDORDERLY", (None, "Action=ListQueues")).await;
    assert_eq!(status, 200, "{body}");
}

/// AssumeRole hands out credentials that act in the role's account; GetSessionToken's act as
/// the caller. Parameters are checked as STS checks them.
#[tokio::test]
async fn assumed_role_credentials_act_in_the_roles_account() {
    let server = start().await;
    let assume = "Action=AssumeRole&Version=2011-06-15&RoleSessionName=tester\
                  &RoleArn=arn%3Aaws%3Aiam%3A%3A111122223333%3Arole%2Fci%2Fdeployer";
    let (status, body) = ask(&server, "sts", "AKIDORDERLY", (None, assume)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        xml_text(&body, "Arn"),
        Some("arn:aws:sts::111122223333:assumed-role/deployer/tester")
    );
    let key = xml_text(&body, "AccessKeyId").expect("a key").to_string();
    assert!(key.starts_with("ASIA") && key.len() == 20, "{key}");
    for part in ["SecretAccessKey", "SessionToken", "Expiration"] {
        assert!(
            xml_text(&body, part).is_some_and(|v| !v.is_empty()),
            "{part}: {body}"
        );
    }

    // Signed with it: the role's account and identity.
    let (_, who) = ask(&server, "sts", &key, (None, GET_CALLER_IDENTITY)).await;
    assert_eq!(xml_text(&who, "Account"), Some("111122223333"));
    assert!(xml_text(&who, "UserId")
        .is_some_and(|id| id.starts_with("AROA") && id.ends_with(":tester")));
    let create = "Action=CreateQueue&QueueName=assumed&Version=2012-11-05";
    let (status, created) = ask(&server, "sqs", &key, (None, create)).await;
    assert_eq!(status, 200, "{created}");
    assert!(created.contains("/111122223333/assumed"), "{created}");

    let (status, body) = ask(
        &server,
        "sts",
        "AKIDORDERLY",
        (
            None,
            "Action=GetSessionToken&Version=2011-06-15&DurationSeconds=900",
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let key = xml_text(&body, "AccessKeyId").expect("a key").to_string();
    let (_, who) = ask(&server, "sts", &key, (None, GET_CALLER_IDENTITY)).await;
    assert_eq!(
        xml_text(&who, "Arn"),
        Some("arn:aws:iam::000000000000:user/AKIDORDERLY")
    );

    for (wrong, said) in [
        (
            "Action=AssumeRole&Version=2011-06-15&RoleSessionName=tester&RoleArn=role",
            "is invalid",
        ),
        (
            "Action=AssumeRole&Version=2011-06-15&RoleSessionName=t\
             &RoleArn=arn%3Aaws%3Aiam%3A%3A111122223333%3Arole%2Fr",
            "roleSessionName",
        ),
        (
            "Action=AssumeRole&Version=2011-06-15&RoleSessionName=tester",
            "roleArn",
        ),
        (
            "Action=GetSessionToken&Version=2011-06-15&DurationSeconds=60",
            "durationSeconds",
        ),
    ] {
        let (status, body) = ask(&server, "sts", "AKIDORDERLY", (None, wrong)).await;
        assert_eq!(status, 400, "{wrong}: {body}");
        assert_eq!(
            xml_text(&body, "Code"),
            Some("ValidationError"),
            "{wrong}: {body}"
        );
        assert!(body.contains(said), "{wrong}: {body}");
    }
    // Unsigned: refused, as AWS refuses every unsigned request for credentials.
    let answer = reqwest::Client::new()
        .post(server.url())
        .header("content-type", "application/x-www-form-urlencoded")
        .body("Action=GetSessionToken&Version=2011-06-15")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 403);
    assert!(answer
        .text()
        .await
        .unwrap()
        .contains("MissingAuthenticationToken"));
}
