//! The one way to reload: every trigger (SIGHUP, the admin API, the file watcher, key
//! timing, etcd) asks a `Reloader`, which runs `Control::reload` off the async runtime,
//! one reload at a time. Requests that arrive while a reload runs are coalesced into one
//! more reload after it (each reload reads every file, so one is enough), and a caller that
//! needs the result waits for the reload that starts after its request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::control::Control;
use crate::config::ConfigErrors;

/// What asked for a reload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// SIGHUP.
    Signal,
    /// `POST /api/v1/reload`.
    Api,
    /// The file watcher, after a burst of changes.
    FileChange,
    /// A DNSSEC key's timing came due.
    KeyTiming,
    /// The profiles in etcd changed (`profiles: etcd`).
    Cluster,
    /// A direct request of the embedding program (`Server::reload`).
    Request,
}

impl Trigger {
    pub const ALL: [Trigger; 6] = [
        Trigger::Signal,
        Trigger::Api,
        Trigger::FileChange,
        Trigger::KeyTiming,
        Trigger::Cluster,
        Trigger::Request,
    ];

    /// The `trigger` label of `steerdns_reload_requests_total`.
    pub fn label(self) -> &'static str {
        match self {
            Trigger::Signal => "sighup",
            Trigger::Api => "api",
            Trigger::FileChange => "file",
            Trigger::KeyTiming => "key_timing",
            Trigger::Cluster => "etcd",
            Trigger::Request => "request",
        }
    }

    /// How the reload's log line names it.
    pub fn log_name(self) -> &'static str {
        match self {
            Trigger::Signal => "SIGHUP",
            Trigger::Api => "admin API",
            Trigger::FileChange => "file change",
            Trigger::KeyTiming => "key timing",
            Trigger::Cluster => "etcd change",
            Trigger::Request => "request",
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// The triggers one reload answers: every request coalesced into it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Triggers(u8);

impl Triggers {
    pub fn of(trigger: Trigger) -> Triggers {
        Triggers(trigger.bit())
    }

    pub fn add(&mut self, trigger: Trigger) {
        self.0 |= trigger.bit();
    }

    pub fn contains(self, trigger: Trigger) -> bool {
        self.0 & trigger.bit() != 0
    }

    /// Only etcd asked: a reload is needed only when the profiles read from etcd changed.
    pub fn only_cluster(self) -> bool {
        self == Triggers::of(Trigger::Cluster)
    }

    pub fn iter(self) -> impl Iterator<Item = Trigger> {
        Trigger::ALL.into_iter().filter(move |t| self.contains(*t))
    }
}

impl std::fmt::Display for Triggers {
    /// The log names, comma-separated: `SIGHUP, admin API`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, t) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(t.log_name())?;
        }
        Ok(())
    }
}

/// Why a caller got no result.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(transparent)]
    Config(#[from] ConfigErrors),
    /// The reload thread panicked or could not be started.
    #[error("the reload was aborted")]
    Aborted,
}

type Outcome = Result<u64, ConfigErrors>;

/// Where a waiting caller gets the result.
enum Waiter {
    Async(oneshot::Sender<Outcome>),
    Blocking(std::sync::mpsc::SyncSender<Outcome>),
}

impl Waiter {
    fn send(self, outcome: Outcome) {
        // A caller that gave up waiting is not an error.
        let _ = match self {
            Waiter::Async(tx) => tx.send(outcome).map_err(drop),
            Waiter::Blocking(tx) => tx.send(outcome).map_err(drop),
        };
    }
}

/// The requests waiting for the next reload.
#[derive(Default)]
struct Batch {
    triggers: Triggers,
    waiters: Vec<Waiter>,
}

#[derive(Default)]
struct Queue {
    /// A reload thread is running (it takes the pending batch when its reload is done).
    running: bool,
    pending: Option<Batch>,
}

/// The request queue and counts, kept in `Control`; only the `Reloader` uses them.
#[derive(Default)]
pub struct Requests {
    queue: Mutex<Queue>,
    counts: [AtomicU64; Trigger::ALL.len()],
}

impl Requests {
    /// Requests per trigger so far, in `Trigger::ALL` order (coalesced ones included).
    pub fn counts(&self) -> impl Iterator<Item = (Trigger, u64)> + '_ {
        Trigger::ALL.into_iter().map(|t| (t, self.counts[t as usize].load(Ordering::Relaxed)))
    }
}

/// The handle every trigger reloads through. Cheap to clone.
#[derive(Clone)]
pub struct Reloader {
    control: Arc<Control>,
}

impl Reloader {
    pub fn new(control: Arc<Control>) -> Reloader {
        Reloader { control }
    }

    /// Asks for a reload and returns at once.
    pub fn request(&self, trigger: Trigger) {
        self.enqueue(trigger, None);
    }

    /// Asks for a reload and waits for the result of the one that starts after this call.
    pub async fn reload(&self, trigger: Trigger) -> Result<u64, ReloadError> {
        let (tx, rx) = oneshot::channel();
        self.enqueue(trigger, Some(Waiter::Async(tx)));
        match rx.await {
            Ok(outcome) => Ok(outcome?),
            Err(_) => Err(ReloadError::Aborted),
        }
    }

    /// `reload` for a caller that is not async (it blocks the calling thread).
    pub fn reload_blocking(&self, trigger: Trigger) -> Result<u64, ReloadError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.enqueue(trigger, Some(Waiter::Blocking(tx)));
        match rx.recv() {
            Ok(outcome) => Ok(outcome?),
            Err(_) => Err(ReloadError::Aborted),
        }
    }

    fn enqueue(&self, trigger: Trigger, waiter: Option<Waiter>) {
        let requests = &self.control.requests;
        requests.counts[trigger as usize].fetch_add(1, Ordering::Relaxed);
        let mut queue = requests.queue.lock().unwrap_or_else(|e| e.into_inner());
        let batch = queue.pending.get_or_insert_with(Batch::default);
        batch.triggers.add(trigger);
        batch.waiters.extend(waiter);
        if queue.running {
            return;
        }
        queue.running = true;
        drop(queue);
        let control = self.control.clone();
        let work = move || run(&control);
        // The blocking pool when there is a runtime (a reload reads files and takes its
        // time); a thread of its own otherwise.
        let started = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                drop(runtime.spawn_blocking(work));
                true
            }
            Err(_) => std::thread::Builder::new().name("reload".into()).spawn(work).is_ok(),
        };
        if !started {
            tracing::error!("cannot start a thread to reload");
            // Dropping the waiters tells them the reload was aborted.
            let mut queue = requests.queue.lock().unwrap_or_else(|e| e.into_inner());
            queue.running = false;
            queue.pending = None;
        }
    }
}

/// Runs the pending batches one after another until none is left.
fn run(control: &Control) {
    // If a reload panics, its waiters and those of the batch after it see their channels
    // closed (`ReloadError::Aborted`) rather than wait for a thread that is gone; the next
    // request starts a new one.
    struct Running<'a>(&'a Requests);
    impl Drop for Running<'_> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                let mut queue = self.0.queue.lock().unwrap_or_else(|e| e.into_inner());
                queue.running = false;
                queue.pending = None;
            }
        }
    }
    let _guard = Running(&control.requests);
    loop {
        let batch = {
            let mut queue = control.requests.queue.lock().unwrap_or_else(|e| e.into_inner());
            match queue.pending.take() {
                Some(batch) => batch,
                None => {
                    queue.running = false;
                    return;
                }
            }
        };
        let outcome = control.reload(batch.triggers);
        for waiter in batch.waiters {
            waiter.send(outcome.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triggers_name_each_request_once_in_a_fixed_order() {
        let mut t = Triggers::of(Trigger::FileChange);
        t.add(Trigger::Signal);
        t.add(Trigger::FileChange);
        t.add(Trigger::Api);
        assert_eq!(t.to_string(), "SIGHUP, admin API, file change");
        assert!(!t.only_cluster());
        assert!(Triggers::of(Trigger::Cluster).only_cluster());
        let mut both = Triggers::of(Trigger::Cluster);
        both.add(Trigger::KeyTiming);
        assert!(!both.only_cluster());
        assert_eq!(both.to_string(), "key timing, etcd change");
    }

    #[test]
    fn every_trigger_has_its_own_bit_and_label() {
        let labels: std::collections::BTreeSet<_> = Trigger::ALL.map(Trigger::label).into();
        assert_eq!(labels.len(), Trigger::ALL.len());
        for (i, t) in Trigger::ALL.into_iter().enumerate() {
            assert_eq!(t as usize, i, "ALL is in declaration order");
        }
    }
}
