//! One follower of a key range in etcd, for every part that mirrors keys (profiles, health
//! views, overrides): it hands its consumer a consistent snapshot of the range with its
//! revision, then every change in etcd's order. On a broken connection it resumes after
//! the last revision it delivered, so that nothing is lost or delivered twice; when etcd
//! has compacted that revision away it reads the whole range again and says to replace
//! what was held. A token etcd refuses (expired, or forgotten by a restarted etcd) is
//! replaced by logging in again. Failures wait a bounded backoff; the follower stops on
//! the shutdown token or when its consumer goes away.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{EventType, WatchOptions, WatchResponse, WatchStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Session;
use super::etcd::{
    Backoff, EtcdError, MAX_MESSAGE, fetch_range, next_response, prefix_end, within,
};

/// Keys remembered as warned about, at most: past it they are forgotten (and warned about
/// again) rather than memory grow.
const WARNED_KEYS: usize = 10_000;

/// Longest wait for etcd to take a watch: past it the connection counts as lost.
const OPEN_LIMIT: Duration = Duration::from_secs(5);

/// Longest wait for a read of the whole range, which may be many pages of large values.
const READ_LIMIT: Duration = Duration::from_secs(30);

/// Events waiting for a slow consumer; past it the follower waits too.
const QUEUE: usize = 16;

/// The keys followed: from `start` up to `end`, excluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRange {
    pub start: String,
    pub end: Vec<u8>,
}

impl KeyRange {
    /// Every key starting with `prefix`.
    pub fn prefix(prefix: &str) -> KeyRange {
        KeyRange { start: prefix.to_string(), end: prefix_end(prefix.as_bytes()) }
    }

    /// Every key from `start` up to `last`, included.
    pub fn through(start: &str, last: &str) -> KeyRange {
        let mut end = last.as_bytes().to_vec();
        end.push(0);
        KeyRange { start: start.to_string(), end }
    }
}

/// What the follower hands its consumer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Every key of the range as of `revision`: replaces whatever the consumer held (the
    /// first read, and again after a compaction).
    Snapshot { revision: i64, entries: Vec<super::etcd::Entry> },
    /// Changes after the last event, in etcd's order; one transaction is never split.
    /// `revision` is the last one among them.
    Changes { revision: i64, changes: Vec<Change> },
    /// The connection to etcd is lost; changes resume (or a snapshot comes) once it is
    /// back. What the consumer holds may be stale meanwhile.
    Lost { error: String },
    /// Following again after `Lost`, from the revision after `revision`: every change
    /// made meanwhile follows.
    Resumed { revision: i64 },
}

/// The first event of a follower when it is the read of the whole range, waiting at most
/// `limit` (a replica starting applies it before it answers); else why there is none.
pub async fn first_read(
    events: &mut mpsc::Receiver<Event>,
    limit: Duration,
) -> Result<Event, String> {
    match tokio::time::timeout(limit, events.recv()).await {
        Ok(Some(event @ Event::Snapshot { .. })) => Ok(event),
        Ok(Some(Event::Lost { error })) => Err(error),
        Ok(_) => Err("the follower stopped".to_string()),
        Err(_) => Err(EtcdError::Timeout(limit).to_string()),
    }
}

/// The keys of a followed range already warned about, so that a key that stays wrong is
/// logged once.
#[derive(Debug, Default)]
pub struct Warned(HashSet<String>);

impl Warned {
    /// Whether `key` was not warned about yet (and is now taken as warned).
    pub fn first(&mut self, key: &str) -> bool {
        if self.0.len() >= WARNED_KEYS {
            self.0.clear();
        }
        self.0.insert(key.to_string())
    }
}

/// One key written or deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub key: String,
    /// The new value; `None` when the key was deleted.
    pub value: Option<Vec<u8>>,
    /// The revision of the change.
    pub mod_revision: i64,
}

/// Follows `range` until `cancel`, starting with a snapshot, or, when the consumer has
/// read the range at revision `after` already, with the changes after it.
pub fn spawn(
    session: Arc<Session>,
    range: KeyRange,
    after: Option<i64>,
    cancel: CancellationToken,
) -> mpsc::Receiver<Event> {
    let (tx, rx) = mpsc::channel(QUEUE);
    let follower = Follower { session, range, delivered: after, lost: false, relogged: false, tx };
    tokio::spawn(async move {
        tokio::select! {
            _ = cancel.cancelled() => {}
            _ = follower.run() => {}
        }
    });
    rx
}

struct Follower {
    session: Arc<Session>,
    range: KeyRange,
    /// The revision everything up to has been delivered; `None` until a snapshot was.
    delivered: Option<i64>,
    /// Whether `Lost` was sent and not yet followed by `Resumed` or a snapshot.
    lost: bool,
    /// Whether it logged in again since the last pause: a second refusal right after a
    /// fresh login waits the backoff.
    relogged: bool,
    tx: mpsc::Sender<Event>,
}

/// Why following stopped.
enum Ended {
    /// The consumer is gone.
    Closed,
    /// The revision to resume from is compacted away: read the range again.
    Compacted(i64),
    Failed(EtcdError),
}

impl Follower {
    async fn run(mut self) {
        let mut backoff = Backoff::default();
        loop {
            let error = match self.follow(&mut backoff).await {
                Ended::Closed => return,
                Ended::Compacted(at) => {
                    tracing::info!(
                        start = %self.range.start,
                        delivered = self.delivered,
                        compacted = at,
                        "etcd compacted the revisions after the last one read; reading the keys again"
                    );
                    self.delivered = None;
                    continue;
                }
                Ended::Failed(error) => error,
            };
            tracing::debug!(start = %self.range.start, delivered = self.delivered, %error, "following etcd again after a pause");
            // A token etcd refuses (expired, or issued before a restart): a new one, used
            // at once (a short token TTL could expire it again during a backoff).
            if error.is_denied() && !self.relogged {
                self.relogged = true;
                match self.session.log_in_again().await {
                    Ok(()) => continue,
                    Err(e) => tracing::debug!(error = %e, "cannot log in to etcd again"),
                }
            }
            if !self.lost {
                self.lost = true;
                if !self.send(Event::Lost { error: error.to_string() }).await {
                    return;
                }
            }
            tokio::time::sleep(backoff.next_delay()).await;
            // A token refused after the pause is refused anew: log in again then too.
            self.relogged = false;
        }
    }

    /// Hands `event` over; false when the consumer is gone.
    async fn send(&self, event: Event) -> bool {
        self.tx.send(event).await.is_ok()
    }

    /// Reads the range unless delivered already, then watches it until the watch ends.
    async fn follow(&mut self, backoff: &mut Backoff) -> Ended {
        let client = &self.session.client;
        let after = match self.delivered {
            Some(after) => after,
            None => {
                let read = tokio::time::timeout(
                    READ_LIMIT,
                    fetch_range(client, &self.range.start, &self.range.end),
                );
                let fetched = match read.await {
                    Ok(Ok(f)) => f,
                    Ok(Err(e)) => return Ended::Failed(e),
                    Err(_) => return Ended::Failed(EtcdError::Timeout(READ_LIMIT)),
                };
                let revision = fetched.revision;
                let snapshot = Event::Snapshot { revision, entries: fetched.entries };
                if !self.send(snapshot).await {
                    return Ended::Closed;
                }
                self.delivered = Some(revision);
                self.lost = false;
                revision
            }
        };
        let mut stream = match self.open(after + 1).await {
            Ok(stream) => stream,
            Err(e) => return Ended::Failed(e),
        };
        loop {
            let resp = match next_response(&mut stream).await {
                Ok(resp) => resp,
                Err(e) => return Ended::Failed(e),
            };
            if resp.compact_revision() > 0 {
                return Ended::Compacted(resp.compact_revision());
            }
            if resp.canceled() {
                return Ended::Failed(cancelled(&resp));
            }
            if resp.created() {
                backoff.reset();
                self.relogged = false;
                if self.lost {
                    self.lost = false;
                    let revision = self.delivered.unwrap_or(after);
                    if !self.send(Event::Resumed { revision }).await {
                        return Ended::Closed;
                    }
                }
            }
            if !self.deliver(&resp).await {
                return Ended::Closed;
            }
        }
    }

    /// A watch of the range from revision `from`, once etcd has taken it.
    async fn open(&self, from: i64) -> Result<WatchStream, EtcdError> {
        let options = WatchOptions::new()
            .with_range(self.range.end.clone())
            .with_start_revision(from)
            .with_progress_notify();
        let mut watches = self.session.client.watch_client().max_decoding_message_size(MAX_MESSAGE);
        within(OPEN_LIMIT, watches.watch(self.range.start.as_str(), Some(options))).await
    }

    /// Hands over the changes of one response; false when the consumer is gone.
    async fn deliver(&mut self, resp: &WatchResponse) -> bool {
        let mut changes = Vec::with_capacity(resp.events().len());
        for ev in resp.events() {
            let Some(kv) = ev.kv() else { continue };
            let Ok(key) = std::str::from_utf8(kv.key()) else {
                tracing::debug!(key = ?String::from_utf8_lossy(kv.key()), "ignoring a key that is not UTF-8");
                continue;
            };
            let value = match ev.event_type() {
                EventType::Put => Some(kv.value().to_vec()),
                EventType::Delete => None,
            };
            changes.push(Change { key: key.to_string(), value, mod_revision: kv.mod_revision() });
        }
        let delivered = self.delivered.unwrap_or(0);
        match changes.iter().map(|c| c.mod_revision).max() {
            Some(revision) => {
                // A change at or before what was delivered already would be applied twice.
                changes.retain(|c| c.mod_revision > delivered);
                if changes.is_empty() {
                    return true;
                }
                self.delivered = Some(revision.max(delivered));
                self.send(Event::Changes { revision, changes }).await
            }
            None => {
                // A progress notice: every change up to its revision has been sent, so a
                // resume may start after it.
                if !resp.created()
                    && let Some(h) = resp.header()
                {
                    self.delivered = Some(delivered.max(h.revision()));
                }
                true
            }
        }
    }
}

/// Why etcd cancelled a watch other than for a compaction: refused credentials (etcd
/// says "permission denied" for a token it does not know) or something else.
fn cancelled(resp: &WatchResponse) -> EtcdError {
    let reason = resp.cancel_reason();
    let reason = reason.strip_prefix("etcdserver: ").unwrap_or(reason);
    if reason.contains("permission denied") || reason.contains("auth") {
        EtcdError::Denied(reason.to_string())
    } else {
        EtcdError::Refused(format!("the watch was cancelled: {reason}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_their_keys() {
        let r = KeyRange::prefix("/s/health/");
        assert_eq!((r.start.as_str(), r.end.as_slice()), ("/s/health/", b"/s/health0".as_slice()));
        let r = KeyRange::through("/s/profiles/", "/s/pushed");
        assert_eq!(r.end, b"/s/pushed\0".to_vec());
        assert!(b"/s/pushed".as_slice() < r.end.as_slice());
        assert!(b"/s/pushed/x".as_slice() > r.end.as_slice());
    }
}
