//! Mobile push and SMS management through the AWS SDK: platform applications and endpoints as
//! AWS keeps them, a Publish to an endpoint captured for the test to read, SMS settings and
//! opt-outs, and the SMS sandbox verified with the password captured as an SMS.

use aws_sdk_sns::error::ProvideErrorMetadata;

use crate::common::{self, Server};
use crate::sns_captured_protocols::deliveries;

fn code_of<E: ProvideErrorMetadata>(error: &E) -> String {
    format!(
        "{}: {}",
        error.code().unwrap_or_default(),
        error.message().unwrap_or_default()
    )
}

async fn gcm_application(server: &Server, name: &str) -> String {
    let created = server
        .sns
        .create_platform_application()
        .name(name)
        .platform("GCM")
        .attributes("PlatformCredential", "server-key")
        .send()
        .await
        .unwrap();
    created.platform_application_arn.unwrap()
}

#[tokio::test]
async fn platform_applications_and_endpoints_are_kept_as_aws_keeps_them() {
    let server = common::start().await;
    let sns = &server.sns;
    let app = gcm_application(&server, "prices").await;
    assert_eq!(app, "arn:aws:sns:us-east-1:000000000000:app/GCM/prices");
    let shown = sns
        .get_platform_application_attributes()
        .platform_application_arn(&app)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    assert_eq!(shown.get("Enabled").map(String::as_str), Some("true"));
    assert!(!shown.contains_key("PlatformCredential"), "{shown:?}");
    sns.set_platform_application_attributes()
        .platform_application_arn(&app)
        .attributes("SuccessFeedbackSampleRate", "50")
        .send()
        .await
        .unwrap();
    let listed = sns.list_platform_applications().send().await.unwrap();
    let listed = listed.platform_applications.unwrap();
    assert_eq!(listed.len(), 1);
    let attributes = listed[0].attributes.as_ref().unwrap();
    assert_eq!(attributes["SuccessFeedbackSampleRate"], "50");

    let endpoint = sns
        .create_platform_endpoint()
        .platform_application_arn(&app)
        .token("device-token")
        .custom_user_data("user-7")
        .send()
        .await
        .unwrap()
        .endpoint_arn
        .unwrap();
    assert!(
        endpoint.starts_with("arn:aws:sns:us-east-1:000000000000:endpoint/GCM/prices/"),
        "{endpoint}"
    );
    let again = sns
        .create_platform_endpoint()
        .platform_application_arn(&app)
        .token("device-token")
        .custom_user_data("user-7")
        .send()
        .await
        .unwrap();
    assert_eq!(again.endpoint_arn.unwrap(), endpoint);
    let conflict = sns
        .create_platform_endpoint()
        .platform_application_arn(&app)
        .token("device-token")
        .custom_user_data("someone else")
        .send()
        .await
        .unwrap_err();
    let said = code_of(&conflict);
    assert!(
        said.starts_with("InvalidParameter: ")
            && said.contains("already exists with the same Token"),
        "{said}"
    );
    let attributes = sns
        .get_endpoint_attributes()
        .endpoint_arn(&endpoint)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    assert_eq!(attributes["Token"], "device-token");
    assert_eq!(attributes["CustomUserData"], "user-7");
    assert_eq!(attributes["Enabled"], "true");
    let listed = sns
        .list_endpoints_by_platform_application()
        .platform_application_arn(&app)
        .send()
        .await
        .unwrap()
        .endpoints
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].endpoint_arn.as_deref(), Some(endpoint.as_str()));

    // A publish to the endpoint is captured, with the platform's own text.
    let published = sns
        .publish()
        .target_arn(&endpoint)
        .message_structure("json")
        .message(r#"{"default":"plain","GCM":"{\"data\":{\"price\":101}}"}"#)
        .send()
        .await
        .unwrap();
    assert!(published.message_id.is_some());
    let captured = deliveries(&server, "?protocol=application").await;
    assert_eq!(captured.len(), 1, "{captured:?}");
    assert_eq!(captured[0]["endpoint"], endpoint.as_str());
    assert_eq!(captured[0]["message"], r#"{"data":{"price":101}}"#);

    // Through a topic the endpoint gets its platform's text as well.
    let topic = sns.create_topic().name("alerts").send().await.unwrap();
    let topic = topic.topic_arn.unwrap();
    sns.subscribe()
        .topic_arn(&topic)
        .protocol("application")
        .endpoint(&endpoint)
        .send()
        .await
        .unwrap();
    sns.publish()
        .topic_arn(&topic)
        .message_structure("json")
        .message(r#"{"default":"plain","GCM":"for GCM"}"#)
        .send()
        .await
        .unwrap();
    let captured = deliveries(&server, "?protocol=application").await;
    assert_eq!(captured.len(), 2, "{captured:?}");
    assert_eq!(captured[1]["message"], "for GCM");

    // Another account may neither publish to the endpoint nor read it.
    let stranger = common::sns_in(server.addr, "us-east-1", "222222222222");
    let refused = stranger
        .publish()
        .target_arn(&endpoint)
        .message("x")
        .send()
        .await
        .unwrap_err();
    assert!(
        code_of(&refused).starts_with("AuthorizationError: "),
        "{}",
        code_of(&refused)
    );
    let refused = stranger
        .get_endpoint_attributes()
        .endpoint_arn(&endpoint)
        .send()
        .await
        .unwrap_err();
    assert!(
        code_of(&refused).starts_with("AuthorizationError: "),
        "{}",
        code_of(&refused)
    );
    let huge = sns
        .create_platform_endpoint()
        .platform_application_arn(&app)
        .token("t".repeat(5000))
        .send()
        .await
        .unwrap_err();
    assert!(
        code_of(&huge).starts_with("InvalidParameter: "),
        "{}",
        code_of(&huge)
    );

    sns.set_endpoint_attributes()
        .endpoint_arn(&endpoint)
        .attributes("Enabled", "false")
        .send()
        .await
        .unwrap();
    let disabled = sns
        .publish()
        .target_arn(&endpoint)
        .message("x")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code_of(&disabled), "EndpointDisabled: Endpoint is disabled");

    sns.delete_endpoint()
        .endpoint_arn(&endpoint)
        .send()
        .await
        .unwrap();
    sns.delete_endpoint()
        .endpoint_arn(&endpoint)
        .send()
        .await
        .unwrap();
    let gone = sns
        .get_endpoint_attributes()
        .endpoint_arn(&endpoint)
        .send()
        .await
        .unwrap_err();
    assert_eq!(code_of(&gone), "NotFound: Endpoint does not exist");
    sns.delete_platform_application()
        .platform_application_arn(&app)
        .send()
        .await
        .unwrap();
    let gone = sns
        .list_endpoints_by_platform_application()
        .platform_application_arn(&app)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        code_of(&gone),
        "NotFound: PlatformApplication does not exist"
    );
    let malformed = sns
        .get_platform_application_attributes()
        .platform_application_arn("invalid")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        code_of(&malformed),
        "InvalidParameter: Invalid parameter: PlatformApplicationArn Reason: An ARN must have at least 6 elements, not 1"
    );
    let unsupported = sns
        .create_platform_application()
        .name("x")
        .platform("AAA")
        .attributes("PlatformCredential", "k")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        code_of(&unsupported),
        "InvalidParameter: Invalid parameter: Platform Reason: AAA is not supported"
    );
}

#[tokio::test]
async fn sms_settings_opt_outs_and_the_sandbox() {
    let server = common::start().await;
    let sns = &server.sns;
    let attributes = sns.get_sms_attributes().send().await.unwrap();
    assert_eq!(attributes.attributes.unwrap()["MonthlySpendLimit"], "1");
    sns.set_sms_attributes()
        .attributes("DefaultSMSType", "Transactional")
        .attributes("DefaultSenderID", "Orderly")
        .send()
        .await
        .unwrap();
    let named = sns
        .get_sms_attributes()
        .attributes("DefaultSMSType")
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    assert_eq!(named.len(), 1, "{named:?}");
    assert_eq!(named["DefaultSMSType"], "Transactional");
    let refused = sns
        .set_sms_attributes()
        .attributes("Colour", "red")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        code_of(&refused),
        "InvalidParameter: Colour is not a valid attribute"
    );
    let refused = sns
        .set_sms_attributes()
        .attributes("DefaultSenderID", "twelve-chars!")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        code_of(&refused),
        "InvalidParameter: DefaultSenderID is invalid"
    );
    // An empty list of names is sent as an empty parameter: all of them.
    let all = sns
        .get_sms_attributes()
        .set_attributes(Some(Vec::new()))
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    assert_eq!(all.len(), 3, "{all:?}");

    let checked = sns
        .check_if_phone_number_is_opted_out()
        .phone_number("+15550100")
        .send()
        .await
        .unwrap();
    assert!(!checked.is_opted_out);
    let malformed = sns
        .check_if_phone_number_is_opted_out()
        .phone_number("invalid")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        code_of(&malformed),
        "InvalidParameter: Invalid parameter: PhoneNumber Reason: input incorrectly formatted"
    );
    let listed = sns.list_phone_numbers_opted_out().send().await.unwrap();
    assert!(listed.phone_numbers.unwrap_or_default().is_empty());
    // A namespace that is no region's or account's is refused in JSON, and nothing opts out.
    for (query, refused) in [
        ("&region=Not%20A%20Region", "region"),
        ("&account=12", "account"),
        ("", "phoneNumber"),
    ] {
        let number = if query.is_empty() {
            ""
        } else {
            "phoneNumber=%2B15550100"
        };
        let answer = reqwest::Client::new()
            .post(format!(
                "{}/_orderly/sns/opted-out?{number}{query}",
                server.url()
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), 400, "{query}");
        let said: serde_json::Value = serde_json::from_str(&answer.text().await.unwrap()).unwrap();
        assert!(
            said["message"].as_str().unwrap().contains(refused),
            "{said}"
        );
    }
    let listed = sns.list_phone_numbers_opted_out().send().await.unwrap();
    assert!(listed.phone_numbers.unwrap_or_default().is_empty());
    // The number replies STOP (Orderly's developer endpoint stands in for it).
    let stopped = reqwest::Client::new()
        .post(format!(
            "{}/_orderly/sns/opted-out?phoneNumber=%2B15550100",
            server.url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(stopped.status().as_u16(), 204);
    let checked = sns
        .check_if_phone_number_is_opted_out()
        .phone_number("+15550100")
        .send()
        .await
        .unwrap();
    assert!(checked.is_opted_out);
    let listed = sns.list_phone_numbers_opted_out().send().await.unwrap();
    assert_eq!(listed.phone_numbers.unwrap(), ["+15550100"]);
    sns.opt_in_phone_number()
        .phone_number("+15550100")
        .send()
        .await
        .unwrap();
    let listed = sns.list_phone_numbers_opted_out().send().await.unwrap();
    assert!(listed.phone_numbers.unwrap_or_default().is_empty());

    let status = sns.get_sms_sandbox_account_status().send().await.unwrap();
    assert!(!status.is_in_sandbox);
    sns.create_sms_sandbox_phone_number()
        .phone_number("+15550101")
        .send()
        .await
        .unwrap();
    let listed = sns.list_sms_sandbox_phone_numbers().send().await.unwrap();
    let numbers = listed.phone_numbers;
    assert_eq!(numbers.len(), 1);
    assert_eq!(numbers[0].status.as_ref().unwrap().as_str(), "Pending");
    // The password went to the number: captured as an SMS for the test to read.
    let sent = deliveries(&server, "?protocol=sms").await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["endpoint"], "+15550101");
    let text = sent[0]["message"].as_str().unwrap();
    let password: String = text.chars().filter(char::is_ascii_digit).collect();
    assert_eq!(password.len(), 6, "{text}");
    let wrong = if password == "000000" {
        "111111"
    } else {
        "000000"
    };
    let refused = sns
        .verify_sms_sandbox_phone_number()
        .phone_number("+15550101")
        .one_time_password(wrong)
        .send()
        .await
        .unwrap_err();
    assert!(
        code_of(&refused).starts_with("VerificationException: "),
        "{}",
        code_of(&refused)
    );
    sns.verify_sms_sandbox_phone_number()
        .phone_number("+15550101")
        .one_time_password(&password)
        .send()
        .await
        .unwrap();
    let listed = sns.list_sms_sandbox_phone_numbers().send().await.unwrap();
    assert_eq!(
        listed.phone_numbers[0].status.as_ref().unwrap().as_str(),
        "Verified"
    );
    sns.delete_sms_sandbox_phone_number()
        .phone_number("+15550101")
        .send()
        .await
        .unwrap();
    let missing = sns
        .delete_sms_sandbox_phone_number()
        .phone_number("+15550101")
        .send()
        .await
        .unwrap_err();
    assert!(
        code_of(&missing).starts_with("ResourceNotFound: "),
        "{}",
        code_of(&missing)
    );
    let origination = sns.list_origination_numbers().send().await.unwrap();
    assert!(origination.phone_numbers.unwrap_or_default().is_empty());
    let too_many = sns
        .list_origination_numbers()
        .max_results(31)
        .send()
        .await
        .unwrap_err();
    assert!(
        code_of(&too_many).starts_with("ValidationError: "),
        "{}",
        code_of(&too_many)
    );
}
