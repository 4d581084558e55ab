//! The recent events operators and status pages read (`GET /api/v1/events`): endpoint
//! status changes from the prober, and run-time overrides set or dropped. A bounded list,
//! numbered in the order recorded, under a mutex the query path never takes. With a state
//! file the newest `PERSISTED` are kept in it, so a restart starts from them and numbers
//! on from the last one. `subscribe` hands each new event to a listener (the webhook
//! notifier) through a bounded broadcast channel, so a slow listener never holds up the
//! recorder: it misses events instead, and is told how many.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use tokio::sync::broadcast;

/// How many events are kept: the oldest go first.
pub const CAPACITY: usize = 1000;

/// How many of the newest events the state file keeps across a restart.
pub const PERSISTED: usize = 200;

/// How many events a subscriber may fall behind before it misses the oldest.
pub const SUBSCRIBER_BACKLOG: usize = 4096;

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A probe changed an endpoint's status (`from`, `to`, `reason`).
    Status,
    Drain,
    Undrain,
    /// A weight was set at run time (`from`, `to`: the weights).
    Weight,
    /// A run-time weight was cleared (`from`, `to`: the weights).
    WeightCleared,
    /// A bias was set at run time (`from`, `to`: the biases).
    Bias,
    /// A run-time bias was cleared (`from`, `to`: the biases).
    BiasCleared,
    /// A load could not apply an override (`reason`).
    OverrideDropped,
    /// Loads began to be pushed to an endpoint through the admin API (`to`: the load);
    /// the pushes that follow while it is live are not recorded.
    LoadPushed,
    /// A pushed load was cleared.
    LoadCleared,
    /// A health status was pushed to an endpoint through the admin API (`to`: healthy or
    /// unhealthy, `reason`, `by`).
    HealthPushed,
    /// A pushed health status was cleared.
    HealthCleared,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Status => "status",
            Kind::Drain => "drain",
            Kind::Undrain => "undrain",
            Kind::Weight => "weight",
            Kind::WeightCleared => "weight_cleared",
            Kind::Bias => "bias",
            Kind::BiasCleared => "bias_cleared",
            Kind::OverrideDropped => "override_dropped",
            Kind::LoadPushed => "load_pushed",
            Kind::LoadCleared => "load_cleared",
            Kind::HealthPushed => "health_pushed",
            Kind::HealthCleared => "health_cleared",
        }
    }

    pub fn parse(text: &str) -> Option<Kind> {
        let all = [
            Kind::Status,
            Kind::Drain,
            Kind::Undrain,
            Kind::Weight,
            Kind::WeightCleared,
            Kind::Bias,
            Kind::BiasCleared,
            Kind::OverrideDropped,
            Kind::LoadPushed,
            Kind::LoadCleared,
            Kind::HealthPushed,
            Kind::HealthCleared,
        ];
        all.into_iter().find(|k| k.as_str() == text)
    }
}

/// One event. Fields that do not apply to its kind are `None`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// 1 for the first event of the process, then one more for each.
    pub seq: u64,
    pub time: SystemTime,
    pub kind: Kind,
    /// Absolute profile name.
    pub profile: String,
    pub endpoint: String,
    pub from: Option<String>,
    pub to: Option<String>,
    pub reason: Option<String>,
    /// The name of the admin token that made the change.
    pub by: Option<String>,
}

impl Event {
    /// An event of `kind` at `profile`/`endpoint`, now; `record` numbers it.
    pub fn new(kind: Kind, profile: &str, endpoint: &str) -> Event {
        Event {
            seq: 0,
            time: SystemTime::now(),
            kind,
            profile: profile.to_string(),
            endpoint: endpoint.to_string(),
            from: None,
            to: None,
            reason: None,
            by: None,
        }
    }

    pub fn change(mut self, from: impl ToString, to: impl ToString) -> Event {
        self.from = Some(from.to_string());
        self.to = Some(to.to_string());
        self
    }

    pub fn reason(mut self, reason: impl Into<String>) -> Event {
        self.reason = Some(reason.into());
        self
    }

    pub fn by(mut self, by: impl Into<String>) -> Event {
        self.by = Some(by.into());
        self
    }
}

/// The last `CAPACITY` events.
#[derive(Debug)]
pub struct Events {
    inner: Mutex<Inner>,
    capacity: usize,
    /// New events for subscribers; sending never waits for them.
    recorded: broadcast::Sender<Event>,
}

#[derive(Debug, Default)]
struct Inner {
    last_seq: u64,
    list: VecDeque<Event>,
    /// The newest event written to the state file.
    saved_seq: u64,
}

impl Default for Events {
    fn default() -> Events {
        Events::with_capacity(CAPACITY)
    }
}

impl Events {
    pub fn with_capacity(capacity: usize) -> Events {
        let (recorded, _) = broadcast::channel(SUBSCRIBER_BACKLOG);
        Events { inner: Mutex::default(), capacity: capacity.max(1), recorded }
    }

    /// Every event recorded from now on, in order (events restored from the state file are
    /// not new, and are not sent). A receiver more than `SUBSCRIBER_BACKLOG` behind gets
    /// `Lagged` with the number it missed.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.recorded.subscribe()
    }

    /// Numbers `event` and keeps it, dropping the oldest when full; returns its number.
    pub fn record(&self, mut event: Event) -> u64 {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.last_seq += 1;
        event.seq = inner.last_seq;
        if inner.list.len() == self.capacity {
            inner.list.pop_front();
        }
        // Under the lock, so that subscribers see events in the order they are numbered.
        // Without subscribers this is one atomic load: nothing is cloned.
        if self.recorded.receiver_count() > 0 {
            let _ = self.recorded.send(event.clone());
        }
        inner.list.push_back(event);
        inner.last_seq
    }

    /// Starts from `saved`, events read back from the state file (oldest first): they are
    /// kept as they were, and numbering goes on after the newest.
    pub fn restore(&self, saved: Vec<Event>) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        for e in saved {
            if e.seq <= inner.last_seq {
                continue;
            }
            inner.last_seq = e.seq;
            if inner.list.len() == self.capacity {
                inner.list.pop_front();
            }
            inner.list.push_back(e);
        }
        inner.saved_seq = inner.last_seq;
    }

    /// The newest `PERSISTED` events, oldest first, and the number of the newest: what the
    /// state file keeps. Pass the number to `saved` once they are written.
    pub fn to_save(&self) -> (Vec<Event>, u64) {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let skip = inner.list.len().saturating_sub(PERSISTED);
        (inner.list.iter().skip(skip).cloned().collect(), inner.last_seq)
    }

    /// The events up to `seq` are in the state file.
    pub fn saved(&self, seq: u64) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.saved_seq = inner.saved_seq.max(seq);
    }

    /// Whether events were recorded since the state file was last written.
    pub fn unsaved(&self) -> bool {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.last_seq > inner.saved_seq
    }

    /// The kept events numbered above `since`, oldest first, and the number to ask from
    /// next time (the newest so far). A `since` beyond the newest cannot come from this
    /// process (it restarted since): every kept event is returned.
    pub fn since(&self, since: u64) -> (Vec<Event>, u64) {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let since = if since > inner.last_seq { 0 } else { since };
        let list = inner.list.iter().filter(|e| e.seq > since).cloned().collect();
        (list, inner.last_seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seqs(events: &[Event]) -> Vec<u64> {
        events.iter().map(|e| e.seq).collect()
    }

    #[test]
    fn keeps_the_newest_and_answers_since() {
        let events = Events::with_capacity(3);
        assert_eq!(events.since(0), (vec![], 0));
        for i in 0..5 {
            let seq = events.record(Event::new(Kind::Drain, "p.", &format!("e{i}")).by("alice"));
            assert_eq!(seq, i + 1);
        }
        // (since, events returned, next)
        let cases: [(u64, &[u64]); 6] =
            [(0, &[3, 4, 5]), (1, &[3, 4, 5]), (3, &[4, 5]), (4, &[5]), (5, &[]), (9, &[3, 4, 5])];
        for (since, want) in cases {
            let (list, next) = events.since(since);
            assert_eq!((seqs(&list).as_slice(), next), (want, 5), "since {since}");
        }
        let (list, _) = events.since(4);
        assert_eq!((list[0].endpoint.as_str(), list[0].by.as_deref()), ("e4", Some("alice")));
    }

    #[test]
    fn subscribers_get_new_events_in_order_and_learn_what_they_missed() {
        use tokio::sync::broadcast::error::TryRecvError;
        let events = Events::with_capacity(3);
        events.restore(vec![Event { seq: 7, ..Event::new(Kind::Drain, "p.", "old") }]);
        let mut rx = events.subscribe();
        events.record(Event::new(Kind::Status, "p.", "a").change("online", "degraded"));
        events.record(Event::new(Kind::Status, "p.", "b").change("online", "degraded"));
        let got: Vec<(u64, String)> =
            (0..2).map(|_| rx.try_recv().unwrap()).map(|e| (e.seq, e.endpoint)).collect();
        assert_eq!(got, [(8, "a".to_string()), (9, "b".to_string())]);
        assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Empty);
        for _ in 0..SUBSCRIBER_BACKLOG + 5 {
            events.record(Event::new(Kind::Undrain, "p.", "c"));
        }
        assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Lagged(5));
        assert_eq!(rx.try_recv().unwrap().seq, 9 + 6);
    }

    #[test]
    fn restored_events_come_first_and_numbering_goes_on() {
        let before = Events::with_capacity(3);
        for i in 0..4 {
            before.record(Event::new(Kind::Drain, "p.", &format!("e{i}")));
        }
        let (saved, newest) = before.to_save();
        assert_eq!((seqs(&saved), newest), (vec![2, 3, 4], 4));
        let after = Events::with_capacity(3);
        after.restore(saved);
        assert!(!after.unsaved(), "what was read back is in the file");
        assert_eq!(after.record(Event::new(Kind::Undrain, "p.", "e0")), 5);
        assert!(after.unsaved());
        let (list, next) = after.since(0);
        assert_eq!((seqs(&list), next), (vec![3, 4, 5], 5));
        after.saved(5);
        assert!(!after.unsaved());
        for k in [
            "status",
            "drain",
            "undrain",
            "weight",
            "weight_cleared",
            "bias",
            "bias_cleared",
            "override_dropped",
        ] {
            assert_eq!(Kind::parse(k).map(Kind::as_str), Some(k));
        }
        assert_eq!(Kind::parse("drained"), None);
    }
}
