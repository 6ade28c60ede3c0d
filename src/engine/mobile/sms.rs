//! One region and account's SMS state: its settings (SetSMSAttributes), the numbers that
//! opted out, and the numbers of its SMS sandbox with their one-time passwords.

use std::collections::{BTreeMap, BTreeSet};

use super::change::MobileChange;
use crate::engine::error::{invalid_parameter as invalid, EngineError, EngineResult};
use crate::engine::topic::recorded::check_phone_number;

/// The settings SetSMSAttributes takes (AWS's list).
pub const SMS_ATTRIBUTES: [&str; 6] = [
    "MonthlySpendLimit",
    "DeliveryStatusIAMRole",
    "DeliveryStatusSuccessSamplingRate",
    "DefaultSenderID",
    "DefaultSMSType",
    "UsageReportS3Bucket",
];

/// The languages a sandbox number's password may be sent in (AWS's `LanguageCodeString`).
pub(super) const LANGUAGES: [&str; 13] = [
    "en-US", "en-GB", "es-419", "es-ES", "de-DE", "fr-CA", "fr-FR", "it-IT", "ja-JP", "pt-BR",
    "kr-KR", "zh-CN", "zh-TW",
];

#[derive(Clone, Debug, Default)]
pub struct Sms {
    pub attributes: BTreeMap<String, String>,
    pub opted_out: BTreeSet<String>,
    pub(super) sandbox: BTreeMap<String, SandboxNumber>,
}

#[derive(Clone, Debug)]
pub(super) struct SandboxNumber {
    pub language: String,
    /// The password sent while pending; `None` once verified.
    pub password: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SandboxStatus {
    Pending,
    Verified,
}

impl SandboxStatus {
    pub fn name(self) -> &'static str {
        match self {
            SandboxStatus::Pending => "Pending",
            SandboxStatus::Verified => "Verified",
        }
    }
}

impl Sms {
    pub(super) fn image(&self, namespace: &str) -> Vec<MobileChange> {
        let mut image = Vec::new();
        if !self.attributes.is_empty() {
            image.push(MobileChange::SmsAttributes {
                namespace: namespace.to_string(),
                attributes: self.attributes.clone(),
            });
        }
        for number in &self.opted_out {
            image.push(MobileChange::OptedOut {
                namespace: namespace.to_string(),
                number: number.clone(),
                opted_out: true,
            });
        }
        for (number, entry) in &self.sandbox {
            image.push(MobileChange::SandboxNumber {
                namespace: namespace.to_string(),
                number: number.clone(),
                language: entry.language.clone(),
                password: entry.password.clone(),
            });
        }
        image
    }

    /// The changes that take this state back to nothing.
    pub(super) fn removals(&self, namespace: &str) -> Vec<MobileChange> {
        let mut removals = vec![MobileChange::SmsAttributes {
            namespace: namespace.to_string(),
            attributes: BTreeMap::new(),
        }];
        for number in &self.opted_out {
            removals.push(MobileChange::OptedOut {
                namespace: namespace.to_string(),
                number: number.clone(),
                opted_out: false,
            });
        }
        for number in self.sandbox.keys() {
            removals.push(MobileChange::DeleteSandboxNumber {
                namespace: namespace.to_string(),
                number: number.clone(),
            });
        }
        removals
    }
}

pub(super) fn check_number(number: &str) -> EngineResult<()> {
    if check_phone_number(number) {
        Ok(())
    } else {
        Err(invalid(
            "Invalid parameter: PhoneNumber Reason: input incorrectly formatted",
        ))
    }
}

pub(super) fn not_in_sandbox() -> EngineError {
    EngineError::SnsResourceNotFound("The phone number is not in the SMS sandbox".into())
}
