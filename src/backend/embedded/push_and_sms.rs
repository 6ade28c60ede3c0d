//! Mobile push and SMS management on the embedded engine: each change is logged and durable
//! before it is answered.

use std::sync::Arc;

use super::Embedded;
use crate::backend::{Answer, Attributes, Listed, PushAndSms};
use crate::engine::mobile::SandboxStatus;
use crate::engine::namespace::Namespace;

impl PushAndSms for Embedded {
    fn create_platform_application<'a>(
        &'a self,
        namespace: &'a Namespace,
        name: &'a str,
        platform: &'a str,
        attributes: Attributes,
    ) -> Answer<'a, Arc<str>> {
        self.changing(move |engine| {
            let mut mobile = engine.mobile();
            Ok(mobile.create_application(namespace, name, platform, attributes)?)
        })
    }

    fn set_platform_application_attributes<'a>(
        &'a self,
        arn: &'a str,
        attributes: Attributes,
    ) -> Answer<'a, ()> {
        self.changing(move |engine| {
            Ok(engine
                .mobile()
                .set_application_attributes(arn, attributes)?)
        })
    }

    fn platform_application_attributes<'a>(&'a self, arn: &'a str) -> Answer<'a, Attributes> {
        self.reading(move |engine| Ok(engine.mobile().application(arn)?.shown_attributes()))
    }

    fn platform_applications<'a>(&'a self, namespace: &'a Namespace) -> Answer<'a, Listed> {
        self.reading(move |engine| {
            let mobile = engine.mobile();
            let listed = mobile.applications_in(namespace).into_iter();
            Ok(listed
                .map(|a| (a.arn.clone(), a.shown_attributes()))
                .collect())
        })
    }

    fn delete_platform_application<'a>(&'a self, arn: &'a str) -> Answer<'a, ()> {
        self.changing(move |engine| {
            engine.mobile().delete_application(arn);
            Ok(())
        })
    }

    fn create_platform_endpoint<'a>(
        &'a self,
        application_arn: &'a str,
        token: &'a str,
        custom_user_data: Option<&'a str>,
        attributes: Attributes,
    ) -> Answer<'a, Arc<str>> {
        self.changing(move |engine| {
            let mut mobile = engine.mobile();
            Ok(mobile.create_endpoint(application_arn, token, custom_user_data, attributes)?)
        })
    }

    fn set_endpoint_attributes<'a>(
        &'a self,
        arn: &'a str,
        attributes: Attributes,
    ) -> Answer<'a, ()> {
        self.changing(move |engine| Ok(engine.mobile().set_endpoint_attributes(arn, attributes)?))
    }

    fn endpoint_attributes<'a>(&'a self, arn: &'a str) -> Answer<'a, Attributes> {
        self.reading(move |engine| Ok(engine.mobile().endpoint(arn)?.attributes.clone()))
    }

    fn endpoints_of<'a>(&'a self, application_arn: &'a str) -> Answer<'a, Listed> {
        self.reading(move |engine| {
            let mobile = engine.mobile();
            let endpoints = mobile.endpoints_of(application_arn)?.into_iter();
            Ok(endpoints
                .map(|e| (e.arn.clone(), e.attributes.clone()))
                .collect())
        })
    }

    fn delete_endpoint<'a>(&'a self, arn: &'a str) -> Answer<'a, ()> {
        self.changing(move |engine| {
            engine.mobile().delete_endpoint(arn);
            Ok(())
        })
    }

    fn check_publish_target<'a>(&'a self, arn: &'a str) -> Answer<'a, ()> {
        self.reading(move |engine| {
            engine.mobile().publish_target(arn)?;
            Ok(())
        })
    }

    fn set_sms_attributes<'a>(
        &'a self,
        namespace: &'a Namespace,
        attributes: Attributes,
    ) -> Answer<'a, ()> {
        self.changing(move |engine| {
            Ok(engine.mobile().set_sms_attributes(namespace, attributes)?)
        })
    }

    fn sms_attributes<'a>(
        &'a self,
        namespace: &'a Namespace,
        names: &'a [String],
    ) -> Answer<'a, Attributes> {
        self.reading(move |engine| Ok(engine.mobile().sms_attributes(namespace, names)))
    }

    fn is_opted_out<'a>(&'a self, namespace: &'a Namespace, number: &'a str) -> Answer<'a, bool> {
        self.reading(move |engine| Ok(engine.mobile().is_opted_out(namespace, number)?))
    }

    fn set_opted_out<'a>(
        &'a self,
        namespace: &'a Namespace,
        number: &'a str,
        opted_out: bool,
    ) -> Answer<'a, ()> {
        self.changing(move |engine| {
            Ok(engine
                .mobile()
                .set_opted_out(namespace, number, opted_out)?)
        })
    }

    fn opted_out<'a>(&'a self, namespace: &'a Namespace) -> Answer<'a, Vec<String>> {
        self.reading(move |engine| Ok(engine.mobile().opted_out(namespace)))
    }

    fn add_sandbox_number<'a>(
        &'a self,
        namespace: &'a Namespace,
        number: &'a str,
        language: &'a str,
        password: String,
    ) -> Answer<'a, bool> {
        self.changing(move |engine| {
            let mut mobile = engine.mobile();
            Ok(mobile.add_sandbox_number(namespace, number, language, password)?)
        })
    }

    fn verify_sandbox_number<'a>(
        &'a self,
        namespace: &'a Namespace,
        number: &'a str,
        password: &'a str,
    ) -> Answer<'a, ()> {
        self.changing(move |engine| {
            let mut mobile = engine.mobile();
            Ok(mobile.verify_sandbox_number(namespace, number, password)?)
        })
    }

    fn delete_sandbox_number<'a>(
        &'a self,
        namespace: &'a Namespace,
        number: &'a str,
    ) -> Answer<'a, ()> {
        self.changing(move |engine| Ok(engine.mobile().delete_sandbox_number(namespace, number)?))
    }

    fn sandbox_numbers<'a>(
        &'a self,
        namespace: &'a Namespace,
    ) -> Answer<'a, Vec<(String, SandboxStatus)>> {
        self.reading(move |engine| Ok(engine.mobile().sandbox_numbers(namespace)))
    }
}
