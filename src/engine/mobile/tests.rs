use std::sync::Arc;

use crate::engine::namespace::Namespace;
use std::collections::BTreeMap;

use super::*;
use crate::engine::changes::Change;
use crate::engine::error::EngineError;
use crate::engine::guard::Logged;

fn home() -> Namespace {
    Namespace::new("us-east-1", "000000000000")
}

fn attrs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn logged() -> Mobile {
    let mut mobile = Mobile::default();
    mobile.start_logging();
    mobile
}

fn gcm(mobile: &mut Mobile) -> Arc<str> {
    let credential = attrs(&[("PlatformCredential", "key")]);
    mobile
        .create_application(&home(), "app", "GCM", credential)
        .unwrap()
}

#[test]
fn applications_and_endpoints_are_named_as_aws_names_them_and_a_token_registers_once() {
    let mut mobile = logged();
    let app = gcm(&mut mobile);
    assert_eq!(&*app, "arn:aws:sns:us-east-1:000000000000:app/GCM/app");
    let shown = mobile.application(&app).unwrap().shown_attributes();
    assert_eq!(
        shown,
        attrs(&[("Enabled", "true")]),
        "credentials are not shown"
    );
    let endpoint = mobile
        .create_endpoint(&app, "token-1", Some("data"), BTreeMap::new())
        .unwrap();
    assert!(endpoint.starts_with("arn:aws:sns:us-east-1:000000000000:endpoint/GCM/app/"));
    let again = mobile.create_endpoint(&app, "token-1", Some("data"), BTreeMap::new());
    assert_eq!(
        again.unwrap(),
        endpoint,
        "the same token and attributes: the same endpoint"
    );
    let different = mobile.create_endpoint(&app, "token-1", Some("other"), BTreeMap::new());
    let Err(EngineError::InvalidParameter(message)) = different else {
        panic!("{different:?}");
    };
    assert!(
        message.contains("already exists with the same Token"),
        "{message}"
    );
    let attributes = &mobile.endpoint(&endpoint).unwrap().attributes;
    assert_eq!(
        *attributes,
        attrs(&[
            ("CustomUserData", "data"),
            ("Enabled", "true"),
            ("Token", "token-1")
        ])
    );
    let principal_alone = attrs(&[("PlatformPrincipal", "p")]);
    assert!(mobile
        .create_application(&home(), "app", "GCM", principal_alone)
        .is_err());
    let credential_alone = attrs(&[("PlatformCredential", "c")]);
    assert!(mobile
        .create_application(&home(), "adm", "ADM", credential_alone)
        .is_err());
    assert!(mobile
        .create_application(
            &home(),
            "bad name",
            "GCM",
            attrs(&[("PlatformCredential", "k")])
        )
        .is_err());
    assert!(mobile
        .create_application(
            &home(),
            "x",
            "PIGEON",
            attrs(&[("PlatformCredential", "k")])
        )
        .is_err());
}

#[test]
fn a_publish_target_must_exist_and_be_enabled() {
    let mut mobile = logged();
    let app = gcm(&mut mobile);
    let endpoint = mobile
        .create_endpoint(&app, "t", None, BTreeMap::new())
        .unwrap();
    assert!(mobile.publish_target(&endpoint).is_ok());
    mobile
        .set_endpoint_attributes(&endpoint, attrs(&[("Enabled", "false")]))
        .unwrap();
    assert!(matches!(
        mobile.publish_target(&endpoint),
        Err(EngineError::EndpointDisabled(_))
    ));
    assert!(matches!(
        mobile.publish_target("arn:aws:sns:us-east-1:000000000000:endpoint/GCM/app/x"),
        Err(EngineError::InvalidParameter(_))
    ));
    mobile.delete_application(&app);
    assert!(
        mobile.endpoint(&endpoint).is_err(),
        "its endpoints went with it"
    );
    mobile.delete_application(&app);
    mobile.delete_endpoint(&endpoint);
}

#[test]
fn sms_settings_opt_outs_and_the_sandbox() {
    let mut mobile = logged();
    let ns = home();
    mobile
        .set_sms_attributes(&ns, attrs(&[("DefaultSMSType", "Transactional")]))
        .unwrap();
    assert!(mobile
        .set_sms_attributes(&ns, attrs(&[("Colour", "red")]))
        .is_err());
    assert_eq!(
        mobile.sms_attributes(&ns, &[]),
        attrs(&[
            ("DefaultSMSType", "Transactional"),
            ("MonthlySpendLimit", "1")
        ])
    );
    assert_eq!(
        mobile.sms_attributes(&ns, &["MonthlySpendLimit".to_string()]),
        attrs(&[("MonthlySpendLimit", "1")])
    );
    assert!(!mobile.is_opted_out(&ns, "+15550100").unwrap());
    mobile.set_opted_out(&ns, "+15550100", true).unwrap();
    assert!(mobile.is_opted_out(&ns, "+15550100").unwrap());
    assert_eq!(mobile.opted_out(&ns), ["+15550100"]);
    assert!(mobile.is_opted_out(&ns, "not a number").is_err());
    let elsewhere = Namespace::new("eu-west-1", "000000000000");
    assert!(!mobile.is_opted_out(&elsewhere, "+15550100").unwrap());

    assert!(mobile
        .add_sandbox_number(&ns, "+15550101", "en-US", "123456".into())
        .unwrap());
    assert!(matches!(
        mobile.verify_sandbox_number(&ns, "+15550101", "000000"),
        Err(EngineError::Verification(_))
    ));
    assert_eq!(mobile.sandbox_numbers(&ns)[0].1, SandboxStatus::Pending);
    mobile
        .verify_sandbox_number(&ns, "+15550101", "123456")
        .unwrap();
    assert_eq!(mobile.sandbox_numbers(&ns)[0].1, SandboxStatus::Verified);
    for n in 2..=MAX_SANDBOX_NUMBERS {
        let number = format!("+1555010{n:02}");
        mobile
            .add_sandbox_number(&ns, &number, "en-US", "1".into())
            .unwrap();
    }
    assert!(matches!(
        mobile.add_sandbox_number(&ns, "+15559999", "en-US", "1".into()),
        Err(EngineError::UserError(_))
    ));
    assert!(matches!(
        mobile.delete_sandbox_number(&ns, "+15559999"),
        Err(EngineError::SnsResourceNotFound(_))
    ));
}

#[test]
fn the_logged_changes_and_the_image_rebuild_the_same_state() {
    let mut mobile = logged();
    let ns = home();
    let app = gcm(&mut mobile);
    let endpoint = mobile
        .create_endpoint(&app, "t", Some("u"), BTreeMap::new())
        .unwrap();
    let gone = mobile
        .create_endpoint(&app, "t2", None, BTreeMap::new())
        .unwrap();
    mobile.delete_endpoint(&gone);
    mobile.set_opted_out(&ns, "+15550100", true).unwrap();
    mobile
        .add_sandbox_number(&ns, "+15550101", "en-GB", "42".into())
        .unwrap();
    mobile
        .set_sms_attributes(&ns, attrs(&[("DefaultSenderID", "Orderly")]))
        .unwrap();
    let Some(Change::Mobile(logged)) = mobile.take_record(false) else {
        panic!("nothing logged");
    };
    let mut replayed = Mobile::default();
    for change in logged {
        replayed.apply(change);
    }
    let mut rebuilt = Mobile::default();
    for change in mobile.image() {
        rebuilt.apply(change);
    }
    for other in [&replayed, &rebuilt] {
        assert_eq!(other.image(), mobile.image());
        assert_eq!(other.endpoints_of(&app).unwrap()[0].arn, endpoint);
        assert!(other.endpoint(&gone).is_err());
    }

    mobile.clear();
    let Some(Change::Mobile(removals)) = mobile.take_record(false) else {
        panic!("the reset logged nothing");
    };
    for change in removals {
        replayed.apply(change);
    }
    assert!(mobile.image().is_empty());
    assert!(replayed.image().is_empty(), "{:?}", replayed.image());
}

#[test]
fn every_part_of_the_state_is_bounded() {
    let mut mobile = logged();
    let app = gcm(&mut mobile);
    let big = "x".repeat(20 * 1024);
    let too_long = attrs(&[("PlatformCredential", big.as_str())]);
    assert!(mobile.set_application_attributes(&app, too_long).is_err());
    for n in 0..31 {
        let name = format!("Custom{n}");
        let one = attrs(&[(name.as_str(), "v")]);
        let set = mobile.set_application_attributes(&app, one);
        assert_eq!(set.is_ok(), n < 31, "attribute {n}");
    }
    let one_more = attrs(&[("OneMore", "v")]);
    assert!(mobile.set_application_attributes(&app, one_more).is_err());
    let token = "t".repeat(5000);
    assert!(mobile
        .create_endpoint(&app, &token, None, BTreeMap::new())
        .is_err());
    let ns = home();
    assert!(mobile
        .set_sms_attributes(&ns, attrs(&[("MonthlySpendLimit", "lots")]))
        .is_err());
    assert!(mobile
        .set_sms_attributes(&ns, attrs(&[("DeliveryStatusSuccessSamplingRate", "101")]))
        .is_err());
    // A failed look-up keeps nothing.
    let elsewhere = Namespace::new("eu-west-1", "111111111111");
    assert!(mobile
        .delete_sandbox_number(&elsewhere, "+15550100")
        .is_err());
    assert!(mobile
        .verify_sandbox_number(&elsewhere, "+15550100", "1")
        .is_err());
    assert!(mobile.sms.is_empty(), "no SMS state was made");
}
