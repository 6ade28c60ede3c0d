//! The SMS actions on the mobile state: settings, opt-outs and the sandbox.

use std::collections::BTreeMap;

use super::change::MobileChange;
use super::sms::{
    check_number, check_password, check_sandbox_number, not_in_sandbox, valid_setting,
    SandboxNumber, SandboxStatus, LANGUAGES, SMS_ATTRIBUTES,
};
use super::state::{namespace_key, Mobile, MAX_OPTED_OUT, MAX_SANDBOX_NUMBERS};
use crate::engine::error::{invalid_parameter as invalid, EngineError, EngineResult};
use crate::engine::namespace::Namespace;

impl Mobile {
    /// SetSMSAttributes: the settings given replace those of the same name.
    pub fn set_sms_attributes(
        &mut self,
        namespace: &Namespace,
        attributes: BTreeMap<String, String>,
    ) -> EngineResult<()> {
        if let Some(key) = attributes
            .keys()
            .find(|k| !SMS_ATTRIBUTES.contains(&k.as_str()))
        {
            return Err(invalid(format!("{key} is not a valid attribute")));
        }
        if let Some(key) = attributes
            .iter()
            .find(|(k, v)| !valid_setting(k, v))
            .map(|(k, _)| k)
        {
            return Err(invalid(format!("{key} is invalid")));
        }
        let (sms, key) = self.sms_of(namespace)?;
        sms.attributes.extend(attributes);
        let change = MobileChange::SmsAttributes {
            namespace: key,
            attributes: sms.attributes.clone(),
        };
        self.record(change);
        Ok(())
    }

    /// GetSMSAttributes: the settings named (all of them when none is), of those set; an
    /// account starts with AWS's monthly spend limit of 1 (USD).
    pub fn sms_attributes(
        &self,
        namespace: &Namespace,
        names: &[String],
    ) -> BTreeMap<String, String> {
        let mut all = BTreeMap::from([("MonthlySpendLimit".to_string(), "1".to_string())]);
        if let Some(sms) = self.sms.get(&namespace_key(namespace)) {
            all.extend(sms.attributes.clone());
        }
        all.into_iter()
            .filter(|(k, _)| names.is_empty() || names.contains(k))
            .collect()
    }

    /// CheckIfPhoneNumberIsOptedOut.
    pub fn is_opted_out(&self, namespace: &Namespace, number: &str) -> EngineResult<bool> {
        check_number(number)?;
        let sms = self.sms.get(&namespace_key(namespace));
        Ok(sms.is_some_and(|s| s.opted_out.contains(number)))
    }

    /// A number opts out (as a reply of STOP does on AWS) or back in (OptInPhoneNumber).
    pub fn set_opted_out(
        &mut self,
        namespace: &Namespace,
        number: &str,
        opted_out: bool,
    ) -> EngineResult<()> {
        check_number(number)?;
        let total = self.sms_total(|s| s.opted_out.len());
        let (sms, key) = self.sms_of(namespace)?;
        let changed = if opted_out {
            if total >= MAX_OPTED_OUT && !sms.opted_out.contains(number) {
                return Err(invalid(format!(
                    "Invalid parameter: PhoneNumber Reason: this server keeps at most {MAX_OPTED_OUT} opted-out numbers"
                )));
            }
            sms.opted_out.insert(number.to_string())
        } else {
            sms.opted_out.remove(number)
        };
        if changed {
            self.record(MobileChange::OptedOut {
                namespace: key,
                number: number.to_string(),
                opted_out,
            });
        }
        Ok(())
    }

    /// ListPhoneNumbersOptedOut, in order.
    pub fn opted_out(&self, namespace: &Namespace) -> Vec<String> {
        let sms = self.sms.get(&namespace_key(namespace));
        sms.map(|s| s.opted_out.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// CreateSMSSandboxPhoneNumber: the number is pending with `password`, which the caller
    /// sends to it; a number already there is sent a new one (a verified one stays verified).
    /// Answers whether a password is to be sent.
    pub fn add_sandbox_number(
        &mut self,
        namespace: &Namespace,
        number: &str,
        language: &str,
        password: String,
    ) -> EngineResult<bool> {
        check_sandbox_number(number)?;
        if !LANGUAGES.contains(&language) {
            return Err(invalid(format!(
                "Invalid parameter: LanguageCode Reason: {language} is not a supported language code"
            )));
        }
        let (sms, key) = self.sms_of(namespace)?;
        let entry = sms.sandbox.get(number);
        if entry.is_some_and(|e| e.password.is_none()) {
            return Ok(false);
        }
        if entry.is_none() && sms.sandbox.len() >= MAX_SANDBOX_NUMBERS {
            return Err(EngineError::UserError(format!(
                "The SMS sandbox holds at most {MAX_SANDBOX_NUMBERS} destination phone numbers"
            )));
        }
        let entry = SandboxNumber {
            language: language.to_string(),
            password: Some(password),
        };
        sms.sandbox.insert(number.to_string(), entry.clone());
        self.record(MobileChange::SandboxNumber {
            namespace: key,
            number: number.to_string(),
            language: entry.language,
            password: entry.password,
        });
        Ok(true)
    }

    /// VerifySMSSandboxPhoneNumber.
    pub fn verify_sandbox_number(
        &mut self,
        namespace: &Namespace,
        number: &str,
        password: &str,
    ) -> EngineResult<()> {
        check_sandbox_number(number)?;
        check_password(password)?;
        let (sms, key) = self.sms_in(namespace).ok_or_else(not_in_sandbox)?;
        let entry = sms.sandbox.get_mut(number).ok_or_else(not_in_sandbox)?;
        match &entry.password {
            None => return Ok(()),
            Some(sent) if sent == password => entry.password = None,
            Some(_) => {
                return Err(EngineError::Verification(
                    "Invalid one-time password".into(),
                ))
            }
        }
        let language = entry.language.clone();
        self.record(MobileChange::SandboxNumber {
            namespace: key,
            number: number.to_string(),
            language,
            password: None,
        });
        Ok(())
    }

    /// DeleteSMSSandboxPhoneNumber.
    pub fn delete_sandbox_number(
        &mut self,
        namespace: &Namespace,
        number: &str,
    ) -> EngineResult<()> {
        check_sandbox_number(number)?;
        let (sms, key) = self.sms_in(namespace).ok_or_else(not_in_sandbox)?;
        sms.sandbox.remove(number).ok_or_else(not_in_sandbox)?;
        self.record(MobileChange::DeleteSandboxNumber {
            namespace: key,
            number: number.to_string(),
        });
        Ok(())
    }

    /// ListSMSSandboxPhoneNumbers, in order.
    pub fn sandbox_numbers(&self, namespace: &Namespace) -> Vec<(String, SandboxStatus)> {
        let Some(sms) = self.sms.get(&namespace_key(namespace)) else {
            return Vec::new();
        };
        sms.sandbox
            .iter()
            .map(|(number, entry)| {
                let status = if entry.password.is_some() {
                    SandboxStatus::Pending
                } else {
                    SandboxStatus::Verified
                };
                (number.clone(), status)
            })
            .collect()
    }
}
