//! Platform applications, endpoints and SMS state across restarts: from the log alone, and
//! from a snapshot followed by later changes.

use std::collections::BTreeMap;

use super::snapshot;
use super::tests::{close, open_dir};
use crate::engine::namespace::Namespace;

fn home() -> Namespace {
    Namespace::new("us-east-1", "000000000000")
}

fn credential() -> BTreeMap<String, String> {
    BTreeMap::from([("PlatformCredential".to_string(), "key".to_string())])
}

#[test]
fn mobile_state_survives_restarts_from_the_log_and_from_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, data, _) = open_dir(dir.path());
    let app = {
        let mut mobile = engine.mobile();
        let app = mobile
            .create_application(&home(), "prices", "GCM", credential())
            .unwrap();
        mobile
            .create_endpoint(&app, "device-1", Some("one"), BTreeMap::new())
            .unwrap();
        mobile.set_opted_out(&home(), "+15550100", true).unwrap();
        app
    };
    let before = engine.mobile().image();
    close(data);
    drop(engine);

    let (engine, data, report) = open_dir(dir.path());
    assert!(report.snapshot.is_none());
    assert_eq!(engine.mobile().image(), before, "from the log");
    snapshot::take(dir.path(), &engine, &data.log_writer).unwrap();
    let second = {
        let mut mobile = engine.mobile();
        let second = mobile
            .create_endpoint(&app, "device-2", None, BTreeMap::new())
            .unwrap();
        mobile
            .add_sandbox_number(&home(), "+15550101", "en-US", "123456".into())
            .unwrap();
        mobile.set_opted_out(&home(), "+15550100", false).unwrap();
        second
    };
    let before = engine.mobile().image();
    close(data);
    drop(engine);

    let (engine, data, report) = open_dir(dir.path());
    assert!(report.snapshot.is_some());
    assert_eq!(
        engine.mobile().image(),
        before,
        "from the snapshot and later changes"
    );
    assert!(engine.mobile().endpoint(&second).is_ok());
    assert!(!engine.mobile().is_opted_out(&home(), "+15550100").unwrap());
    close(data);
}

/// Snapshot chunks of mobile changes are sized by `MobileChange::size`: it must not
/// understate what a change takes in a record, or a chunk could outgrow a record.
#[test]
fn a_mobile_change_takes_no_more_than_its_size_says() {
    use crate::engine::mobile::MobileChange;
    use crate::persist::format::mobile::DiskMobileChange;
    let attributes = BTreeMap::from([
        ("Token".to_string(), "t".repeat(4096)),
        ("CustomUserData".to_string(), "u".repeat(2048)),
        ("Enabled".to_string(), "true".to_string()),
    ]);
    let changes = [
        MobileChange::Endpoint {
            arn: "arn:aws:sns:us-east-1:000000000000:endpoint/GCM/app/1".into(),
            application: "arn:aws:sns:us-east-1:000000000000:app/GCM/app".into(),
            attributes: attributes.clone(),
        },
        MobileChange::Application {
            arn: "arn:aws:sns:us-east-1:000000000000:app/GCM/app".into(),
            attributes,
        },
        MobileChange::SandboxNumber {
            namespace: "us-east-1:000000000000".into(),
            number: "+15550100".into(),
            language: "en-US".into(),
            password: Some("123456".into()),
        },
        MobileChange::DeleteEndpoint { arn: "arn".into() },
    ];
    for change in &changes {
        let encoded = postcard::to_allocvec(&DiskMobileChange::from(change)).unwrap();
        assert!(
            encoded.len() <= change.size(),
            "{} bytes encoded, {} said",
            encoded.len(),
            change.size()
        );
    }
}
