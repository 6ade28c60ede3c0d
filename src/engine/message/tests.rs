use super::*;

fn s(name: &str, v: &str) -> (String, AttributeValue) {
    (
        name.to_string(),
        AttributeValue {
            data_type: "String".into(),
            data: AttributeData::String(v.into()),
        },
    )
}

#[test]
fn plain_messages_carry_no_extras_and_no_attributes_hold_no_allocation() {
    let parts = |trace_header: Option<&str>| MessageParts {
        id: MessageId::random(),
        body: "price 42".into(),
        body_md5: super::super::body::body_md5("price 42"),
        attributes: MessageAttributes::new(vec![]),
        attributes_md5: None,
        trace_header: trace_header.map(Arc::from),
        sender_id: "AIDA".into(),
        sent_at: Timestamp(7),
        group_id: None,
        dedup_id: None,
        sequence_number: None,
        receive_count: 0,
        first_receive_at: None,
        dead_letter_source_arn: None,
    };
    assert!(Message::from(parts(None)).extras.is_none());
    let traced = Message::from(parts(Some("Root=1-abc")));
    assert_eq!(traced.trace_header().map(|t| &**t), Some("Root=1-abc"));
    assert!(MessageAttributes::new(vec![]).0.is_none());
    let attributes = MessageAttributes::new(vec![s("b", "2"), s("a", "1")]);
    assert_eq!(attributes.entries()[0].0, "a");
    assert!(attributes.select(&["c".into()]).0.is_none());
}

#[test]
fn md5_of_attributes_matches_aws_vectors() {
    let one = MessageAttributes::new(vec![s("Foo", "Bar")]);
    assert_eq!(one.md5().unwrap(), "ae7155c6026991b6d54b11589678bf9c");
    let three = MessageAttributes::new(vec![
        s("Help.Me", "Me"),
        s("Hello", "There"),
        s("General", "Kenobi"),
    ]);
    assert_eq!(three.md5().unwrap(), "4c360f3fdafd970e05fae2f149d997f5");
    let subset = three.select(&["Hel.*".to_string()]);
    assert_eq!(subset.len(), 2);
    let two = three.select(&["Hello".to_string(), "General".to_string()]);
    assert_eq!(two.md5().unwrap(), "fca026605781cb4126a1e9044df24232");
    let binary = MessageAttributes::new(vec![(
        "attr1".to_string(),
        AttributeValue {
            data_type: "Binary".into(),
            data: AttributeData::Binary(
                b"traceparent\x1e00-774062d6c37081a5a0b9b5b88e30627c-2d2482211f6489da-01".to_vec(),
            ),
        },
    )]);
    assert_eq!(binary.md5().unwrap(), "8cbe4db156db8a94db8b801b7addb984");
}

#[test]
fn content_dedup_id_is_the_hex_sha256_of_the_body() {
    assert_eq!(
        content_dedup_id("hello"),
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    );
}

#[test]
fn attribute_rules() {
    let ok = |n: &str, t: &str, v: &str| {
        validate_attribute(
            n,
            &AttributeValue {
                data_type: t.into(),
                data: AttributeData::String(v.into()),
            },
        )
    };
    assert!(ok("price", "Number.float", "1.5e3").is_ok());
    assert!(ok("attr.1øßä", "String", "v").is_ok());
    assert!(ok("a b", "String", "v").is_err());
    assert!(ok("a\u{7}", "String", "v").is_err());
    assert!(ok("AWS.x", "String", "v").is_err());
    assert!(ok("a..b", "String", "v").is_err());
    assert!(ok(".a", "String", "v").is_err());
    assert!(ok("a", "Strin", "v").is_err());
    assert!(ok("a", "String", "").is_err());
    assert!(ok("a", "Number", "12abc").is_err());
    assert!(ok("a", "Binary", "x").is_err());
}

#[test]
fn numbers_hold_38_significant_digits_between_ten_to_the_minus_128_and_plus_126() {
    let number = |v: &str| {
        validate_attribute(
            "n",
            &AttributeValue {
                data_type: "Number".into(),
                data: AttributeData::String(v.into()),
            },
        )
        .is_ok()
    };
    let nines = "9".repeat(38);
    for accepted in [
        "0",
        "-0.000",
        "0e999999999999999999999",
        "1e126",
        "10e125",
        "-1E+126",
        "9.99e125",
        "1e-128",
        "0.001e-125",
        "123.45",
        nines.as_str(),
        // Trailing zeros are trimmed: one significant digit.
        &format!("1{}", "0".repeat(60)),
        &format!("0.{}1", "0".repeat(100)),
    ] {
        assert!(number(accepted), "{accepted}");
    }
    for refused in [
        "1.1e126",
        "1e127",
        "1e200",
        "9.9e-129",
        "1e-129",
        "11e125",
        "1e99999999999999999999",
        &format!("{nines}9"),
        &format!("1.{}1", "0".repeat(37)),
        &format!("1{}", "0".repeat(127)),
    ] {
        assert!(!number(refused), "{refused}");
    }
}

#[test]
fn selection_patterns() {
    let attrs = MessageAttributes::new(vec![s("a.x", "1"), s("a.y", "2"), s("b", "3")]);
    assert_eq!(attrs.select(&["All".into()]).len(), 3);
    assert_eq!(attrs.select(&["a.*".into()]).len(), 2);
    assert_eq!(attrs.select(&["b".into(), "zzz".into()]).len(), 1);
    assert!(attrs.select(&[]).is_empty());
}

#[test]
fn tokens() {
    assert!(validate_token("MessageGroupId", "g-1!").is_ok());
    assert!(validate_token("MessageGroupId", "").is_err());
    assert!(validate_token("MessageGroupId", "has space").is_err());
    assert!(validate_token("MessageGroupId", &"x".repeat(129)).is_err());
}
