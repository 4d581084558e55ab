//! Reloads when a DNSSEC key's timing comes due. A load decides which keys are published
//! and sign from their Publish, Activate, Inactive and Delete times, and says when the
//! next of those times is; at that time the configuration is loaded again, so that keys
//! come and go on schedule without an operator's reload.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

use super::control::Control;
use super::reloader::{Reloader, Trigger};

/// The longest sleep before the wall clock is read again: the times are wall-clock times,
/// and a sleep runs on the monotonic clock, which a clock step or a suspended host leaves
/// behind.
const RECHECK: Duration = Duration::from_secs(60);

/// Runs until `cancel`: a reload (trigger "key timing") each time the running
/// configuration's next key change comes due.
pub async fn run(control: Arc<Control>, cancel: CancellationToken) {
    let mut next = control.next_key_change();
    let reloader = Reloader::new(control);
    // A failed reload leaves the same time due; it is tried once, not again and again
    // (the running configuration stays, and the failure is logged by the reload).
    let mut tried = None;
    loop {
        let due = *next.borrow_and_update();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let wait = match due {
            Some(t) if t <= now && tried != Some(t) => {
                tried = Some(t);
                // Waited for, so that the next due time read is the reloaded one's.
                // Shutdown does not wait for a reload (see `server::serve`).
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = reloader.reload(Trigger::KeyTiming) => {}
                }
                continue;
            }
            Some(t) if t > now => Duration::from_secs(t - now).min(RECHECK),
            _ => Duration::MAX,
        };
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = sleep(wait) => {}
            changed = next.changed() => if changed.is_err() { return },
        }
    }
}

/// Sleeps for `wait`, or forever for `Duration::MAX`.
async fn sleep(wait: Duration) {
    if wait == Duration::MAX {
        std::future::pending::<()>().await;
    }
    tokio::time::sleep(wait).await;
}
