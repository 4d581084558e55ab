//! A replica's mirror of a prefix that holds one record per endpoint,
//! `<prefix><profile>/<endpoint>` (laid out by `override_record::key`): the overrides and
//! the pushed health are kept this way. `View` is what the replica last read of the
//! prefix; `Mirror` keeps it from the prefix's follower and hands every snapshot and batch
//! of changes to a `Consumer` with who made them. Each part has its own record type
//! (`Stored`) and its own way of applying; the rest is the same for both.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Session;
use super::etcd::Entry;
use super::follow::{self, Change, Event, KeyRange, Warned};
use super::override_record::{Authors, parse_key};

/// A (profile, endpoint): the profile's absolute name as `Profile::name` spells it.
pub type Target = (String, String);

/// The value of one key of a mirrored prefix.
pub trait Stored: Sized {
    /// Reads a value; `Err` says what is wrong with it.
    fn decode(value: &[u8]) -> Result<Self, String>;

    /// Who made the change the record stands for, where it says (never empty): the author
    /// an event or a log line names.
    fn author(&self) -> Option<&str>;
}

/// A prefix as one replica last read it: every valid key's target and record.
#[derive(Clone, Debug)]
pub struct View<R> {
    prefix: String,
    entries: BTreeMap<String, (Target, R)>,
}

impl<R: Stored> View<R> {
    pub fn new(prefix: &str) -> View<R> {
        View { prefix: prefix.to_string(), entries: BTreeMap::new() }
    }

    /// Takes in a key's new value. `Ok` has the target and its record; `Err` says why the
    /// key is left out (it is then as if deleted).
    pub fn put(&mut self, key: &str, value: &[u8]) -> Result<(&Target, &R), String> {
        let parsed = parse_key(&self.prefix, key).and_then(|t| Ok((t, R::decode(value)?)));
        match parsed {
            Ok(entry) => {
                self.entries.insert(key.to_string(), entry);
                let (target, record) = &self.entries[key];
                Ok((target, record))
            }
            Err(e) => {
                self.entries.remove(key);
                Err(e)
            }
        }
    }

    pub fn delete(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Every valid key's target and record, in the keys' order (two keys for one endpoint,
    /// spelled differently, is a hand edit: a consumer lets the later one win).
    pub fn records(&self) -> impl Iterator<Item = (&Target, &R)> {
        self.entries.values().map(|(t, r)| (t, r))
    }

    /// Who made each endpoint's record, where the record says.
    pub fn authors(&self) -> Authors {
        let named = self.records().filter_map(|(t, r)| Some((t.clone(), r.author()?.to_string())));
        named.collect()
    }

    /// Replaces what the view holds with every key of a read of the prefix; each key left
    /// out goes to `warn` with why.
    pub fn replace(&mut self, entries: &[Entry], mut warn: impl FnMut(&str, String)) {
        self.entries.clear();
        for e in entries {
            if let Err(why) = self.put(&e.key, &e.value) {
                warn(&e.key, why);
            }
        }
    }

    /// Takes in a batch of changes; returns who made each, where the value written says
    /// (a value written just before its key was deleted, perhaps in the same batch, says
    /// who deleted it). Each key left out goes to `warn` with why.
    pub fn change(&mut self, changes: &[Change], mut warn: impl FnMut(&str, String)) -> Authors {
        let mut authors = Authors::new();
        for change in changes {
            match &change.value {
                Some(value) => match self.put(&change.key, value) {
                    Ok((target, record)) => {
                        if let Some(by) = record.author() {
                            authors.insert(target.clone(), by.to_string());
                        }
                    }
                    Err(why) => warn(&change.key, why),
                },
                None => self.delete(&change.key),
            }
        }
        authors
    }
}

/// What a mirror hands what it reads to.
pub trait Consumer: Send {
    type Record: Stored + Send + Sync;

    /// What log lines call the records: "overrides".
    const WHAT: &'static str;

    /// The prefix's own part, as a warning about a key names it: "overrides/".
    const UNDER: &'static str;

    /// Brings this replica to `view` as of `revision`: the first read, a read again after
    /// a compaction, or a batch of changes. `authors` says who made each endpoint's record
    /// where the values say: the view's, and over them the batch's.
    fn apply(
        &mut self,
        view: &View<Self::Record>,
        authors: Authors,
        revision: i64,
    ) -> impl Future<Output = ()> + Send;
}

/// Follows one prefix for one replica and hands what etcd holds to its consumer.
pub struct Mirror<C: Consumer> {
    consumer: C,
    events: mpsc::Receiver<Event>,
    /// The prefix as last read and followed.
    view: View<C::Record>,
    /// Keys already warned about, so that a key that stays wrong is logged once.
    warned: Warned,
}

impl<C: Consumer> Mirror<C> {
    /// Starts following `prefix` until `cancel`; nothing is handed over before `first_read`
    /// or `run`.
    pub fn spawn(
        consumer: C,
        session: Arc<Session>,
        prefix: &str,
        cancel: CancellationToken,
    ) -> Mirror<C> {
        let events = follow::spawn(session, KeyRange::prefix(prefix), None, cancel);
        Mirror { consumer, events, view: View::new(prefix), warned: Warned::default() }
    }

    /// Applies the first read of the prefix, waiting at most `limit` (a replica starting
    /// applies it before it answers); else why there is none (`run` applies it as soon as
    /// etcd answers).
    pub async fn first_read(&mut self, limit: Duration) -> Result<(), String> {
        let snapshot = follow::first_read(&mut self.events, limit).await?;
        self.take(snapshot).await;
        Ok(())
    }

    /// Follows the prefix until `cancel`, applying every read of it (the first, and again
    /// after a compaction: only what differs from what is applied changes) and every batch
    /// of changes.
    pub async fn run(mut self, cancel: CancellationToken) {
        loop {
            let event = tokio::select! {
                _ = cancel.cancelled() => return,
                event = self.events.recv() => event,
            };
            match event {
                Some(event) => self.take(event).await,
                None => return,
            }
        }
    }

    async fn take(&mut self, event: Event) {
        let warned = &mut self.warned;
        let mut warn = |key: &str, why: String| {
            if warned.first(key) {
                tracing::warn!(%key, why, "etcd key under {} ignored", C::UNDER);
            }
        };
        let (authors, revision) = match event {
            Event::Snapshot { revision, entries } => {
                self.view.replace(&entries, &mut warn);
                (self.view.authors(), revision)
            }
            Event::Changes { revision, changes } => {
                let mut batch = self.view.change(&changes, &mut warn);
                let mut authors = self.view.authors();
                authors.append(&mut batch);
                (authors, revision)
            }
            Event::Lost { error } => {
                tracing::debug!(%error, "{} not followed until etcd is back", C::WHAT);
                return;
            }
            Event::Resumed { revision } => {
                tracing::debug!(revision, "following the {} in etcd again", C::WHAT);
                return;
            }
        };
        self.consumer.apply(&self.view, authors, revision).await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::config::Override;
    use crate::server::cluster::override_record::{Record, key};

    const P: &str = "/s/overrides/";

    fn record(by: &str) -> Vec<u8> {
        let drained = Override { drained: true, ..Override::default() };
        Record::new(drained, by, SystemTime::UNIX_EPOCH).encode()
    }

    fn change(key: &str, value: Option<Vec<u8>>, mod_revision: i64) -> Change {
        Change { key: key.to_string(), value, mod_revision }
    }

    #[test]
    fn a_batch_says_who_made_each_change_even_of_a_key_it_deletes() {
        let mut v: View<Record> = View::new(P);
        let (a, b, c) = (key(P, "w.t.", "a"), key(P, "w.t.", "b"), key(P, "w.t.", "c"));
        let mut warned = Vec::new();
        let entries = [
            Entry { key: a.clone(), value: record("alice"), mod_revision: 1 },
            Entry { key: "/s/overrides/w.t".into(), value: record("x"), mod_revision: 1 },
        ];
        v.replace(&entries, |k, _| warned.push(k.to_string()));
        assert_eq!(warned, ["/s/overrides/w.t"]);
        let target = |e: &str| ("w.t.".to_string(), e.to_string());
        assert_eq!(v.authors(), Authors::from([(target("a"), "alice".into())]));

        // bob empties b's override and deletes its key; c is written without an author.
        let changes = [
            change(&b, Some(record("bob")), 2),
            change(&b, None, 3),
            change(&c, Some(Record::default().encode()), 3),
            change(&a, Some(b"{".to_vec()), 3),
        ];
        let batch = v.change(&changes, |k, _| warned.push(k.to_string()));
        assert_eq!(batch, Authors::from([(target("b"), "bob".into())]));
        assert_eq!(warned[1..], [a]);
        assert_eq!(v.records().map(|(t, _)| t.clone()).collect::<Vec<_>>(), [target("c")]);
        assert!(v.authors().is_empty(), "a's key left out, c's record names no one");

        // A read again replaces everything.
        v.replace(&[Entry { key: b.clone(), value: record("carol"), mod_revision: 4 }], |_, _| {});
        assert_eq!(v.authors(), Authors::from([(target("b"), "carol".into())]));
    }
}
