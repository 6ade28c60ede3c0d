//! A request whose queue or topic is in a shard another node leads: the backend refuses it
//! before anything is done and notes which shard; the HTTP layer, which still holds the request
//! as the client sent it, reads the note once the service has answered and passes the request to
//! that shard's leader. So only the service's parser ever finds a request's queue or topic, and
//! the service in between takes no part.
//!
//! Only a request refused before it touched any shard led here is passed on: one that used a
//! shard here first (a Subscribe whose topic is here, checking a queue led elsewhere) may have
//! changed something here, so its later reads of other nodes' shards are refused as reads
//! across nodes (`BackendError::Across`), never passed on whole.

use std::cell::Cell;
use std::future::Future;

use super::BackendError;

/// What the backend met while answering one request.
#[derive(Clone, Copy, Default)]
struct Met {
    /// The shard led elsewhere that refused the request, if it was refused first.
    refused: Option<u32>,
    /// Whether it used a shard led here.
    here: bool,
    /// Which shards led here it used, when known.
    touched: Touched,
    /// Whether a change of it was let into a shard led here (`changed_here`).
    changed: bool,
    /// Whether it was refused a read across nodes.
    across: bool,
}

/// The shards led here a request used.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum Touched {
    #[default]
    None,
    One(u32),
    /// Several, or some not said.
    Many,
}

/// What `noting` learned of a request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Noted {
    /// The shard whose leader the request is to be passed to: refused before it touched any
    /// shard here.
    pub passed_to: Option<u32>,
    /// Refused a read across nodes: not a refusal another node's leader would answer
    /// otherwise, so not one to pass on or send again.
    pub across: bool,
}

tokio::task_local! {
    static MET: Cell<Met>;
}

/// The request uses shard led here: what it meets elsewhere afterwards is not passed on.
pub fn touched_here() {
    let _ = MET.try_with(|met| {
        met.set(Met {
            here: true,
            touched: Touched::Many,
            ..met.get()
        })
    });
}

/// The request uses shard `shard`, led here: what it meets elsewhere afterwards is not passed
/// on, unless `shard` itself stops being led here before the request changed anything
/// (`refuse_unchanged`).
pub fn touched_shard(shard: u32) {
    let _ = MET.try_with(|met| {
        let now = met.get();
        let touched = match now.touched {
            Touched::None => Touched::One(shard),
            Touched::One(one) if one == shard => Touched::One(shard),
            _ => Touched::Many,
        };
        met.set(Met {
            here: true,
            touched,
            ..now
        })
    });
}

/// The refusal of a request for `shard`, led elsewhere: noted for whoever runs the request
/// `noting` when it is the first shard the request meets; a read across nodes otherwise.
pub fn refuse(shard: u32) -> BackendError {
    let first = MET.try_with(|met| {
        let mut now = met.get();
        if now.here {
            return false;
        }
        now.refused = now.refused.or(Some(shard));
        met.set(now);
        true
    });
    match first {
        Ok(false) => across(shard),
        _ => BackendError::LedElsewhere(shard),
    }
}

/// A change of the request was let into a shard led here: it is never passed on whole after.
pub fn changed_here() {
    let _ = MET.try_with(|met| {
        met.set(Met {
            here: true,
            changed: true,
            ..met.get()
        })
    });
}

/// The refusal of a request for `shard`, which this node stopped leading while the request
/// ran (handed to another node): passed to the shard's next leader when none of its changes
/// was let in here yet and it used no other shard here; a read across nodes otherwise.
pub fn refuse_unchanged(shard: u32) -> BackendError {
    let first = MET.try_with(|met| {
        let now = met.get();
        let alone = matches!(now.touched, Touched::None) || now.touched == Touched::One(shard);
        if now.changed || !alone {
            return false;
        }
        met.set(Met {
            refused: now.refused.or(Some(shard)),
            here: false,
            ..now
        });
        true
    });
    match first {
        Ok(false) => across(shard),
        _ => BackendError::LedElsewhere(shard),
    }
}

/// The refusal of a read of `shard`, led elsewhere, on another shard's behalf.
pub fn across(shard: u32) -> BackendError {
    let _ = MET.try_with(|met| {
        met.set(Met {
            across: true,
            ..met.get()
        })
    });
    BackendError::Across(shard)
}

/// Whether the request being answered is to be passed to another node's shard: refused
/// before it touched any shard here.
pub fn passing_on() -> bool {
    MET.try_with(|met| passed_to(met.get()).is_some())
        .unwrap_or(false)
}

fn passed_to(met: Met) -> Option<u32> {
    met.refused.filter(|_| !met.here)
}

/// Runs `request`; answers what it answered and what the backend met (`Noted`).
pub async fn noting<F: Future>(request: F) -> (F::Output, Noted) {
    MET.scope(Cell::new(Met::default()), async move {
        let answered = request.await;
        let met = MET.with(Cell::get);
        let noted = Noted {
            passed_to: passed_to(met),
            across: met.across,
        };
        (answered, noted)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refusal_met_first_is_noted_for_the_request_that_met_it_only() {
        let (error, needed) = noting(async { refuse(3) }).await;
        assert!(matches!(error, BackendError::LedElsewhere(3)));
        assert_eq!(needed.passed_to, Some(3));
        assert!(!needed.across);
        let ((), needed) = noting(async {}).await;
        assert_eq!(needed, Noted::default());
        // Outside a request: refused all the same, noted nowhere.
        assert!(matches!(refuse(1), BackendError::LedElsewhere(1)));
        assert!(!passing_on());
    }

    #[tokio::test]
    async fn a_shard_handed_off_while_a_request_ran_passes_it_on_unless_it_changed_something() {
        let (error, needed) = noting(async {
            touched_shard(2);
            refuse_unchanged(2)
        })
        .await;
        assert!(matches!(error, BackendError::LedElsewhere(2)));
        assert_eq!(needed.passed_to, Some(2));
        // It read another shard here too: not passed on whole.
        let (error, needed) = noting(async {
            touched_shard(1);
            touched_shard(2);
            refuse_unchanged(2)
        })
        .await;
        assert!(matches!(error, BackendError::Across(2)));
        assert_eq!(needed.passed_to, None);
        let (error, needed) = noting(async {
            changed_here();
            refuse_unchanged(2)
        })
        .await;
        assert!(matches!(error, BackendError::Across(2)));
        assert_eq!(needed.passed_to, None);
        assert!(needed.across);
    }

    #[tokio::test]
    async fn what_a_request_meets_after_a_shard_here_is_a_read_across_nodes() {
        let (error, needed) = noting(async {
            touched_here();
            refuse(2)
        })
        .await;
        assert!(matches!(error, BackendError::Across(2)));
        assert_eq!(needed.passed_to, None);
        assert!(needed.across);
        // Refused first, then a shard here: it may have changed something here; not passed on.
        let (passing, needed) = noting(async {
            let _ = refuse(2);
            let before = passing_on();
            touched_here();
            (before, passing_on())
        })
        .await;
        assert_eq!(passing, (true, false));
        assert_eq!(needed.passed_to, None);
    }
}
