//! One region and account's SMS state: its settings (SetSMSAttributes), the numbers that
//! opted out, and the numbers of its SMS sandbox with their one-time passwords.

use std::collections::{BTreeMap, BTreeSet};

use super::change::MobileChange;
use crate::engine::error::{invalid_parameter as invalid, EngineError, EngineResult};
use crate::engine::topic::captured::check_phone_number;

/// The settings SetSMSAttributes takes (AWS's list).
pub const SMS_ATTRIBUTES: [&str; 6] = [
    "MonthlySpendLimit",
    "DeliveryStatusIAMRole",
    "DeliveryStatusSuccessSamplingRate",
    "DefaultSenderID",
    "DefaultSMSType",
    "UsageReportS3Bucket",
];

/// Whether a setting's value is one AWS takes: a whole number of dollars, a percentage, a
/// sender id of 1 to 11 letters and digits with a letter among them, one of the two message
/// types; the role and bucket names within their services' lengths.
pub(super) fn valid_setting(name: &str, value: &str) -> bool {
    match name {
        "MonthlySpendLimit" => value.len() <= 12 && value.parse::<u64>().is_ok(),
        "DeliveryStatusSuccessSamplingRate" => value.parse::<u8>().is_ok_and(|n| n <= 100),
        "DefaultSenderID" => {
            (1..=11).contains(&value.len())
                && value.chars().all(|c| c.is_ascii_alphanumeric())
                && value.chars().any(|c| c.is_ascii_alphabetic())
        }
        "DefaultSMSType" => matches!(value, "Promotional" | "Transactional"),
        "DeliveryStatusIAMRole" => value.len() <= 2048,
        "UsageReportS3Bucket" => (3..=63).contains(&value.len()),
        _ => false,
    }
}

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

/// A sandbox number as AWS's model takes it: `+` and at least 8 digits, or up to 9 digits;
/// at most 20 characters.
pub(super) fn check_sandbox_number(number: &str) -> EngineResult<()> {
    let digits = |d: &str| d.chars().all(|c| c.is_ascii_digit());
    let fits = number.len() <= 20
        && match number.strip_prefix('+') {
            Some(rest) => rest.len() >= 8 && digits(rest),
            None => number.len() <= 9 && digits(number),
        };
    if fits {
        check_number(number)
    } else {
        Err(invalid(
            "Invalid parameter: PhoneNumber Reason: input incorrectly formatted",
        ))
    }
}

/// A one-time password as AWS's model takes it: 5 to 8 digits.
pub(super) fn check_password(password: &str) -> EngineResult<()> {
    if (5..=8).contains(&password.len()) && password.chars().all(|c| c.is_ascii_digit()) {
        Ok(())
    } else {
        Err(invalid(
            "Invalid parameter: OneTimePassword Reason: must be 5 to 8 digits",
        ))
    }
}

pub(super) fn not_in_sandbox() -> EngineError {
    EngineError::SnsResourceNotFound("The phone number is not in the SMS sandbox".into())
}
