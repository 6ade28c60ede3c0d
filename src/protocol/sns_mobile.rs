//! Request and response shapes of SNS's mobile push and SMS actions, with AWS's member names
//! (the SMS settings and opt-out actions spell theirs in lower camel case).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::sqs::Pairs;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct CreatePlatformApplicationInput {
    pub name: Option<String>,
    pub platform: Option<String>,
    pub attributes: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct PlatformApplicationArnOutput {
    pub platform_application_arn: String,
}

/// The actions naming one application (and, to set, its attributes; to list, a page).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct PlatformApplicationInput {
    pub platform_application_arn: Option<String>,
    pub attributes: Option<BTreeMap<String, String>>,
    pub next_token: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct PlatformApplicationWire {
    pub platform_application_arn: String,
    pub attributes: Pairs,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ListPlatformApplicationsOutput {
    pub platform_applications: Vec<PlatformApplicationWire>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NextTokenInput {
    pub next_token: Option<String>,
    pub max_results: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct CreatePlatformEndpointInput {
    pub platform_application_arn: Option<String>,
    pub token: Option<String>,
    pub custom_user_data: Option<String>,
    pub attributes: BTreeMap<String, String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct EndpointArnOutput {
    pub endpoint_arn: String,
}

/// The actions naming one endpoint (and, to set, its attributes).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct EndpointInput {
    pub endpoint_arn: Option<String>,
    pub attributes: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct EndpointWire {
    pub endpoint_arn: String,
    pub attributes: Pairs,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ListEndpointsOutput {
    pub endpoints: Vec<EndpointWire>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SetSmsAttributesInput {
    pub attributes: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct GetSmsAttributesInput {
    pub attributes: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct SmsAttributesOutput {
    pub attributes: Pairs,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PhoneNumberInput {
    pub phone_number: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OptedOutOutput {
    pub is_opted_out: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OptedOutPageInput {
    pub next_token: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListOptedOutOutput {
    pub phone_numbers: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct SandboxStatusOutput {
    pub is_in_sandbox: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct SandboxNumberInput {
    pub phone_number: Option<String>,
    pub language_code: Option<String>,
    pub one_time_password: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct SandboxNumberWire {
    pub phone_number: String,
    pub status: &'static str,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ListSandboxNumbersOutput {
    pub phone_numbers: Vec<SandboxNumberWire>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// ListOriginationNumbers: Orderly has none (it sends no SMS), so the list is always empty.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ListOriginationNumbersOutput {
    pub phone_numbers: Vec<String>,
}
