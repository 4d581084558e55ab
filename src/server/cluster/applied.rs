//! The etcd revision up to which one replica has applied a prefix it follows (overrides,
//! pushed health), so that a change written to etcd through this replica's admin API
//! answers once it applies here: a client reading it back from the same replica sees it.

use std::time::Duration;

use tokio::sync::watch;

#[derive(Debug)]
pub struct Applied(watch::Sender<i64>);

impl Default for Applied {
    fn default() -> Applied {
        Applied(watch::Sender::new(0))
    }
}

impl Applied {
    /// Everything up to `revision` is applied (a smaller one than before changes nothing).
    pub fn advance(&self, revision: i64) {
        self.0.send_if_modified(|r| {
            let newer = revision > *r;
            *r = (*r).max(revision);
            newer
        });
    }

    /// Waits until everything up to `revision` is applied, at most `limit`; whether it is.
    pub async fn wait(&self, revision: i64, limit: Duration) -> bool {
        let mut applied = self.0.subscribe();
        let reached = applied.wait_for(|r| *r >= revision);
        matches!(tokio::time::timeout(limit, reached).await, Ok(Ok(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_wait_ends_when_the_revision_is_applied_or_at_the_limit() {
        let applied = std::sync::Arc::new(Applied::default());
        let limit = Duration::from_secs(5);
        assert!(!applied.wait(3, limit).await, "nothing applied: the limit");
        let a = applied.clone();
        let waiting = tokio::spawn(async move { a.wait(3, limit).await });
        tokio::task::yield_now().await;
        applied.advance(2);
        applied.advance(4);
        applied.advance(1);
        assert!(waiting.await.unwrap());
        assert!(applied.wait(4, Duration::ZERO).await, "4 applied, never back");
    }
}
