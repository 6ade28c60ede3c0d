use super::*;

fn same_as_serde<T: Serialize + JsonAnswer>(answer: &T) {
    let mut hand = Vec::new();
    answer.write_json(&mut hand);
    let serde = serde_json::to_vec(answer).unwrap();
    assert_eq!(
        String::from_utf8(hand).unwrap(),
        String::from_utf8(serde).unwrap()
    );
}

fn message(body: &str, extras: bool) -> MessageWire {
    let mut message_attributes = BTreeMap::new();
    let mut attributes = Pairs::default();
    if extras {
        attributes.0.push(("SenderId".into(), "AIDA\"x".into()));
        attributes
            .0
            .push(("SentTimestamp".into(), "1700000000000".into()));
        for (name, string_value, binary_value, data_type) in [
            ("price", Some("42.5"), None, "Number"),
            ("blob", None, Some("AAEC"), "Binary"),
            ("note\n", Some("tab\there"), None, "String.custom"),
        ] {
            message_attributes.insert(
                name.to_string(),
                AttributeValueWire {
                    string_value: string_value.map(String::from),
                    binary_value: binary_value.map(String::from),
                    string_list_values: None,
                    binary_list_values: None,
                    data_type: Some(data_type.into()),
                },
            );
        }
    }
    MessageWire {
        message_id: MessageId::random(),
        receipt_handle: "AQEBabc-_123".into(),
        md5_of_body: Md5Digest::from_bytes([0xab; 16]),
        body: body.into(),
        attributes,
        md5_of_message_attributes: extras.then(|| "0123456789abcdef0123456789abcdef".into()),
        message_attributes,
    }
}

#[test]
fn receive_answers_are_written_as_serde_writes_them() {
    same_as_serde(&ReceiveMessageOutput { messages: vec![] });
    same_as_serde(&ReceiveMessageOutput {
        messages: vec![
            message(&"plain ".repeat(50), false),
            message(
                "quote \" backslash \\ newline \n nul \u{0} é 😀 \u{2028}",
                true,
            ),
            message("{\"json\":[1,2]}", true),
        ],
    });
}

fn sent(id: Option<&str>, full: bool) -> SendMessageOutput<'_> {
    SendMessageOutput {
        id: id.map(Cow::Borrowed),
        message_id: MessageId::random(),
        md5_of_message_body: Md5Digest::from_bytes([7; 16]),
        md5_of_message_attributes: full.then(|| "a".repeat(32)),
        md5_of_message_system_attributes: full.then(|| "b".repeat(32)),
        sequence_number: full.then_some(18_000_000_000_000_000_123),
    }
}

#[test]
fn send_and_batch_answers_are_written_as_serde_writes_them() {
    same_as_serde(&sent(None, false));
    same_as_serde(&sent(None, true));
    let failure = || BatchError {
        id: "e-2".into(),
        sender_fault: true,
        code: "InvalidParameterValue".into(),
        message: "bad \"value\"".into(),
    };
    same_as_serde(&BatchOutput {
        successful: vec![sent(Some("e-0"), true), sent(Some("e_1"), false)],
        failed: vec![failure()],
    });
    same_as_serde(&BatchOutput::<SendMessageOutput> {
        successful: vec![],
        failed: vec![],
    });
    same_as_serde(&BatchOutput {
        successful: vec![IdOnly { id: "a".into() }, IdOnly { id: "b".into() }],
        failed: vec![],
    });
    same_as_serde(&BatchOutput::<IdOnly> {
        successful: vec![],
        failed: vec![failure(), failure()],
    });
}
