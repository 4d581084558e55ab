//! One control step over every endpoint with a load feed, as pure data in and out: what
//! the feeds gave at this step and the previous step's map in, the next map out
//! (`model::load::step` per endpoint).
//!
//! A pulled feed whose read failed at this step holds the endpoint's share where it is
//! while the last good reading is younger than `stale_after` (an old load says nothing
//! about the share set since), and is stale after that; a pushed load is fresh until its
//! time to live runs out.

use std::collections::HashMap;
use std::time::SystemTime;

use tokio::time::Instant;

use super::pushed::Pushed;
use super::{LoadEntry, LoadMap, unix_ms};
use crate::model::Snapshot;
use crate::model::load::{EndpointLoad, FeedSource, LoadFeed, LoadRules, Reading, step};

/// What the loop knows of one pulled feed after this step's read.
#[derive(Clone, Debug, PartialEq)]
pub struct Pulled {
    /// This step's read: the load, or why there is none.
    pub now: Result<f64, String>,
    /// The last good reading: load, and when it was read (loop clock, wall clock).
    pub last_ok: Option<(f64, Instant, SystemTime)>,
}

/// (profile, endpoint) → what its pulled feed gave.
pub type PulledReads = HashMap<(String, String), Pulled>;

/// Every endpoint of `snap` with a load feed: (absolute profile name, endpoint, feed).
pub fn feeds(snap: &Snapshot) -> impl Iterator<Item = (&str, &str, &LoadFeed)> {
    snap.profiles.iter().flat_map(|p| {
        p.endpoints
            .iter()
            .filter_map(move |e| Some((p.name.as_str(), e.name.as_str(), e.load.as_deref()?)))
    })
}

/// The map after one step at `now` (`wall`: the same time on the wall clock).
#[allow(clippy::too_many_arguments)]
pub fn next_map<'a>(
    feeds: impl Iterator<Item = (&'a str, &'a str, &'a LoadFeed)>,
    rules: &LoadRules,
    prev: &LoadMap,
    pulled: &PulledReads,
    pushed: &Pushed,
    number: u64,
    now: Instant,
    wall: SystemTime,
) -> LoadMap {
    let mut entries: Vec<LoadEntry> = feeds
        .map(|(profile, endpoint, feed)| {
            let before = prev.get(profile, endpoint);
            let prev_state = before.map_or(&EndpointLoad::FULL, |e| &e.state);
            let (state, read_at, error) = match &feed.source {
                FeedSource::Pushed => {
                    let (reading, push) = pushed.reading(profile, endpoint, now);
                    let at = push.map(|p| unix_ms(p.at_wall));
                    (step(rules, feed, prev_state, reading), at, None)
                }
                FeedSource::Json { .. } | FeedSource::Prometheus { .. } => {
                    let key = (profile.to_string(), endpoint.to_string());
                    let got = pulled.get(&key);
                    let last = got.and_then(|g| g.last_ok);
                    let at = last.map(|(_, _, wall)| unix_ms(wall));
                    let error = got.and_then(|g| g.now.as_ref().err().cloned());
                    match (got.map(|g| &g.now), last) {
                        (Some(Ok(load)), _) => (
                            step(rules, feed, prev_state, Reading::Fresh { load: *load }),
                            at,
                            None,
                        ),
                        (_, Some((_, t, _)))
                            if now.saturating_duration_since(t) < rules.stale_after =>
                        {
                            (prev_state.clone(), before.and_then(|b| b.read_at_ms), error)
                        }
                        _ => (step(rules, feed, prev_state, Reading::Stale), at, error),
                    }
                }
            };
            LoadEntry {
                profile: profile.to_string(),
                endpoint: endpoint.to_string(),
                state,
                read_at_ms: read_at,
                error,
            }
        })
        .collect();
    entries.sort_by(|a, b| (&a.profile, &a.endpoint).cmp(&(&b.profile, &b.endpoint)));
    LoadMap { step: number, at_ms: unix_ms(wall), entries }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::model::load::OnStale;
    use crate::server::load::pushed::PushedLoad;

    fn rules() -> LoadRules {
        LoadRules {
            interval: Duration::from_secs(1),
            stale_after: Duration::from_secs(3),
            max_step: 1.0,
            deadband: 0.0,
            on_stale: OnStale::Overloaded,
            ..LoadRules::default()
        }
    }

    fn feed(source: FeedSource) -> LoadFeed {
        LoadFeed { capacity: 100.0, source, low: 0.7, high: 0.9 }
    }

    fn pulled(now: Result<f64, &str>, last: Option<(f64, Instant)>) -> Pulled {
        Pulled {
            now: now.map_err(str::to_string),
            last_ok: last.map(|(l, t)| (l, t, SystemTime::UNIX_EPOCH + Duration::from_secs(1))),
        }
    }

    #[test]
    fn readings_fresh_held_stale_and_pushed() {
        let json = feed(FeedSource::Json { url: "http://127.0.0.1:1/".into(), pointer: None });
        let pushed_feed = feed(FeedSource::Pushed);
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let rules = rules();
        let mut prev = LoadMap::default();
        prev.entries.push(LoadEntry {
            profile: "p.".into(),
            endpoint: "held".into(),
            state: EndpointLoad { share: 0.5, target: 0.5, ..EndpointLoad::FULL },
            read_at_ms: Some(1000),
            error: None,
        });
        let mut reads = PulledReads::new();
        let now = t0 + s(10);
        reads.insert(("p.".into(), "fresh".into()), pulled(Ok(50.0), Some((50.0, now))));
        reads
            .insert(("p.".into(), "held".into()), pulled(Err("timeout"), Some((95.0, now - s(2)))));
        reads.insert(
            ("p.".into(), "stale".into()),
            pulled(Err("timeout"), Some((95.0, now - s(3)))),
        );
        reads.insert(("p.".into(), "never".into()), pulled(Err("refused"), None));
        let pushed = Pushed::default();
        let push = |load, at| PushedLoad {
            load,
            at,
            at_wall: SystemTime::UNIX_EPOCH + Duration::from_secs(2),
            ttl: s(5),
            by: "ops".into(),
        };
        pushed.set("p.", "pushed", push(95.0, now - s(1)));
        pushed.set("p.", "expired", push(10.0, now - s(5)));
        let names = ["fresh", "held", "stale", "never", "pushed", "expired", "unpushed"];
        let list: Vec<(&str, &str, &LoadFeed)> = names
            .iter()
            .map(|n| {
                ("p.", *n, if n.contains("push") || *n == "expired" { &pushed_feed } else { &json })
            })
            .collect();
        let map = next_map(
            list.into_iter(),
            &rules,
            &prev,
            &reads,
            &pushed,
            7,
            now,
            SystemTime::UNIX_EPOCH,
        );
        assert_eq!(map.step, 7);
        let got = |n: &str| map.get("p.", n).unwrap_or_else(|| panic!("{n}")).clone();
        // Utilisation 0.5: at or below low, full share.
        let fresh = got("fresh");
        assert_eq!((fresh.state.load, fresh.state.share, fresh.error), (Some(50.0), 1.0, None));
        assert_eq!(fresh.read_at_ms, Some(1000));
        // Failed, last good reading 2 s old (< 3 s): the share is held.
        let held = got("held");
        assert_eq!((held.state.share, held.error.as_deref()), (0.5, Some("timeout")));
        // 3 s old: stale; with `on_stale: overloaded`, target 0 and above high.
        let stale = got("stale");
        assert!(
            stale.state.stale && stale.state.above_high && stale.state.share == 0.0,
            "{stale:?}"
        );
        assert!(got("never").state.stale);
        // Pushed 95 of 100 at full share: above high (0.9), and the target is the fixed
        // point high / (high - low + k) with k = 0.95, reached at once with max_step 1.
        let p = got("pushed");
        assert_eq!((p.state.load, p.state.above_high), (Some(95.0), true));
        assert!((p.state.share - 0.9 / 1.15).abs() < 1e-9, "{p:?}");
        assert_eq!(p.read_at_ms, Some(2000));
        assert!(got("expired").state.stale);
        assert_eq!(got("unpushed").state, EndpointLoad::FULL);
        let order: Vec<&str> = map.entries.iter().map(|e| e.endpoint.as_str()).collect();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, sorted, "entries are sorted for lookups");
    }
}
