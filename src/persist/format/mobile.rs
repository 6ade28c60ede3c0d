//! Platform applications, endpoints and SMS state as log records and snapshot items hold them
//! (format version 5).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::mobile::MobileChange;

type Attributes<'a> = Cow<'a, BTreeMap<String, String>>;

#[derive(Serialize, Deserialize)]
pub enum DiskMobileChange<'a> {
    Application {
        arn: &'a str,
        attributes: Attributes<'a>,
    },
    DeleteApplication {
        arn: &'a str,
    },
    Endpoint {
        arn: &'a str,
        application: &'a str,
        attributes: Attributes<'a>,
    },
    DeleteEndpoint {
        arn: &'a str,
    },
    SmsAttributes {
        namespace: &'a str,
        attributes: Attributes<'a>,
    },
    OptedOut {
        namespace: &'a str,
        number: &'a str,
        opted_out: bool,
    },
    SandboxNumber {
        namespace: &'a str,
        number: &'a str,
        language: &'a str,
        password: Option<&'a str>,
    },
    DeleteSandboxNumber {
        namespace: &'a str,
        number: &'a str,
    },
}

impl<'a> From<&'a MobileChange> for DiskMobileChange<'a> {
    fn from(change: &'a MobileChange) -> Self {
        use MobileChange as M;
        match change {
            M::Application { arn, attributes } => DiskMobileChange::Application {
                arn,
                attributes: Cow::Borrowed(attributes),
            },
            M::DeleteApplication { arn } => DiskMobileChange::DeleteApplication { arn },
            M::Endpoint {
                arn,
                application,
                attributes,
            } => DiskMobileChange::Endpoint {
                arn,
                application,
                attributes: Cow::Borrowed(attributes),
            },
            M::DeleteEndpoint { arn } => DiskMobileChange::DeleteEndpoint { arn },
            M::SmsAttributes {
                namespace,
                attributes,
            } => DiskMobileChange::SmsAttributes {
                namespace,
                attributes: Cow::Borrowed(attributes),
            },
            M::OptedOut {
                namespace,
                number,
                opted_out,
            } => DiskMobileChange::OptedOut {
                namespace,
                number,
                opted_out: *opted_out,
            },
            M::SandboxNumber {
                namespace,
                number,
                language,
                password,
            } => DiskMobileChange::SandboxNumber {
                namespace,
                number,
                language,
                password: password.as_deref(),
            },
            M::DeleteSandboxNumber { namespace, number } => {
                DiskMobileChange::DeleteSandboxNumber { namespace, number }
            }
        }
    }
}

impl DiskMobileChange<'_> {
    pub fn into_live(self) -> MobileChange {
        use MobileChange as M;
        match self {
            DiskMobileChange::Application { arn, attributes } => M::Application {
                arn: arn.into(),
                attributes: attributes.into_owned(),
            },
            DiskMobileChange::DeleteApplication { arn } => M::DeleteApplication { arn: arn.into() },
            DiskMobileChange::Endpoint {
                arn,
                application,
                attributes,
            } => M::Endpoint {
                arn: arn.into(),
                application: application.into(),
                attributes: attributes.into_owned(),
            },
            DiskMobileChange::DeleteEndpoint { arn } => M::DeleteEndpoint { arn: arn.into() },
            DiskMobileChange::SmsAttributes {
                namespace,
                attributes,
            } => M::SmsAttributes {
                namespace: namespace.into(),
                attributes: attributes.into_owned(),
            },
            DiskMobileChange::OptedOut {
                namespace,
                number,
                opted_out,
            } => M::OptedOut {
                namespace: namespace.into(),
                number: number.into(),
                opted_out,
            },
            DiskMobileChange::SandboxNumber {
                namespace,
                number,
                language,
                password,
            } => M::SandboxNumber {
                namespace: namespace.into(),
                number: number.into(),
                language: language.into(),
                password: password.map(str::to_string),
            },
            DiskMobileChange::DeleteSandboxNumber { namespace, number } => M::DeleteSandboxNumber {
                namespace: namespace.into(),
                number: number.into(),
            },
        }
    }
}

/// The mobile changes of one record or snapshot chunk.
pub type MobileChanges<'a> = super::list::List<'a, MobileChange, DiskMobileChange<'a>>;
