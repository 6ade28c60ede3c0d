//! The platform application and endpoint actions on the mobile state.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::change::MobileChange;
use super::push::{
    check_application_attributes, check_application_name, check_credentials, check_enabled,
    check_endpoint_attributes, check_token, no_application, no_endpoint, Application, Endpoint,
    Platform,
};
use super::state::{Mobile, MAX_APPLICATIONS, MAX_ENDPOINTS};
use crate::engine::error::{invalid_parameter as invalid, EngineError, EngineResult};
use crate::engine::namespace::Namespace;

impl Mobile {
    /// CreatePlatformApplication: the application's ARN; again with the same name and platform,
    /// the same application with these attributes added.
    pub fn create_application(
        &mut self,
        namespace: &Namespace,
        name: &str,
        platform: &str,
        attributes: BTreeMap<String, String>,
    ) -> EngineResult<Arc<str>> {
        check_application_name(name)?;
        let platform = Platform::parse(platform).ok_or_else(|| {
            invalid(format!(
                "Invalid parameter: Platform Reason: {platform} is not supported"
            ))
        })?;
        check_credentials(platform, &attributes)?;
        check_enabled(&attributes)?;
        let arn: Arc<str> = format!(
            "arn:aws:sns:{}:{}:app/{}/{name}",
            namespace.region,
            namespace.account,
            platform.name()
        )
        .into();
        if !self.applications.contains_key(&arn) && self.applications.len() >= MAX_APPLICATIONS {
            return Err(invalid(format!(
                "Invalid parameter: Name Reason: this server keeps at most {MAX_APPLICATIONS} platform applications"
            )));
        }
        let kept = self.applications.get(&arn).map(|a| &a.attributes);
        check_application_attributes(kept.unwrap_or(&BTreeMap::new()), &attributes)?;
        let application = self
            .applications
            .entry(arn.clone())
            .or_insert_with(|| Application {
                arn: arn.clone(),
                platform,
                name: name.to_string(),
                attributes: BTreeMap::new(),
                endpoints: BTreeSet::new(),
            });
        application.attributes.extend(attributes);
        let change = MobileChange::Application {
            arn: arn.clone(),
            attributes: application.attributes.clone(),
        };
        self.record(change);
        Ok(arn)
    }

    pub fn application(&self, arn: &str) -> EngineResult<&Application> {
        self.applications.get(arn).ok_or_else(no_application)
    }

    /// SetPlatformApplicationAttributes: the attributes given replace those of the same name.
    pub fn set_application_attributes(
        &mut self,
        arn: &str,
        attributes: BTreeMap<String, String>,
    ) -> EngineResult<()> {
        check_enabled(&attributes)?;
        let application = self.applications.get_mut(arn).ok_or_else(no_application)?;
        check_application_attributes(&application.attributes, &attributes)?;
        application.attributes.extend(attributes);
        let change = MobileChange::Application {
            arn: application.arn.clone(),
            attributes: application.attributes.clone(),
        };
        self.record(change);
        Ok(())
    }

    /// The applications of one region and account, in ARN order.
    pub fn applications_in(&self, namespace: &Namespace) -> Vec<&Application> {
        let prefix = format!(
            "arn:aws:sns:{}:{}:app/",
            namespace.region, namespace.account
        );
        self.applications
            .values()
            .filter(|a| a.arn.starts_with(&prefix))
            .collect()
    }

    /// DeletePlatformApplication: the application and its endpoints go; an unknown one is no
    /// error.
    pub fn delete_application(&mut self, arn: &str) {
        if self.applications.contains_key(arn) {
            self.remove_application(arn);
            self.record(MobileChange::DeleteApplication { arn: arn.into() });
        }
    }

    /// CreatePlatformEndpoint: the endpoint's ARN. A token the application already has gives
    /// that endpoint back if nothing else differs, and is refused otherwise (AWS's rule).
    pub fn create_endpoint(
        &mut self,
        application_arn: &str,
        token: &str,
        custom_user_data: Option<&str>,
        mut attributes: BTreeMap<String, String>,
    ) -> EngineResult<Arc<str>> {
        check_token(token)?;
        check_endpoint_attributes(&attributes)?;
        let application = self.application(application_arn)?;
        attributes.insert("Token".into(), token.to_string());
        if let Some(data) = custom_user_data {
            check_endpoint_attributes(&BTreeMap::from([("CustomUserData".into(), data.into())]))?;
            // One given in Attributes wins, as on AWS.
            attributes
                .entry("CustomUserData".into())
                .or_insert_with(|| data.to_string());
        }
        attributes
            .entry("Enabled".into())
            .or_insert_with(|| "true".into());
        let same_token = application
            .endpoints
            .iter()
            .filter_map(|arn| self.endpoints.get(arn))
            .find(|e| e.token() == token);
        if let Some(existing) = same_token {
            if existing.attributes == attributes {
                return Ok(existing.arn.clone());
            }
            return Err(invalid(format!(
                "Invalid parameter: Token Reason: Endpoint {} already exists with the same Token, but different attributes.",
                existing.arn
            )));
        }
        if self.endpoints.len() >= MAX_ENDPOINTS {
            return Err(invalid(format!(
                "Invalid parameter: Token Reason: this server keeps at most {MAX_ENDPOINTS} platform endpoints"
            )));
        }
        let arn: Arc<str> = format!(
            "{}/{}",
            application_arn.replacen(":app/", ":endpoint/", 1),
            uuid::Uuid::new_v4()
        )
        .into();
        let endpoint = Endpoint {
            arn: arn.clone(),
            application: application.arn.clone(),
            attributes,
        };
        self.record(MobileChange::Endpoint {
            arn: arn.clone(),
            application: endpoint.application.clone(),
            attributes: endpoint.attributes.clone(),
        });
        self.put_endpoint(endpoint);
        Ok(arn)
    }

    pub fn endpoint(&self, arn: &str) -> EngineResult<&Endpoint> {
        self.endpoints.get(arn).ok_or_else(no_endpoint)
    }

    /// SetEndpointAttributes.
    pub fn set_endpoint_attributes(
        &mut self,
        arn: &str,
        attributes: BTreeMap<String, String>,
    ) -> EngineResult<()> {
        check_endpoint_attributes(&attributes)?;
        let endpoint = self.endpoints.get_mut(arn).ok_or_else(no_endpoint)?;
        endpoint.attributes.extend(attributes);
        let change = MobileChange::Endpoint {
            arn: endpoint.arn.clone(),
            application: endpoint.application.clone(),
            attributes: endpoint.attributes.clone(),
        };
        self.record(change);
        Ok(())
    }

    /// An application's endpoints, in ARN order.
    pub fn endpoints_of(&self, application_arn: &str) -> EngineResult<Vec<&Endpoint>> {
        let application = self.application(application_arn)?;
        Ok(application
            .endpoints
            .iter()
            .filter_map(|arn| self.endpoints.get(arn))
            .collect())
    }

    /// DeleteEndpoint: an unknown one is no error.
    pub fn delete_endpoint(&mut self, arn: &str) {
        if self.endpoints.contains_key(arn) {
            self.remove_endpoint(arn);
            self.record(MobileChange::DeleteEndpoint { arn: arn.into() });
        }
    }

    /// Where a Publish with this TargetArn goes: an enabled endpoint of an enabled application,
    /// with its platform (a json-structured message's key for it).
    pub fn publish_target(&self, arn: &str) -> EngineResult<(&Endpoint, Platform)> {
        let endpoint = self.endpoints.get(arn).ok_or_else(|| {
            invalid("Invalid parameter: TargetArn Reason: No endpoint found for the target arn specified")
        })?;
        let application = self.application(&endpoint.application)?;
        if !application.enabled() {
            return Err(EngineError::PlatformApplicationDisabled(
                "Platform application is disabled".into(),
            ));
        }
        if !endpoint.enabled() {
            return Err(EngineError::EndpointDisabled("Endpoint is disabled".into()));
        }
        Ok((endpoint, application.platform))
    }
}
