//! `POST /_orderly/clock` bodies applied to a manual clock, one after another. Input: bodies
//! separated by NUL bytes. The clock never goes backwards nor past `clock::LATEST`, and every
//! time it shows (with a deadline 14 days on) is written without a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use orderly::clock::{Clock, ManualClock, LATEST};
use orderly::engine::Timestamp;
use orderly::http::clock_control::apply;
use orderly::service::inspect::rfc3339;

fuzz_target!(|data: &[u8]| {
    let clock = ManualClock::new(Timestamp(1_764_000_000_000));
    for body in data.split(|&b| b == 0).take(16) {
        let before = clock.now();
        let (status, answer) = apply(&clock, body);
        let after = clock.now();
        assert!(after >= before && after <= LATEST, "{before:?} → {after:?}");
        assert!(status.as_u16() != 200 || answer["epochMillis"] == after.millis());
        let _ = rfc3339(after.plus_millis(14 * 24 * 3_600_000));
    }
});
