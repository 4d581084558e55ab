//! The background resolver of flattened host names (`flatten: true`): looks each name's A
//! and AAAA up at the configured resolvers (`lookup`) before its records expire, and
//! stores each answer in the running snapshot's flat table, which the query path only
//! reads. Queries never wait for it: a name not resolved yet, or whose resolver fails,
//! is answered from what was stored, stale within `flatten.stale_for`, then not at all.
//!
//! One task checks every `TICK` which names are due (`Lookup::refresh_at`, or the retry
//! back-off after failures) and starts their lookups, at most `max_in_flight` at once. It
//! also updates each name's usable families as time passes the stale bound. It reads the
//! shared snapshot each time, so a reload's new names are looked up at the next tick and
//! names kept keep their records (the table's slots are shared across loads).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::lookup::{Ask, lookup};
use crate::model::Snapshot;
use crate::model::flat::{Family, FlatSlot, FlattenSettings, retry_after};
use crate::wire::name::WireName;

/// How often the task looks for due names and updates the usable families.
const TICK: Duration = Duration::from_millis(250);

/// The refresh state of one name and family (never read by queries).
#[derive(Clone, Debug, Default)]
struct Due {
    /// Unix seconds from which the next lookup may start.
    at: u64,
    /// Failed lookups in a row.
    failures: u32,
    in_flight: bool,
    /// Why the last lookup failed, for the log line when it starts failing.
    last_error: Option<String>,
}

type States = Arc<Mutex<HashMap<(WireName, Family), Due>>>;

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Runs until `cancel`: idle while the running configuration flattens nothing.
pub async fn run(shared: Arc<ArcSwap<Snapshot>>, cancel: CancellationToken) {
    let states: States = Arc::default();
    let mut in_flight: Option<(usize, Arc<Semaphore>)> = None;
    let mut next_resolver = 0usize;
    loop {
        let snap = shared.load_full();
        if let Some(settings) = snap.flatten.clone() {
            // A reload that changes max_in_flight starts counting anew; the lookups
            // already running finish under the old bound.
            let sem = match &in_flight {
                Some((n, s)) if *n == settings.max_in_flight => s.clone(),
                _ => {
                    let s = Arc::new(Semaphore::new(settings.max_in_flight));
                    in_flight = Some((settings.max_in_flight, s.clone()));
                    s
                }
            };
            let now = unix_now();
            forget_gone(&states, &snap);
            for slot in &snap.flat.slots {
                slot.update_usable(now, settings.rules);
                for family in [Family::V4, Family::V6] {
                    let Ok(permit) = sem.clone().try_acquire_owned() else { break };
                    if !take_due(&states, &slot.name, family, now) {
                        continue;
                    }
                    let start = next_resolver;
                    next_resolver = next_resolver.wrapping_add(1);
                    let (slot, settings, states) = (slot.clone(), settings.clone(), states.clone());
                    tokio::spawn(async move {
                        refresh(&slot, family, &settings, start, &states).await;
                        drop(permit);
                    });
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = cancel.cancelled() => return,
        }
    }
}

/// Marks the lookup of `name`/`family` started when it is due and not running.
fn take_due(states: &States, name: &WireName, family: Family, now: u64) -> bool {
    let mut map = states.lock().unwrap_or_else(PoisonError::into_inner);
    let due = map.entry((name.clone(), family)).or_default();
    if due.in_flight || now < due.at {
        return false;
    }
    due.in_flight = true;
    true
}

/// Drops the state of names the running configuration no longer flattens.
fn forget_gone(states: &States, snap: &Snapshot) {
    let mut map = states.lock().unwrap_or_else(PoisonError::into_inner);
    if map.len() > 2 * snap.flat.slots.len() {
        map.retain(|(name, _), _| snap.flat.slots.iter().any(|s| &s.name == name));
    }
}

/// One lookup of `slot`'s name for `family`; stores what it found and when to look again.
async fn refresh(
    slot: &FlatSlot,
    family: Family,
    settings: &FlattenSettings,
    start: usize,
    states: &States,
) {
    let ask = Ask {
        name: &slot.name,
        family,
        timeout: settings.timeout,
        require_ad: settings.require_ad,
    };
    let result = lookup(ask, &settings.resolvers, start, unix_now).await;
    let now = unix_now();
    let mut map = states.lock().unwrap_or_else(PoisonError::into_inner);
    let due = map.entry((slot.name.clone(), family)).or_default();
    due.in_flight = false;
    match result {
        Ok(found) => {
            slot.lookups_ok.fetch_add(1, Ordering::Relaxed);
            if due.failures > 0 {
                tracing::info!(name = %slot.name, family = family.as_str(), "flattened name resolves again");
            }
            due.failures = 0;
            due.last_error = None;
            due.at = found.refresh_at();
            slot.store(family, found);
        }
        Err(e) => {
            slot.lookups_failed.fetch_add(1, Ordering::Relaxed);
            due.failures += 1;
            let error = e.to_string();
            if due.last_error.as_deref() != Some(error.as_str()) {
                tracing::warn!(name = %slot.name, family = family.as_str(), %error, "flattened name does not resolve; serving what was resolved before while it lasts");
            }
            due.last_error = Some(error);
            due.at = now + retry_after(due.failures).as_secs();
        }
    }
    drop(map);
    slot.update_usable(now, settings.rules);
}
