//! Webhook notifications of status changes (`docs/notifications.md`). One dispatcher task
//! reads the status events the prober records (`Events::subscribe`), derives profile
//! status changes from the health table, and hands each change to every webhook's queue;
//! each webhook has its own sender task, so a slow or unreachable receiver delays only
//! itself, never the prober, a reload or a DNS answer.
//!
//! In a cluster only the replica leading the `notify` role hands changes on (every replica
//! sees the same verdicts), so each change is sent once.
//!
//! - `change`: what a notification is about; profile statuses (pure).
//! - `format`: the bodies of the generic, Slack and Alertmanager formats (pure).
//! - `queue`: the bounded queue and the backoff schedule (pure).
//! - `send`: one POST attempt.

pub mod change;
pub mod format;
pub mod queue;
pub mod send;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use hyper::body::Bytes;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{Notify, broadcast, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::cluster::leader::Leadership;
use crate::model::Snapshot;
use crate::model::events::Event;
use crate::model::notify::{Format, NotifySettings, Webhook};
use crate::probe::tls::Clients;
use crate::routing::Ctx;
use change::{Change, ProfileStatus};
use queue::Queue;
use send::Attempt;

/// The name of the leadership role whose leader sends notifications.
pub const ROLE: &str = "notify";

/// What a webhook's queue holds.
#[derive(Clone, Debug)]
enum Message {
    Change(Change),
    /// Alertmanager's open alerts, sent again (in order with the changes, so that a
    /// refresh never fires again an alert a later change resolved).
    Refresh(Bytes),
}

/// What one webhook's sender did, for `/metrics`; kept across reloads.
#[derive(Debug, Default)]
pub struct Counts {
    /// Messages delivered (a 2xx answer).
    pub sent: AtomicU64,
    /// Messages given up after the last retry.
    pub failed: AtomicU64,
    /// Attempts after a first one that failed.
    pub retried: AtomicU64,
    /// Messages dropped from a full queue, or missed while the dispatcher lagged.
    pub dropped: AtomicU64,
}

/// The running notifier: its counts by webhook name, and in a cluster its part in the
/// `notify` role.
#[derive(Debug, Default)]
pub struct Notifier {
    counts: Mutex<BTreeMap<String, Arc<Counts>>>,
    leadership: Option<Leadership>,
}

impl Notifier {
    /// Starts the dispatcher. `events` must be subscribed before the prober records its
    /// first change; in a cluster, only the leader of `leadership` sends.
    pub fn start(
        events: broadcast::Receiver<Event>,
        snapshots: Snapshots,
        leadership: Option<Leadership>,
        cancel: CancellationToken,
    ) -> (Arc<Notifier>, tokio::task::JoinHandle<()>) {
        let leading = leadership.as_ref().map(Leadership::leading);
        let notifier = Arc::new(Notifier { counts: Mutex::default(), leadership });
        let dispatcher = Dispatcher {
            notifier: notifier.clone(),
            snapshots,
            leading,
            cancel,
            workers: HashMap::new(),
            settings: None,
            profiles: HashMap::new(),
            open: BTreeMap::new(),
            due: HashMap::new(),
            tls: Arc::new(Clients::default()),
        };
        let task = tokio::spawn(dispatcher.run(events));
        (notifier, task)
    }

    /// The node leading the `notify` role as last seen (`None`: not in a cluster, nobody
    /// leads, or not known while etcd cannot be reached).
    pub fn leader(&self) -> Option<String> {
        self.leadership.as_ref().and_then(Leadership::leader)
    }

    /// (webhook, counts) in name order.
    pub fn counts(&self) -> Vec<(String, Arc<Counts>)> {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        counts.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    fn counts_of(&self, name: &str) -> Arc<Counts> {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        counts.entry(name.to_string()).or_default().clone()
    }
}

/// Where the dispatcher reads the running snapshot, and learns that it was replaced.
pub struct Snapshots {
    pub current: Arc<arc_swap::ArcSwap<Snapshot>>,
    /// Changes with every new snapshot (its value is not read).
    pub replaced: watch::Receiver<super::control::Served>,
}

/// What a webhook's sender sends to, and names itself as.
struct Target {
    hook: Webhook,
    server: String,
}

/// One webhook's sender task, as the dispatcher holds it.
struct Worker {
    target: watch::Sender<Arc<Target>>,
    queue: Arc<Mutex<Queue<Message>>>,
    wake: Arc<Notify>,
    counts: Arc<Counts>,
    cancel: CancellationToken,
}

impl Worker {
    fn push(&self, messages: &[Message]) {
        if messages.is_empty() {
            return;
        }
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let dropped: usize = messages.iter().map(|m| queue.push(m.clone())).sum();
        drop(queue);
        self.counts.dropped.fetch_add(dropped as u64, Ordering::Relaxed);
        self.wake.notify_one();
    }
}

struct Dispatcher {
    notifier: Arc<Notifier>,
    snapshots: Snapshots,
    leading: Option<watch::Receiver<bool>>,
    cancel: CancellationToken,
    workers: HashMap<String, Worker>,
    /// The settings the workers were made from.
    settings: Option<Arc<NotifySettings>>,
    /// Each tracked profile's last status (profiles that take no answers are not).
    profiles: HashMap<String, ProfileStatus>,
    /// The last change of each endpoint and profile whose status does not serve, by
    /// (profile, endpoint; empty for a profile): the alerts open at Alertmanager.
    open: BTreeMap<(String, String), Change>,
    /// When each Alertmanager webhook sends the open alerts again next (its `refresh`
    /// after the last time), by name.
    due: HashMap<String, Instant>,
    tls: Arc<Clients>,
}

impl Dispatcher {
    async fn run(mut self, mut events: broadcast::Receiver<Event>) {
        self.follow_snapshot();
        let mut leading = self.leading.clone();
        loop {
            let next_refresh = self.due.values().min().copied();
            let first = tokio::select! {
                _ = self.cancel.cancelled() => break,
                _ = tokio::time::sleep_until(next_refresh.unwrap_or_else(Instant::now)), if next_refresh.is_some() => {
                    self.refresh(false);
                    continue;
                }
                // A new leader sends the open alerts at once: the old one sends them no more.
                Ok(()) = async { leading.as_mut().expect("guarded").changed().await }, if leading.is_some() => {
                    self.refresh(true);
                    continue;
                }
                changed = self.snapshots.replaced.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    self.follow_snapshot();
                    continue;
                }
                e = events.recv() => e,
            };
            let mut batch = Vec::new();
            let mut missed = 0;
            let mut next = Some(first);
            while let Some(e) = next {
                match e {
                    Ok(e) => batch.extend(Change::of_event(&e)),
                    Err(RecvError::Lagged(n)) => missed += n,
                    Err(RecvError::Closed) => return self.stop(),
                }
                next = match events.try_recv() {
                    Ok(e) => Some(Ok(e)),
                    Err(broadcast::error::TryRecvError::Lagged(n)) => {
                        Some(Err(RecvError::Lagged(n)))
                    }
                    Err(_) => None,
                };
            }
            self.dispatch(batch, missed);
        }
        self.stop();
    }

    fn stop(&mut self) {
        for (_, w) in self.workers.drain() {
            w.cancel.cancel();
        }
    }

    /// A new snapshot: new webhook settings apply, and profile statuses are taken as they
    /// are now without notifying (a reload or an override changed them, not a probe).
    fn follow_snapshot(&mut self) {
        let snap = self.snapshots.current.load_full();
        self.reconcile(snap.notify.clone());
        if self.settings.is_none() {
            self.profiles.clear();
            self.open.clear();
            return;
        }
        let ctx = Ctx::of(&snap);
        self.profiles = (snap.profiles.iter())
            .filter_map(|p| Some((p.name.clone(), change::of_profile(ctx, p)?.0)))
            .collect();
        // Alerts of endpoints that are gone, and of profiles whose status is not the one
        // the alert is about, are no longer sent again (Alertmanager resolves them).
        let profiles = &self.profiles;
        self.open.retain(|(profile, endpoint), c| {
            if endpoint.is_empty() {
                return profiles.get(profile).is_some_and(|s| s.as_str() == c.to);
            }
            let p = snap.profiles.iter().find(|p| &p.name == profile);
            p.is_some_and(|p| p.endpoints.iter().any(|e| &e.name == endpoint))
        });
    }

    fn is_leading(&self) -> bool {
        self.leading.as_ref().is_none_or(|l| *l.borrow())
    }

    /// Queues the open alerts for the Alertmanager webhooks whose refresh is due, or for
    /// every one with `all` (only when leading), and schedules each one's next.
    fn refresh(&mut self, all: bool) {
        let Some(settings) = self.settings.clone() else { return };
        let now = Instant::now();
        let mut hooks = Vec::new();
        for hook in settings.webhooks.iter().filter(|h| h.format == Format::Alertmanager) {
            if all || self.due.get(&hook.name).is_some_and(|at| *at <= now) {
                self.due.insert(hook.name.clone(), now + hook.refresh);
                hooks.push(&hook.name);
            }
        }
        if hooks.is_empty() || !self.is_leading() {
            return;
        }
        let Some(body) = format::refresh(self.open.values(), &settings.server) else { return };
        let body = Bytes::from(body);
        for name in hooks {
            if let Some(w) = self.workers.get(name) {
                w.push(&[Message::Refresh(body.clone())]);
            }
        }
    }

    /// Keeps a next refresh for each Alertmanager webhook of the settings, no later than
    /// its `refresh` from now (a shorter one applies at once), and none for the others.
    fn follow_refresh(&mut self) {
        let hooks = self.settings.as_ref().map_or(&[][..], |s| &s.webhooks[..]);
        let alertmanagers = || hooks.iter().filter(|h| h.format == Format::Alertmanager);
        self.due.retain(|name, _| alertmanagers().any(|h| &h.name == name));
        let now = Instant::now();
        for hook in alertmanagers() {
            let at = self.due.entry(hook.name.clone()).or_insert(now + hook.refresh);
            *at = (*at).min(now + hook.refresh);
        }
    }

    /// Starts, updates and stops senders to match `settings`.
    fn reconcile(&mut self, settings: Option<Arc<NotifySettings>>) {
        let same = match (&self.settings, &settings) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
            (None, None) => true,
            _ => false,
        };
        if same {
            self.settings = settings;
            return;
        }
        let hooks = settings.as_ref().map_or(&[][..], |s| &s.webhooks[..]);
        self.workers.retain(|name, w| {
            let keep = hooks.iter().any(|h| &h.name == name);
            if !keep {
                w.cancel.cancel();
            }
            keep
        });
        if let Some(s) = &settings {
            for hook in &s.webhooks {
                let target = Arc::new(Target { hook: hook.clone(), server: s.server.clone() });
                match self.workers.get(&hook.name) {
                    Some(w) => {
                        w.target.send_replace(target);
                        let dropped =
                            w.queue.lock().unwrap_or_else(PoisonError::into_inner).resize(s.queue);
                        w.counts.dropped.fetch_add(dropped as u64, Ordering::Relaxed);
                    }
                    None => {
                        let w = self.spawn(target, s.queue);
                        self.workers.insert(hook.name.clone(), w);
                    }
                }
            }
        }
        self.settings = settings;
        self.follow_refresh();
    }

    fn spawn(&self, target: Arc<Target>, capacity: usize) -> Worker {
        let (tx, rx) = watch::channel(target.clone());
        let w = Worker {
            target: tx,
            queue: Arc::new(Mutex::new(Queue::new(capacity))),
            wake: Arc::new(Notify::new()),
            counts: self.notifier.counts_of(&target.hook.name),
            cancel: self.cancel.child_token(),
        };
        let sender = Sender {
            target: rx,
            queue: w.queue.clone(),
            wake: w.wake.clone(),
            counts: w.counts.clone(),
            cancel: w.cancel.clone(),
            tls: self.tls.clone(),
        };
        tokio::spawn(sender.run());
        w
    }

    /// Hands the endpoint changes of one batch of events, and the profile changes they
    /// made, to every webhook (only when leading).
    fn dispatch(&mut self, mut changes: Vec<Change>, missed: u64) {
        let snap = self.snapshots.current.load_full();
        self.reconcile(snap.notify.clone());
        if self.settings.is_none() {
            return;
        }
        if let Some(last) = changes.last().map(|c| (c.at, c.seq)) {
            changes.extend(self.profile_changes(&snap, last));
        }
        changes.retain(|c| !c.is_first_success());
        for c in &changes {
            let key = (c.profile.clone(), c.endpoint.clone());
            if c.to_serving {
                self.open.remove(&key);
            } else {
                self.open.insert(key, c.clone());
            }
        }
        let leading = self.is_leading();
        let messages: Vec<Message> = changes.into_iter().map(Message::Change).collect();
        for w in self.workers.values() {
            w.counts.dropped.fetch_add(missed, Ordering::Relaxed);
            if leading {
                w.push(&messages);
            }
        }
        if missed > 0 {
            tracing::warn!(
                missed,
                "notifications fell behind the status changes; some were not sent"
            );
        }
    }

    /// Every tracked profile whose status is not the one last seen.
    fn profile_changes(
        &mut self,
        snap: &Snapshot,
        (at, seq): (std::time::SystemTime, u64),
    ) -> Vec<Change> {
        let ctx = Ctx::of(snap);
        let mut out = Vec::new();
        for p in &snap.profiles {
            let Some(now) = change::of_profile(ctx, p) else {
                self.profiles.remove(&p.name);
                continue;
            };
            match self.profiles.insert(p.name.clone(), now.0) {
                Some(before) if before != now.0 => {
                    out.push(change::profile_change(&p.name, before, now, at, seq));
                }
                _ => {}
            }
        }
        out
    }
}

/// One webhook's sender: takes changes from the queue in order and delivers each, with
/// retries, before the next.
struct Sender {
    target: watch::Receiver<Arc<Target>>,
    queue: Arc<Mutex<Queue<Message>>>,
    wake: Arc<Notify>,
    counts: Arc<Counts>,
    cancel: CancellationToken,
    tls: Arc<Clients>,
}

impl Sender {
    async fn run(self) {
        loop {
            let next = self.queue.lock().unwrap_or_else(PoisonError::into_inner).pop();
            let Some(message) = next else {
                tokio::select! {
                    _ = self.cancel.cancelled() => return,
                    _ = self.wake.notified() => continue,
                }
            };
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = self.deliver(message) => {}
            }
        }
    }

    async fn deliver(&self, message: Message) {
        let target = self.target.borrow().clone();
        let hook = &target.hook;
        let (body, seq) = match message {
            Message::Change(c) => match format::body(hook.format, &c, &target.server) {
                Some(body) => (Bytes::from(body), c.seq),
                None => return,
            },
            Message::Refresh(body) => (body, 0),
        };
        let mut retry = 0;
        loop {
            let why = match send::post(hook, body.clone(), &self.tls).await {
                Attempt::Delivered(_) => {
                    self.counts.sent.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Attempt::Refused(status) => format!("HTTP {status}"),
                Attempt::Failed(e) => e,
            };
            if retry >= hook.retries {
                self.counts.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(webhook = %hook.name, attempts = retry + 1, error = %why, seq, "notification not delivered; giving up");
                return;
            }
            retry += 1;
            self.counts.retried.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(webhook = %hook.name, retry, error = %why, "notification not delivered; retrying");
            tokio::time::sleep(queue::backoff(retry)).await;
        }
    }
}
