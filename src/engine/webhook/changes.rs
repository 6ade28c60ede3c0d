//! What the log records about webhook delivery: deliveries entering and leaving the outbox
//! (`OutboxChange`, kept beside the outbox it changes), and confirmation tokens. A delivery is
//! logged once, when it is queued; attempts and retry times are not (after a restart every
//! pending delivery starts again with attempt one).

use std::sync::Arc;

pub use super::outbox::OutboxChange;
use super::tokens::Grant;
use crate::engine::time::Timestamp;
use crate::engine::topic::changes::SubscriptionImage;
use crate::engine::topic::Subscription;

/// A confirmation token as logged.
#[derive(Clone, Debug)]
pub struct TokenRecord {
    pub token: String,
    pub expires: Timestamp,
    pub grant: GrantImage,
}

#[derive(Clone, Debug)]
pub enum GrantImage {
    Confirm(Arc<str>),
    Restore(SubscriptionImage),
}

impl Grant {
    pub fn image(&self) -> GrantImage {
        match self {
            Grant::Confirm(arn) => GrantImage::Confirm(arn.clone()),
            Grant::Restore(sub) => GrantImage::Restore(sub.image()),
        }
    }

    pub fn from_image(image: GrantImage) -> Grant {
        match image {
            GrantImage::Confirm(arn) => Grant::Confirm(arn),
            GrantImage::Restore(sub) => Grant::Restore(Arc::new(Subscription::from_image(sub))),
        }
    }
}
