//! SNS's mobile push and SMS actions: platform applications and endpoints, a Publish to an
//! endpoint (captured, never sent), SMS settings, opt-outs and the SMS sandbox (whose one-time
//! passwords are captured as SMS messages to the number, for a test to read).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::sns_params::{invalid, page, page_of, pairs, required};
use super::{RequestContext, Service};
use crate::engine::namespace::Namespace;
use crate::engine::topic::captured::CapturedMessage;
use crate::engine::topic::protocol::platform_text;
use crate::engine::topic::{PublishRequest, SubscriptionProtocol};
use crate::protocol::sns::{AttributesMap, PublishOutput};
use crate::protocol::sns_mobile::*;
use crate::protocol::sqs::{Empty, Pairs};
use crate::protocol::{ApiError, Encoded, ErrorCode, Payload, Protocol, SnsAction};

/// AWS's answer for a map it requires and did not get (an empty one is not sent at all).
fn null_attributes(
    attributes: Option<BTreeMap<String, String>>,
) -> Result<BTreeMap<String, String>, ApiError> {
    attributes.filter(|a| !a.is_empty()).ok_or_else(|| {
        ApiError::new(
            ErrorCode::ValidationError,
            "1 validation error detected: Value null at 'attributes' failed to satisfy constraint: Member must not be null",
        )
    })
}

/// `MaxResults` within AWS's bounds for the action.
fn max_results(text: Option<&str>, most: usize) -> Result<usize, ApiError> {
    let Some(text) = text else {
        return Ok(most);
    };
    match text.parse::<usize>() {
        Ok(n) if (1..=most).contains(&n) => Ok(n),
        _ => Err(ApiError::new(
            ErrorCode::ValidationError,
            format!(
                "1 validation error detected: Value '{text}' at 'maxResults' failed to satisfy constraint: Member must have value between 1 and {most}"
            ),
        )),
    }
}

/// A one-time password as AWS sends to a sandbox number: six digits, not guessable.
fn one_time_password() -> String {
    let random = uuid::Uuid::new_v4().as_u128();
    format!("{:06}", random % 1_000_000)
}

impl Service {
    /// The mobile push and SMS actions, which `route_sns` hands here once the request's ARN
    /// passed its region and account rules.
    pub(super) async fn route_sns_mobile(
        &self,
        action: SnsAction,
        payload: &Payload,
        ctx: &RequestContext,
    ) -> Result<Encoded, ApiError> {
        let protocol = Protocol::SnsQuery;
        // Each handler must take and answer what its action declares (`protocol::actions`).
        macro_rules! call {
            ($shape:ident, $handler:ident) => {
                sns_call!(self, (payload, protocol, ctx, action), $shape, $handler)
            };
        }
        use SnsAction as A;
        match action {
            A::CreatePlatformApplication => {
                call!(CreatePlatformApplication, create_platform_application)
            }
            A::GetPlatformApplicationAttributes => call!(
                GetPlatformApplicationAttributes,
                get_platform_application_attributes
            ),
            A::SetPlatformApplicationAttributes => call!(
                SetPlatformApplicationAttributes,
                set_platform_application_attributes
            ),
            A::ListPlatformApplications => {
                call!(ListPlatformApplications, list_platform_applications)
            }
            A::DeletePlatformApplication => {
                call!(DeletePlatformApplication, delete_platform_application)
            }
            A::CreatePlatformEndpoint => call!(CreatePlatformEndpoint, create_platform_endpoint),
            A::GetEndpointAttributes => call!(GetEndpointAttributes, get_endpoint_attributes),
            A::SetEndpointAttributes => call!(SetEndpointAttributes, set_endpoint_attributes),
            A::ListEndpointsByPlatformApplication => call!(
                ListEndpointsByPlatformApplication,
                list_endpoints_by_platform_application
            ),
            A::DeleteEndpoint => call!(DeleteEndpoint, delete_endpoint),
            A::SetSMSAttributes => call!(SetSMSAttributes, set_sms_attributes),
            A::GetSMSAttributes => call!(GetSMSAttributes, get_sms_attributes),
            A::CheckIfPhoneNumberIsOptedOut => call!(
                CheckIfPhoneNumberIsOptedOut,
                check_if_phone_number_is_opted_out
            ),
            A::ListPhoneNumbersOptedOut => {
                call!(ListPhoneNumbersOptedOut, list_phone_numbers_opted_out)
            }
            A::OptInPhoneNumber => call!(OptInPhoneNumber, opt_in_phone_number),
            A::GetSMSSandboxAccountStatus => {
                call!(GetSMSSandboxAccountStatus, get_sms_sandbox_account_status)
            }
            A::CreateSMSSandboxPhoneNumber => {
                call!(CreateSMSSandboxPhoneNumber, create_sms_sandbox_phone_number)
            }
            A::VerifySMSSandboxPhoneNumber => {
                call!(VerifySMSSandboxPhoneNumber, verify_sms_sandbox_phone_number)
            }
            A::DeleteSMSSandboxPhoneNumber => {
                call!(DeleteSMSSandboxPhoneNumber, delete_sms_sandbox_phone_number)
            }
            A::ListSMSSandboxPhoneNumbers => {
                call!(ListSMSSandboxPhoneNumbers, list_sms_sandbox_phone_numbers)
            }
            A::ListOriginationNumbers => call!(ListOriginationNumbers, list_origination_numbers),
            // `route_sns` hands over only the actions above.
            other => Err(ApiError::new(
                ErrorCode::InvalidAction,
                format!("{} is not a mobile push or SMS action", other.name()),
            )),
        }
    }

    /// An application or endpoint ARN of the caller's region and account: malformed ones are
    /// refused as AWS refuses them, other regions as every SNS ARN, other accounts always
    /// (their applications are never shared).
    fn own_mobile_arn(
        &self,
        ctx: &RequestContext,
        parameter: &str,
        arn: &str,
        action: &str,
    ) -> Result<(), ApiError> {
        let parts: Vec<&str> = arn.split(':').collect();
        if parts.len() < 6 {
            return Err(invalid(format!(
                "Invalid parameter: {parameter} Reason: An ARN must have at least 6 elements, not {}",
                parts.len()
            )));
        }
        if parameter == "EndpointArn" && parts[5].split('/').count() != 4 {
            return Err(invalid(format!(
                "Invalid parameter: {parameter} Reason: Wrong number of slashes in relative portion of the ARN."
            )));
        }
        self.check_sns_region(ctx, parameter, arn)?;
        if ctx.authenticated && !ctx.operator && parts[4] != &*ctx.namespace.account {
            return Err(ApiError::new(
                ErrorCode::AuthorizationError,
                format!(
                    "User: {} is not authorized to perform: SNS:{action} on resource: {arn}",
                    ctx.principal
                ),
            ));
        }
        Ok(())
    }

    pub(super) async fn create_platform_application(
        &self,
        input: CreatePlatformApplicationInput,
        ctx: &RequestContext,
    ) -> Result<PlatformApplicationArnOutput, ApiError> {
        let name = required(input.name, "Name")?;
        let platform = required(input.platform, "Platform")?;
        let attributes = null_attributes(input.attributes)?;
        let arn = self
            .backend
            .create_platform_application(&ctx.namespace, &name, &platform, attributes)
            .await?;
        Ok(PlatformApplicationArnOutput {
            platform_application_arn: arn.to_string(),
        })
    }

    fn application_arn(
        &self,
        ctx: &RequestContext,
        arn: Option<String>,
        action: &str,
    ) -> Result<String, ApiError> {
        let arn = required(arn, "PlatformApplicationArn")?;
        self.own_mobile_arn(ctx, "PlatformApplicationArn", &arn, action)?;
        Ok(arn)
    }

    fn endpoint_arn(
        &self,
        ctx: &RequestContext,
        arn: Option<String>,
        action: &str,
    ) -> Result<String, ApiError> {
        let arn = required(arn, "EndpointArn")?;
        self.own_mobile_arn(ctx, "EndpointArn", &arn, action)?;
        Ok(arn)
    }

    pub(super) async fn get_platform_application_attributes(
        &self,
        input: PlatformApplicationInput,
        ctx: &RequestContext,
    ) -> Result<AttributesMap, ApiError> {
        let arn = self.application_arn(
            ctx,
            input.platform_application_arn,
            "GetPlatformApplicationAttributes",
        )?;
        let attributes = self.backend.platform_application_attributes(&arn).await?;
        Ok(AttributesMap {
            attributes: Pairs(pairs(attributes)),
        })
    }

    pub(super) async fn set_platform_application_attributes(
        &self,
        input: PlatformApplicationInput,
        ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let arn = self.application_arn(
            ctx,
            input.platform_application_arn,
            "SetPlatformApplicationAttributes",
        )?;
        let attributes = null_attributes(input.attributes)?;
        self.backend
            .set_platform_application_attributes(&arn, attributes)
            .await?;
        Ok(Empty {})
    }

    pub(super) async fn list_platform_applications(
        &self,
        input: NextTokenInput,
        ctx: &RequestContext,
    ) -> Result<ListPlatformApplicationsOutput, ApiError> {
        let listed = self.backend.platform_applications(&ctx.namespace).await?;
        let (listed, next_token) = page(listed, input.next_token.as_deref())?;
        Ok(ListPlatformApplicationsOutput {
            platform_applications: listed
                .into_iter()
                .map(|(arn, attributes)| PlatformApplicationWire {
                    platform_application_arn: arn.to_string(),
                    attributes: Pairs(pairs(attributes)),
                })
                .collect(),
            next_token,
        })
    }

    pub(super) async fn delete_platform_application(
        &self,
        input: PlatformApplicationInput,
        ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let arn = self.application_arn(
            ctx,
            input.platform_application_arn,
            "DeletePlatformApplication",
        )?;
        self.backend.delete_platform_application(&arn).await?;
        Ok(Empty {})
    }

    pub(super) async fn create_platform_endpoint(
        &self,
        input: CreatePlatformEndpointInput,
        ctx: &RequestContext,
    ) -> Result<EndpointArnOutput, ApiError> {
        let application = self.application_arn(
            ctx,
            input.platform_application_arn,
            "CreatePlatformEndpoint",
        )?;
        let token = required(input.token, "Token")?;
        let arn = self
            .backend
            .create_platform_endpoint(
                &application,
                &token,
                input.custom_user_data.as_deref(),
                input.attributes,
            )
            .await?;
        Ok(EndpointArnOutput {
            endpoint_arn: arn.to_string(),
        })
    }

    pub(super) async fn get_endpoint_attributes(
        &self,
        input: EndpointInput,
        ctx: &RequestContext,
    ) -> Result<AttributesMap, ApiError> {
        let arn = self.endpoint_arn(ctx, input.endpoint_arn, "GetEndpointAttributes")?;
        let attributes = self.backend.endpoint_attributes(&arn).await?;
        Ok(AttributesMap {
            attributes: Pairs(pairs(attributes)),
        })
    }

    pub(super) async fn set_endpoint_attributes(
        &self,
        input: EndpointInput,
        ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let arn = self.endpoint_arn(ctx, input.endpoint_arn, "SetEndpointAttributes")?;
        let attributes = null_attributes(input.attributes)?;
        self.backend
            .set_endpoint_attributes(&arn, attributes)
            .await?;
        Ok(Empty {})
    }

    pub(super) async fn list_endpoints_by_platform_application(
        &self,
        input: PlatformApplicationInput,
        ctx: &RequestContext,
    ) -> Result<ListEndpointsOutput, ApiError> {
        let arn = self.application_arn(
            ctx,
            input.platform_application_arn,
            "ListEndpointsByPlatformApplication",
        )?;
        let listed = self.backend.endpoints_of(&arn).await?;
        let (listed, next_token) = page(listed, input.next_token.as_deref())?;
        Ok(ListEndpointsOutput {
            endpoints: listed
                .into_iter()
                .map(|(arn, attributes)| EndpointWire {
                    endpoint_arn: arn.to_string(),
                    attributes: Pairs(pairs(attributes)),
                })
                .collect(),
            next_token,
        })
    }

    pub(super) async fn delete_endpoint(
        &self,
        input: EndpointInput,
        ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let arn = self.endpoint_arn(ctx, input.endpoint_arn, "DeleteEndpoint")?;
        self.backend.delete_endpoint(&arn).await?;
        Ok(Empty {})
    }

    /// Publish with the TargetArn of a platform endpoint: checked like any publish, captured
    /// as the endpoint's copy (the platform's key of a json-structured message, else
    /// `default`), never sent.
    pub(super) async fn publish_to_endpoint(
        &self,
        arn: &str,
        request: &PublishRequest,
        ctx: &RequestContext,
    ) -> Result<PublishOutput, ApiError> {
        self.own_mobile_arn(ctx, "TargetArn", arn, "Publish")?;
        crate::engine::topic::check_message(request)?;
        self.backend.check_publish_target(arn).await?;
        let message_id: Arc<str> = uuid::Uuid::new_v4().to_string().into();
        let body = if request.structured {
            platform_text(&request.message, arn)
        } else {
            request.message.clone()
        };
        let record = CapturedMessage {
            protocol: SubscriptionProtocol::Application,
            endpoint: arn.into(),
            subscription_arn: None,
            topic_arn: None,
            message_id: message_id.clone(),
            kind: "Notification",
            subject: request.subject.clone(),
            body,
            attributes: if request.structured {
                Default::default()
            } else {
                request.attributes.clone()
            },
            structure: request.structured.then_some("json"),
            at: self.clock.now(),
        };
        self.backend.capture(vec![record]).await?;
        Ok(PublishOutput {
            id: None,
            message_id: message_id.to_string(),
            sequence_number: None,
        })
    }

    pub(super) async fn set_sms_attributes(
        &self,
        input: SetSmsAttributesInput,
        ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let attributes = null_attributes(input.attributes)?;
        self.backend
            .set_sms_attributes(&ctx.namespace, attributes)
            .await?;
        Ok(Empty {})
    }

    pub(super) async fn get_sms_attributes(
        &self,
        input: GetSmsAttributesInput,
        ctx: &RequestContext,
    ) -> Result<SmsAttributesOutput, ApiError> {
        let attributes = self
            .backend
            .sms_attributes(&ctx.namespace, &input.attributes)
            .await?;
        Ok(SmsAttributesOutput {
            attributes: Pairs(pairs(attributes)),
        })
    }

    pub(super) async fn check_if_phone_number_is_opted_out(
        &self,
        input: PhoneNumberInput,
        ctx: &RequestContext,
    ) -> Result<OptedOutOutput, ApiError> {
        let number = required(input.phone_number, "phoneNumber")?;
        let is_opted_out = self.backend.is_opted_out(&ctx.namespace, &number).await?;
        Ok(OptedOutOutput { is_opted_out })
    }

    pub(super) async fn list_phone_numbers_opted_out(
        &self,
        input: OptedOutPageInput,
        ctx: &RequestContext,
    ) -> Result<ListOptedOutOutput, ApiError> {
        let numbers = self.backend.opted_out(&ctx.namespace).await?;
        let (phone_numbers, next_token) = page(numbers, input.next_token.as_deref())?;
        Ok(ListOptedOutOutput {
            phone_numbers,
            next_token,
        })
    }

    pub(super) async fn opt_in_phone_number(
        &self,
        input: PhoneNumberInput,
        ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let number = required(input.phone_number, "phoneNumber")?;
        self.backend
            .set_opted_out(&ctx.namespace, &number, false)
            .await?;
        Ok(Empty {})
    }

    /// A number opts out of SMS in `namespace`, as a reply of STOP does on AWS (Orderly's
    /// developer endpoint: no number can reply to it).
    pub async fn opt_out(&self, namespace: &Namespace, number: &str) -> Result<(), ApiError> {
        Ok(self.backend.set_opted_out(namespace, number, true).await?)
    }

    /// Orderly sends no SMS, so no account of it is held to a sandbox's numbers.
    pub(super) async fn get_sms_sandbox_account_status(
        &self,
        _input: Empty,
        _ctx: &RequestContext,
    ) -> Result<SandboxStatusOutput, ApiError> {
        Ok(SandboxStatusOutput {
            is_in_sandbox: false,
        })
    }

    pub(super) async fn create_sms_sandbox_phone_number(
        &self,
        input: SandboxNumberInput,
        ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let number = required(input.phone_number, "PhoneNumber")?;
        let language = input.language_code.unwrap_or_else(|| "en-US".into());
        let password = one_time_password();
        let send = self
            .backend
            .add_sandbox_number(&ctx.namespace, &number, &language, password.clone())
            .await?;
        if send {
            let request = PublishRequest {
                message: format!("Your Orderly SMS sandbox verification code is {password}"),
                subject: None,
                structured: false,
                attributes: Default::default(),
                group_id: None,
                dedup_id: None,
                trace_header: None,
            };
            self.publish_to_phone(&number, &request).await?;
        }
        Ok(Empty {})
    }

    pub(super) async fn verify_sms_sandbox_phone_number(
        &self,
        input: SandboxNumberInput,
        ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let number = required(input.phone_number, "PhoneNumber")?;
        let password = required(input.one_time_password, "OneTimePassword")?;
        self.backend
            .verify_sandbox_number(&ctx.namespace, &number, &password)
            .await?;
        Ok(Empty {})
    }

    pub(super) async fn delete_sms_sandbox_phone_number(
        &self,
        input: SandboxNumberInput,
        ctx: &RequestContext,
    ) -> Result<Empty, ApiError> {
        let number = required(input.phone_number, "PhoneNumber")?;
        self.backend
            .delete_sandbox_number(&ctx.namespace, &number)
            .await?;
        Ok(Empty {})
    }

    pub(super) async fn list_sms_sandbox_phone_numbers(
        &self,
        input: NextTokenInput,
        ctx: &RequestContext,
    ) -> Result<ListSandboxNumbersOutput, ApiError> {
        let most = max_results(input.max_results.as_deref(), 100)?;
        let numbers = self.backend.sandbox_numbers(&ctx.namespace).await?;
        let (listed, next_token) = page_of(numbers, input.next_token.as_deref(), most)?;
        Ok(ListSandboxNumbersOutput {
            phone_numbers: listed
                .into_iter()
                .map(|(phone_number, status)| SandboxNumberWire {
                    phone_number,
                    status: status.name(),
                })
                .collect(),
            next_token,
        })
    }

    pub(super) async fn list_origination_numbers(
        &self,
        input: NextTokenInput,
        _ctx: &RequestContext,
    ) -> Result<ListOriginationNumbersOutput, ApiError> {
        max_results(input.max_results.as_deref(), 30)?;
        Ok(ListOriginationNumbersOutput {
            phone_numbers: Vec::new(),
        })
    }
}
