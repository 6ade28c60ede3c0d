//! Spec §6.4's worked examples, one row each, and §6.3's validation messages.

use super::*;
use crate::engine::message::AttributeValue;

/// Example number, policy, attributes (name, type, value), expected match.
type AttributeCase<'a> = (u32, &'a str, &'a [(&'a str, &'a str, &'a str)], bool);

fn attr(name: &str, data_type: &str, value: &str) -> (String, AttributeValue) {
    let data = if data_type.starts_with("Binary") {
        AttributeData::Binary(value.as_bytes().to_vec())
    } else {
        AttributeData::String(value.to_string())
    };
    (
        name.to_string(),
        AttributeValue {
            data_type: data_type.to_string(),
            data,
        },
    )
}

fn by_attributes(policy: &str, attrs: &[(&str, &str, &str)]) -> bool {
    let filter = FilterPolicy::parse(policy, Scope::MessageAttributes)
        .unwrap_or_else(|e| panic!("{policy}: {e}"));
    let attrs = MessageAttributes::new(attrs.iter().map(|(n, t, v)| attr(n, t, v)).collect());
    filter.matches(&attrs, "")
}

fn by_body(policy: &str, body: &str) -> bool {
    let filter =
        FilterPolicy::parse(policy, Scope::MessageBody).unwrap_or_else(|e| panic!("{policy}: {e}"));
    filter.matches(&MessageAttributes::default(), body)
}

#[test]
fn attribute_scope_examples() {
    let cases: &[AttributeCase] = &[
        (
            1,
            r#"{"color":["red","blue"]}"#,
            &[("color", "String", "red")],
            true,
        ),
        (
            2,
            r#"{"color":["red"]}"#,
            &[("color", "String", "Red")],
            false,
        ),
        (3, r#"{"color":["red"]}"#, &[], false),
        (
            4,
            r#"{"color":["red"]}"#,
            &[("color", "String.Array", r#"["green","red"]"#)],
            true,
        ),
        (
            5,
            r#"{"color":["red"]}"#,
            &[("color", "String.Array", r#"["green"]"#)],
            false,
        ),
        (
            6,
            r#"{"color":["red"],"size":["L"]}"#,
            &[("color", "String", "red")],
            false,
        ),
        (
            7,
            r#"{"color":["red"],"size":["L"]}"#,
            &[
                ("color", "String", "red"),
                ("size", "String", "L"),
                ("extra", "String", "x"),
            ],
            true,
        ),
        (
            8,
            r#"{"price":[{"numeric":[">",0,"<=",100]}]}"#,
            &[("price", "Number", "99")],
            true,
        ),
        (
            9,
            r#"{"price":[{"numeric":[">",0,"<=",100]}]}"#,
            &[("price", "Number", "100")],
            true,
        ),
        (
            10,
            r#"{"price":[{"numeric":[">",0,"<=",100]}]}"#,
            &[("price", "Number", "100.01")],
            false,
        ),
        (
            11,
            r#"{"price":[{"numeric":[">",0,"<=",100]}]}"#,
            &[("price", "String", "abc")],
            false,
        ),
        (
            12,
            r#"{"price":[{"numeric":["=",301.5]}]}"#,
            &[("price", "Number", "3.015e2")],
            true,
        ),
        (
            13,
            r#"{"store":[{"exists":true}]}"#,
            &[("store", "Number", "99")],
            true,
        ),
        (
            14,
            r#"{"store":[{"exists":false}]}"#,
            &[("other", "String", "x")],
            true,
        ),
        (
            15,
            r#"{"store":[{"exists":false}]}"#,
            &[("store", "String", "x")],
            false,
        ),
        (
            16,
            r#"{"sport":[{"anything-but":["rugby","tennis"]}]}"#,
            &[("sport", "String", "baseball")],
            true,
        ),
        (
            17,
            r#"{"sport":[{"anything-but":["rugby","tennis"]}]}"#,
            &[],
            false,
        ),
        // Unconfirmed on AWS; current docs: matches only when no element is listed.
        (
            18,
            r#"{"sport":[{"anything-but":["rugby","tennis"]}]}"#,
            &[("sport", "String.Array", r#"["rugby","baseball"]"#)],
            false,
        ),
        (
            19,
            r#"{"sport":[{"anything-but":"rugby"},{"exists":false}]}"#,
            &[],
            true,
        ),
        (
            20,
            r#"{"event":[{"anything-but":{"prefix":"order-"}}]}"#,
            &[("event", "String", "order-placed")],
            false,
        ),
        (
            21,
            r#"{"event":[{"anything-but":{"prefix":"order-"}}]}"#,
            &[("event", "String", "cart-created")],
            true,
        ),
        (
            22,
            r#"{"file":[{"suffix":".png"}]}"#,
            &[("file", "String", "a.PNG")],
            false,
        ),
        (
            23,
            r#"{"name":[{"equals-ignore-case":"ALICE"}]}"#,
            &[("name", "String", "alice")],
            true,
        ),
        (
            24,
            r#"{"ip":[{"cidr":"10.0.0.0/24"}]}"#,
            &[("ip", "String", "10.0.0.255")],
            true,
        ),
        (
            25,
            r#"{"ip":[{"cidr":"10.0.0.0/24"}]}"#,
            &[("ip", "String", "10.0.1.1")],
            false,
        ),
        (
            27,
            r#"{"color":[{"prefix":"bl"}]}"#,
            &[("color", "Binary", "blue")],
            false,
        ),
        (
            28,
            r#"{"$or":[{"a":["1"]},{"b":["2"]}],"c":["3"]}"#,
            &[("b", "String", "2"), ("c", "String", "3")],
            true,
        ),
        (
            29,
            r#"{"$or":[{"a":["1"]},{"b":["2"]}],"c":["3"]}"#,
            &[("a", "String", "1")],
            false,
        ),
        (
            30,
            r#"{"tags":["x"]}"#,
            &[("tags", "String", r#"["x"]"#)],
            false,
        ),
        // A String.Array value that is JSON but not an array is that one value: the bare `100`
        // is the number 100 (as SNS matches it), `"red"` the string red.
        (
            31,
            r#"{"price":[100,500]}"#,
            &[("price", "String.Array", "100")],
            true,
        ),
        (
            32,
            r#"{"price":[{"numeric":[">",50]}]}"#,
            &[("price", "String.Array", "100")],
            true,
        ),
        (
            33,
            r#"{"color":["red"]}"#,
            &[("color", "String.Array", r#""red""#)],
            true,
        ),
        // One that is not JSON at all is invalid: SNS counts the message as filtered out for
        // its attributes by a policy naming it, whatever the operator (the
        // `NumberOfNotificationsFilteredOut-InvalidAttributes` metric); policies that do not
        // name it are not concerned.
        (
            34,
            r#"{"color":["red"]}"#,
            &[("color", "String.Array", "red")],
            false,
        ),
        (
            35,
            r#"{"color":[{"exists":true}]}"#,
            &[("color", "String.Array", r#"["red""#)],
            false,
        ),
        (
            36,
            r#"{"color":[{"exists":false}]}"#,
            &[("color", "String.Array", "red")],
            false,
        ),
        (
            37,
            r#"{"color":[{"anything-but":["blue"]}]}"#,
            &[("color", "String.Array", "red")],
            false,
        ),
        (
            38,
            r#"{"size":["L"]}"#,
            &[("color", "String.Array", "red"), ("size", "String", "L")],
            true,
        ),
        (
            39,
            r#"{"$or":[{"color":["red"]},{"size":["L"]}]}"#,
            &[("color", "String.Array", "red"), ("size", "String", "L")],
            true,
        ),
    ];
    for (n, policy, attrs, expected) in cases {
        assert_eq!(
            by_attributes(policy, attrs),
            *expected,
            "example {n}: {policy}"
        );
    }
}

#[test]
fn body_scope_examples() {
    let records =
        r#"{"Records":[{"s3":{"object":{"key":"home-x"}}},{"s3":{"object":{"key":"auto-x"}}}]}"#;
    let cases: &[(u32, &str, &str, bool)] = &[
        (
            26,
            r#"{"detail":{"sourceIPAddressV6":[{"cidr":"2001:db8:1234:1a00::/64"}]}}"#,
            r#"{"detail":{"sourceIPAddressV6":"2001:0db8:1234:1a00:0000:0000:0000:0000"}}"#,
            true,
        ),
        (
            31,
            r#"{"object":{"key":[{"prefix":"auto-"}]}}"#,
            r#"{"object":{"key":"auto-test"}}"#,
            true,
        ),
        (
            32,
            r#"{"object":{"key":[{"prefix":"auto-"}]}}"#,
            r#"{"object":{"key":"home-test"}}"#,
            false,
        ),
        (
            33,
            r#"{"object":{"key":[{"prefix":"auto-"}]}}"#,
            "not json",
            false,
        ),
        (
            34,
            r#"{"object.nested":["string.value"]}"#,
            r#"{"object":{"nested":"string.value"}}"#,
            true,
        ),
        (
            34,
            r#"{"object.nested":["string.value"]}"#,
            r#"{"object.nested":"string.value"}"#,
            true,
        ),
        (
            35,
            r#"{"headers":{"route-to":["queue1"]}}"#,
            r#"{"headers":{"route-to":["queue1","queue2"]}}"#,
            true,
        ),
        (
            36,
            r#"{"Records":{"s3":{"object":{"key":[{"prefix":"auto-"}]}}}}"#,
            records,
            true,
        ),
        (
            37,
            r#"{"detail":{"responseElements":[null]}}"#,
            r#"{"detail":{"responseElements":null}}"#,
            true,
        ),
        (
            38,
            r#"{"resources":[{"exists":false}]}"#,
            r#"{"resources":[]}"#,
            true,
        ),
        (
            39,
            r#"{"metricName":["CPUUtilization"],"$or":[{"namespace":["AWS/EC2"]},{"detail":{"source":["aws.cloudwatch"]}}]}"#,
            r#"{"metricName":"CPUUtilization","detail":{"source":"aws.cloudwatch"}}"#,
            true,
        ),
        (
            40,
            r#"{"n":[{"numeric":[">=",10]}]}"#,
            r#"{"n":"10"}"#,
            false,
        ),
        (41, r#"{"flag":[true]}"#, r#"{"flag":true}"#, true),
        (
            42,
            r#"{"object":{"key":[{"exists":true}]}}"#,
            r#"{"object":{"key":{"deep":1}}}"#,
            false,
        ),
    ];
    for (n, policy, body, expected) in cases {
        assert_eq!(
            by_body(policy, body),
            *expected,
            "example {n}: {policy} on {body}"
        );
    }
}

#[test]
fn dotted_body_keys_are_the_nested_paths_they_spell() {
    let nested = r#"{"object":{"nested":{"test":["yes"]}}}"#;
    let dotted_policy = r#"{"object.nested.test":["yes"]}"#;
    for body in [
        r#"{"object":{"nested":{"test":"yes"}}}"#,
        r#"{"object.nested":{"test":"yes"}}"#,
        r#"{"object":{"nested.test":"yes"}}"#,
        r#"{"object.nested.test":"yes"}"#,
    ] {
        assert!(by_body(nested, body), "{nested} on {body}");
        assert!(by_body(dotted_policy, body), "{dotted_policy} on {body}");
    }
    for body in [
        r#"{"object.nested":{"test":"no"}}"#,
        r#"{"object":{"nested.other":"yes"}}"#,
        r#"{"object":5,"object.nested":{"test":"yes"}}"#,
    ] {
        assert!(!by_body(nested, body), "{nested} on {body}");
    }
    // Two values at one path: either may match.
    let both = r#"{"object":{"nested":{"test":"no"}},"object.nested.test":"yes"}"#;
    assert!(by_body(nested, both));
}

#[test]
fn validation_messages() {
    let err = |policy: &str| FilterPolicy::parse(policy, Scope::MessageAttributes).unwrap_err();
    let cases: &[(&str, &str)] = &[
        (
            r#"{"a":["1"],"b":["1"],"c":["1"],"d":["1"],"e":["1"],"f":["1"]}"#,
            "FilterPolicy: Filter policy can not have more than 5 keys",
        ),
        (r#"{"a":[]}"#, "FilterPolicy: Empty arrays are not allowed"),
        (
            r#"{"a":"x"}"#,
            "FilterPolicy: \"a\" must be an object or an array",
        ),
        (
            r#"{"a":[["x"]]}"#,
            "FilterPolicy: Match value must be String, number, true, false, or null",
        ),
        (
            r#"{"a":[{"wildcard":"x*"}]}"#,
            "FilterPolicy: Unrecognized match type wildcard",
        ),
        (
            r#"{"a":[{"prefix":"x","suffix":"y"}]}"#,
            "FilterPolicy: Only one key allowed in match expression",
        ),
        (
            r#"{"a":[{"prefix":1}]}"#,
            "FilterPolicy: prefix match pattern must be a string",
        ),
        (
            r#"{"a":[{"cidr":1}]}"#,
            "FilterPolicy: prefix match pattern must be a string",
        ),
        (
            r#"{"a":[{"exists":"yes"}]}"#,
            "FilterPolicy: exists match pattern must be either true or false.",
        ),
        (
            r#"{"a":[{"cidr":"10.0.0.0"}]}"#,
            "FilterPolicy: Malformed CIDR, one '/' required",
        ),
        (
            r#"{"a":[{"cidr":"10.0.0.0/x"}]}"#,
            "FilterPolicy: Malformed CIDR, mask bits must be an integer",
        ),
        (
            r#"{"a":[{"cidr":"10.0.0/8"}]}"#,
            "FilterPolicy: Nonstandard IP address: 10.0.0",
        ),
        (
            r#"{"a":[{"numeric":[]}]}"#,
            "FilterPolicy: Invalid member in numeric match: ]",
        ),
        (
            r#"{"a":[{"numeric":[5]}]}"#,
            "FilterPolicy: Invalid member in numeric match: 5",
        ),
        (
            r#"{"a":[{"numeric":["!",5]}]}"#,
            "FilterPolicy: Unrecognized numeric range operator: !",
        ),
        (
            r#"{"a":[{"numeric":["=","000"]}]}"#,
            "FilterPolicy: Value of equals must be numeric",
        ),
        (
            r#"{"a":[{"numeric":["=",5,"<",6]}]}"#,
            "FilterPolicy: Too many elements in numeric expression",
        ),
        (
            r#"{"a":[{"numeric":[">",5,">",6]}]}"#,
            "FilterPolicy: Bad numeric range operator: >",
        ),
        (
            r#"{"a":[{"numeric":[">",5,6,7]}]}"#,
            "FilterPolicy: Bad value in numeric range: 6",
        ),
        (
            r#"{"a":[{"numeric":[">",6,"<",5]}]}"#,
            "FilterPolicy: Bottom must be less than top",
        ),
        (
            r#"{"a":[{"numeric":[">",1,"<",5,"<",6]}]}"#,
            "FilterPolicy: Too many terms in numeric range expression",
        ),
        (
            r#"{"a":[{"anything-but":{"suffix":"x"}}]}"#,
            "FilterPolicy: Unsupported anything-but pattern: suffix",
        ),
        (
            r#"{"a":{"b":["x"]}}"#,
            "Filter policy scope MessageAttributes does not support nested filter policy",
        ),
    ];
    for (policy, expected) in cases {
        assert_eq!(err(policy), *expected, "{policy}");
    }
    assert!(err("{not json").starts_with("FilterPolicy: failed to parse JSON."));
    let wide: Vec<String> = (0..13).map(|i| format!("\"v{i}\"")).collect();
    let complex = format!(r#"{{"a":[{0}],"b":[{0}]}}"#, wide.join(","));
    assert_eq!(err(&complex), "FilterPolicy: Filter policy is too complex");
    // Nested policies are fine in body scope.
    assert!(FilterPolicy::parse(r#"{"a":{"b":["x"]}}"#, Scope::MessageBody).is_ok());
}

/// Runs `work` on a thread with a tokio worker's stack (2 MiB), where requests are handled.
fn on_a_worker_stack(work: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(work)
        .unwrap()
        .join()
        .expect("no stack overflow");
}

#[test]
fn policies_and_bodies_nested_as_deep_as_json_allows_fit_a_worker_stack() {
    on_a_worker_stack(|| {
        // serde_json refuses nesting past 128; everything below must parse and match.
        let depth = 126;
        let policy = "{\"a\":".repeat(depth) + "[\"x\"]" + &"}".repeat(depth);
        let filter = FilterPolicy::parse(&policy, Scope::MessageBody);
        let body = "{\"a\":".repeat(depth) + "\"x\"" + &"}".repeat(depth);
        if let Ok(filter) = filter {
            assert!(filter.matches(&MessageAttributes::default(), &body));
        }
        let ors = "{\"$or\":[".repeat(40) + "{\"a\":[\"x\"]}" + &"]}".repeat(40);
        let _ = FilterPolicy::parse(&ors, Scope::MessageAttributes);
        let _ = FilterPolicy::parse(&ors, Scope::MessageBody);
        let too_deep = "{\"a\":".repeat(200) + "[\"x\"]" + &"}".repeat(200);
        assert!(FilterPolicy::parse(&too_deep, Scope::MessageBody).is_err());
    });
}
