//! SNS's mobile side: platform applications and their endpoints (mobile push), and per region
//! and account the SMS settings, the numbers that opted out and the SMS sandbox's numbers.
//! Nothing is sent to a push service or a phone: a publish to an endpoint is captured as the
//! `application` protocol's copies are, and a sandbox number's one-time password as an SMS.
//!
//! Every change is logged as the state it leaves (an application, an endpoint, a number), so
//! replaying one is idempotent, and a snapshot is the same records for everything there is.

mod change;
mod push;
mod push_ops;
mod sms;
mod sms_ops;
mod state;

pub use change::MobileChange;
pub use push::{Application, Endpoint, Platform};
pub use sms::{SandboxStatus, Sms, SMS_ATTRIBUTES};
pub use state::{Mobile, MAX_APPLICATIONS, MAX_ENDPOINTS, MAX_OPTED_OUT, MAX_SANDBOX_NUMBERS};

#[cfg(test)]
mod tests;
