//! Mobile push and SMS over shards: their state is per region and account, not per queue or
//! topic, so it lives in shard 0.

use std::sync::Arc;

use super::{on, Sharded};
use crate::backend::{Answer, Attributes, Listed, PushAndSms};
use crate::engine::mobile::SandboxStatus;
use crate::engine::namespace::Namespace;

impl PushAndSms for Sharded {
    fn create_platform_application<'a>(
        &'a self,
        namespace: &'a Namespace,
        name: &'a str,
        platform: &'a str,
        attributes: Attributes,
    ) -> Answer<'a, Arc<str>> {
        on(self.shard(0), move |shard| {
            shard.create_platform_application(namespace, name, platform, attributes)
        })
    }

    fn set_platform_application_attributes<'a>(
        &'a self,
        arn: &'a str,
        attributes: Attributes,
    ) -> Answer<'a, ()> {
        on(self.shard(0), move |shard| {
            shard.set_platform_application_attributes(arn, attributes)
        })
    }

    fn platform_application_attributes<'a>(&'a self, arn: &'a str) -> Answer<'a, Attributes> {
        on(self.shard(0), move |shard| {
            shard.platform_application_attributes(arn)
        })
    }

    fn platform_applications<'a>(&'a self, namespace: &'a Namespace) -> Answer<'a, Listed> {
        on(self.shard(0), move |shard| {
            shard.platform_applications(namespace)
        })
    }

    fn delete_platform_application<'a>(&'a self, arn: &'a str) -> Answer<'a, ()> {
        on(self.shard(0), move |shard| {
            shard.delete_platform_application(arn)
        })
    }

    fn create_platform_endpoint<'a>(
        &'a self,
        application_arn: &'a str,
        token: &'a str,
        custom_user_data: Option<&'a str>,
        attributes: Attributes,
    ) -> Answer<'a, Arc<str>> {
        on(self.shard(0), move |shard| {
            shard.create_platform_endpoint(application_arn, token, custom_user_data, attributes)
        })
    }

    fn set_endpoint_attributes<'a>(
        &'a self,
        arn: &'a str,
        attributes: Attributes,
    ) -> Answer<'a, ()> {
        on(self.shard(0), move |shard| {
            shard.set_endpoint_attributes(arn, attributes)
        })
    }

    fn endpoint_attributes<'a>(&'a self, arn: &'a str) -> Answer<'a, Attributes> {
        on(self.shard(0), move |shard| shard.endpoint_attributes(arn))
    }

    fn endpoints_of<'a>(&'a self, application_arn: &'a str) -> Answer<'a, Listed> {
        on(self.shard(0), move |shard| {
            shard.endpoints_of(application_arn)
        })
    }

    fn delete_endpoint<'a>(&'a self, arn: &'a str) -> Answer<'a, ()> {
        on(self.shard(0), move |shard| shard.delete_endpoint(arn))
    }

    fn check_publish_target<'a>(&'a self, arn: &'a str) -> Answer<'a, ()> {
        on(self.shard(0), move |shard| shard.check_publish_target(arn))
    }

    fn set_sms_attributes<'a>(
        &'a self,
        namespace: &'a Namespace,
        attributes: Attributes,
    ) -> Answer<'a, ()> {
        on(self.shard(0), move |shard| {
            shard.set_sms_attributes(namespace, attributes)
        })
    }

    fn sms_attributes<'a>(
        &'a self,
        namespace: &'a Namespace,
        names: &'a [String],
    ) -> Answer<'a, Attributes> {
        on(self.shard(0), move |shard| {
            shard.sms_attributes(namespace, names)
        })
    }

    fn is_opted_out<'a>(&'a self, namespace: &'a Namespace, number: &'a str) -> Answer<'a, bool> {
        on(self.shard(0), move |shard| {
            shard.is_opted_out(namespace, number)
        })
    }

    fn set_opted_out<'a>(
        &'a self,
        namespace: &'a Namespace,
        number: &'a str,
        opted_out: bool,
    ) -> Answer<'a, ()> {
        on(self.shard(0), move |shard| {
            shard.set_opted_out(namespace, number, opted_out)
        })
    }

    fn opted_out<'a>(&'a self, namespace: &'a Namespace) -> Answer<'a, Vec<String>> {
        on(self.shard(0), move |shard| shard.opted_out(namespace))
    }

    fn add_sandbox_number<'a>(
        &'a self,
        namespace: &'a Namespace,
        number: &'a str,
        language: &'a str,
        password: String,
    ) -> Answer<'a, bool> {
        on(self.shard(0), move |shard| {
            shard.add_sandbox_number(namespace, number, language, password)
        })
    }

    fn verify_sandbox_number<'a>(
        &'a self,
        namespace: &'a Namespace,
        number: &'a str,
        password: &'a str,
    ) -> Answer<'a, ()> {
        on(self.shard(0), move |shard| {
            shard.verify_sandbox_number(namespace, number, password)
        })
    }

    fn delete_sandbox_number<'a>(
        &'a self,
        namespace: &'a Namespace,
        number: &'a str,
    ) -> Answer<'a, ()> {
        on(self.shard(0), move |shard| {
            shard.delete_sandbox_number(namespace, number)
        })
    }

    fn sandbox_numbers<'a>(
        &'a self,
        namespace: &'a Namespace,
    ) -> Answer<'a, Vec<(String, SandboxStatus)>> {
        on(self.shard(0), move |shard| shard.sandbox_numbers(namespace))
    }
}
