//! The cross-account policy evaluator and the queue URL and ARN readers on arbitrary text: a
//! policy is any queue's or topic's attribute, a URL and an ARN any request's parameter.
//! Input: policy NUL action NUL resource NUL url.
#![no_main]

use libfuzzer_sys::fuzz_target;
use orderly::engine::namespace::{Namespace, Namespaces};
use orderly::service::access::{allows, url_place, Use};

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(4, |&b| b == 0);
    let mut text = || String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let (policy, action, resource, url) = (text(), text(), text(), text());
    let asked = Use {
        account: "111111111111",
        principal: "arn:aws:iam::111111111111:user/fuzz",
        action: &action,
        resource: &resource,
    };
    let _ = allows(&policy, &asked);
    let place = url_place(&url);
    assert!(url.contains(place.name), "a URL's name is part of it");
    let namespaces = Namespaces::new(Namespace::new("us-east-1", "000000000000"));
    for service in ["sqs", "sns"] {
        if let Some(key) = namespaces.key_in_arn(service, &resource) {
            assert!(resource.contains(key), "an ARN's key is part of it");
        }
    }
    let _ = Namespaces::of_arn(&resource);
});
