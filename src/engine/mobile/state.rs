//! The mobile state and what every action on it shares: logging its changes and applying
//! them back.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::change::MobileChange;
use super::push::{Application, Endpoint};
use super::sms::{SandboxNumber, Sms};
use crate::engine::error::{invalid_parameter as invalid, EngineResult};
use crate::engine::namespace::Namespace;

/// Most platform applications, endpoints, opted-out numbers and sandbox numbers (in each region
/// and account) the server keeps: every resource is bounded.
pub const MAX_APPLICATIONS: usize = 1_000;
pub const MAX_ENDPOINTS: usize = 100_000;
pub const MAX_OPTED_OUT: usize = 100_000;
/// AWS's own limit of destination numbers in an account's SMS sandbox.
pub const MAX_SANDBOX_NUMBERS: usize = 10;
/// Regions and accounts with SMS settings or numbers: with the six settings' sizes and the
/// sandbox's ten numbers, this bounds the SMS state.
pub const MAX_SMS_NAMESPACES: usize = 10_000;

/// Platform applications and endpoints by ARN, SMS state by region and account.
#[derive(Default)]
pub struct Mobile {
    pub(super) applications: BTreeMap<Arc<str>, Application>,
    pub(super) endpoints: BTreeMap<Arc<str>, Endpoint>,
    pub(super) sms: BTreeMap<String, Sms>,
    /// What changed since the log last took it; `None` while nothing is logged.
    changes: Option<Vec<MobileChange>>,
}

/// The key SMS state is kept under.
pub(super) fn namespace_key(namespace: &Namespace) -> String {
    format!("{}:{}", namespace.region, namespace.account)
}

impl Mobile {
    /// Starts keeping change records for the log.
    pub(crate) fn enable_log(&mut self) {
        self.changes.get_or_insert_with(Vec::new);
    }

    /// What changed since the log last took it.
    pub(crate) fn take_changes(&mut self) -> Vec<MobileChange> {
        self.changes
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    pub(super) fn record(&mut self, change: MobileChange) {
        if let Some(changes) = &mut self.changes {
            changes.push(change);
        }
    }

    /// Applies a change read back from the log or a snapshot (not logged again).
    pub fn apply(&mut self, change: MobileChange) {
        match change {
            MobileChange::Application { arn, attributes } => {
                if let Some(application) = Application::from_arn(&arn, attributes.clone()) {
                    let entry = self.applications.entry(arn).or_insert(application);
                    entry.attributes = attributes;
                }
            }
            MobileChange::DeleteApplication { arn } => self.remove_application(&arn),
            MobileChange::Endpoint {
                arn,
                application,
                attributes,
            } => self.put_endpoint(Endpoint {
                arn,
                application,
                attributes,
            }),
            MobileChange::DeleteEndpoint { arn } => self.remove_endpoint(&arn),
            MobileChange::SmsAttributes {
                namespace,
                attributes,
            } => self.sms.entry(namespace).or_default().attributes = attributes,
            MobileChange::OptedOut {
                namespace,
                number,
                opted_out,
            } => {
                let sms = self.sms.entry(namespace).or_default();
                if opted_out {
                    sms.opted_out.insert(number);
                } else {
                    sms.opted_out.remove(&number);
                }
            }
            MobileChange::SandboxNumber {
                namespace,
                number,
                language,
                password,
            } => {
                let sandbox = &mut self.sms.entry(namespace).or_default().sandbox;
                sandbox.insert(number, SandboxNumber { language, password });
            }
            MobileChange::DeleteSandboxNumber { namespace, number } => {
                if let Some(sms) = self.sms.get_mut(&namespace) {
                    sms.sandbox.remove(&number);
                }
            }
        }
    }

    pub(super) fn remove_application(&mut self, arn: &str) {
        if let Some(application) = self.applications.remove(arn) {
            for endpoint in application.endpoints {
                self.endpoints.remove(&endpoint);
            }
        }
    }

    pub(super) fn put_endpoint(&mut self, endpoint: Endpoint) {
        let Some(application) = self.applications.get_mut(&endpoint.application) else {
            return;
        };
        application.endpoints.insert(endpoint.arn.clone());
        self.endpoints.insert(endpoint.arn.clone(), endpoint);
    }

    pub(super) fn remove_endpoint(&mut self, arn: &str) {
        if let Some(endpoint) = self.endpoints.remove(arn) {
            if let Some(application) = self.applications.get_mut(&endpoint.application) {
                application.endpoints.remove(arn);
            }
        }
    }

    /// Everything there is, as the changes that make it from nothing (a snapshot's part).
    pub fn image(&self) -> Vec<MobileChange> {
        let mut image = Vec::new();
        for application in self.applications.values() {
            image.push(MobileChange::Application {
                arn: application.arn.clone(),
                attributes: application.attributes.clone(),
            });
        }
        for endpoint in self.endpoints.values() {
            image.push(MobileChange::Endpoint {
                arn: endpoint.arn.clone(),
                application: endpoint.application.clone(),
                attributes: endpoint.attributes.clone(),
            });
        }
        for (namespace, sms) in &self.sms {
            image.extend(sms.image(namespace));
        }
        image
    }

    /// Forgets everything (`POST /_orderly/reset?all=true`), logging each removal.
    pub fn clear(&mut self) {
        let applications: Vec<Arc<str>> = self.applications.keys().cloned().collect();
        for arn in applications {
            self.remove_application(&arn);
            self.record(MobileChange::DeleteApplication { arn });
        }
        for (namespace, sms) in std::mem::take(&mut self.sms) {
            for change in sms.removals(&namespace) {
                self.record(change);
            }
        }
    }

    /// A region and account's SMS state, made on first use (at most `MAX_SMS_NAMESPACES`).
    pub(super) fn sms_of(&mut self, namespace: &Namespace) -> EngineResult<(&mut Sms, String)> {
        let key = namespace_key(namespace);
        if !self.sms.contains_key(&key) && self.sms.len() >= MAX_SMS_NAMESPACES {
            return Err(invalid(format!(
                "Invalid parameter: this server keeps SMS settings for at most {MAX_SMS_NAMESPACES} regions and accounts"
            )));
        }
        Ok((self.sms.entry(key.clone()).or_default(), key))
    }

    /// A region and account's SMS state if it has any.
    pub(super) fn sms_in(&mut self, namespace: &Namespace) -> Option<(&mut Sms, String)> {
        let key = namespace_key(namespace);
        self.sms.get_mut(&key).map(|sms| (sms, key))
    }

    pub(super) fn sms_total<F: Fn(&Sms) -> usize>(&self, count: F) -> usize {
        self.sms.values().map(count).sum()
    }
}
