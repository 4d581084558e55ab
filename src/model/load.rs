//! Load feedback: the control rules (`load:`), each endpoint's load feed, the controller
//! step that turns a reading into an effective share, and the lock-free table of shares
//! routing reads (`docs/load.md`).
//!
//! `step` is pure: the control loop (in the server) reads the feeds and calls it once per
//! interval per endpoint; routing only reads `LoadTable`, one relaxed atomic load a slot.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::profile::Profile;

/// Below this previous share, the utilisation says too little about the endpoint at full
/// share (it takes almost nothing), so the watermark rule is applied to it directly.
pub const MIN_ESTIMATE_SHARE: f64 = 0.05;

/// The top-level `load:` rules.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadRules {
    /// One control step per interval; pulled feeds are read once per step.
    pub interval: Duration,
    /// Utilisation at or below which an endpoint takes its full share.
    pub low: f64,
    /// Utilisation at or above which the watermark rule gives 0 and the endpoint is
    /// flagged above high.
    pub high: f64,
    /// The most an effective share moves in one step.
    pub max_step: f64,
    /// Target moves smaller than this are ignored.
    pub deadband: f64,
    /// A reading older than this is stale.
    pub stale_after: Duration,
    pub on_stale: OnStale,
    /// Per pulled feed request.
    pub timeout: Duration,
}

impl Default for LoadRules {
    fn default() -> LoadRules {
        LoadRules {
            interval: Duration::from_secs(5),
            low: 0.7,
            high: 0.9,
            max_step: 0.1,
            deadband: 0.02,
            stale_after: Duration::from_secs(15),
            on_stale: OnStale::Ignore,
            timeout: Duration::from_secs(2),
        }
    }
}

/// What a stale reading means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnStale {
    /// As if there were no feed: the share returns to 1 (by `max_step` a step).
    Ignore,
    /// As if overloaded: target 0 and above high.
    Overloaded,
}

impl OnStale {
    pub fn as_str(self) -> &'static str {
        match self {
            OnStale::Ignore => "ignore",
            OnStale::Overloaded => "overloaded",
        }
    }
}

/// An endpoint's `load:`: where its load comes from and what it can take.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadFeed {
    /// utilisation = load / capacity (> 0, finite).
    pub capacity: f64,
    pub source: FeedSource,
    /// Watermarks (the top-level ones unless the endpoint sets its own).
    pub low: f64,
    pub high: f64,
}

/// Where an endpoint's load is read.
#[derive(Clone, Debug, PartialEq)]
pub enum FeedSource {
    /// Pulled: a JSON body, the number at `pointer` (RFC 6901) or the body itself.
    Json { url: String, pointer: Option<String> },
    /// Pulled: one sample of a Prometheus text exposition.
    Prometheus { url: String, metric: MetricSelector },
    /// Only through the admin API.
    Pushed,
}

/// A Prometheus sample selector: a metric name and equality label matchers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricSelector {
    pub name: String,
    pub labels: Vec<(String, String)>,
}

impl std::fmt::Display for MetricSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)?;
        if !self.labels.is_empty() {
            f.write_str("{")?;
            for (i, (k, v)) in self.labels.iter().enumerate() {
                let sep = if i == 0 { "" } else { "," };
                write!(f, "{sep}{k}={v:?}")?;
            }
            f.write_str("}")?;
        }
        Ok(())
    }
}

/// What the control loop knows of one endpoint at a step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reading {
    Fresh { load: f64 },
    Stale,
    NoFeed,
}

/// One endpoint's controller state (pure data; also what etcd carries in a cluster).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EndpointLoad {
    /// The last fresh load read, if the last reading was fresh.
    pub load: Option<f64>,
    pub utilisation: Option<f64>,
    /// The share the rules aim at.
    pub target: f64,
    /// The effective share, 0..=1, moved toward `target` by at most `max_step` a step.
    pub share: f64,
    pub stale: bool,
    pub above_high: bool,
}

impl EndpointLoad {
    /// Full share, nothing read: where every endpoint starts.
    pub const FULL: EndpointLoad = EndpointLoad {
        load: None,
        utilisation: None,
        target: 1.0,
        share: 1.0,
        stale: false,
        above_high: false,
    };
}

/// The watermark rule g(u): 1 at or below `low`, 0 at or above `high`, linear between.
pub fn watermark(low: f64, high: f64, u: f64) -> f64 {
    if u <= low {
        1.0
    } else if u >= high {
        0.0
    } else {
        (high - u) / (high - low)
    }
}

/// The share at which share = g(k · share), for an endpoint that would run at
/// utilisation `k` with its full share: 1 when k ≤ low, else high / (high − low + k).
pub fn fixed_point(low: f64, high: f64, k: f64) -> f64 {
    if k <= low { 1.0 } else { (high / (high - low + k)).clamp(0.0, 1.0) }
}

/// One control step for one endpoint (pure, deterministic).
pub fn step(
    rules: &LoadRules,
    feed: &LoadFeed,
    prev: &EndpointLoad,
    reading: Reading,
) -> EndpointLoad {
    let (low, high) = (feed.low, feed.high);
    let (load, utilisation, target, stale, above_high) = match reading {
        Reading::NoFeed => return EndpointLoad::FULL,
        Reading::Fresh { load } if load.is_finite() => {
            let load = load.max(0.0);
            let u = load / feed.capacity;
            let above_high = u >= high;
            let target = if prev.above_high && !prev.stale && !above_high {
                // Routing gave it no new answers while it was above high, so this reading
                // shows the endpoint without its share: it says nothing new about k.
                prev.target
            } else if prev.share >= MIN_ESTIMATE_SHARE {
                fixed_point(low, high, u / prev.share)
            } else {
                watermark(low, high, u)
            };
            (Some(load), Some(u), target, false, above_high)
        }
        // A load that is not a number is no reading at all.
        Reading::Fresh { .. } | Reading::Stale => match rules.on_stale {
            OnStale::Ignore => (None, None, 1.0, true, false),
            OnStale::Overloaded => (None, None, 0.0, true, true),
        },
    };
    let share = approach(prev.share, target, rules);
    EndpointLoad { load, utilisation, target, share, stale, above_high }
}

/// `share` moved toward `target` by at most `max_step`, and not at all within `deadband`.
/// A target of exactly 0 or 1 is always reached (the deadband would otherwise keep a share
/// just short of full or of none for good).
fn approach(share: f64, target: f64, rules: &LoadRules) -> f64 {
    let diff = target - share;
    let at_end = target == 0.0 || target == 1.0;
    if diff == 0.0 || (diff.abs() < rules.deadband && !at_end) {
        return share;
    }
    let moved = share + diff.clamp(-rules.max_step, rules.max_step);
    moved.clamp(0.0, 1.0)
}

/// One slot of the table: the share (u16 fixed point, 65535 = 1.0) and the above-high flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    pub fraction: u16,
    pub above_high: bool,
}

impl Share {
    pub const FULL: Share = Share { fraction: u16::MAX, above_high: false };

    /// `share` (clamped to 0..=1) in fixed point.
    pub fn of(share: f64, above_high: bool) -> Share {
        let s = if share.is_nan() { 1.0 } else { share.clamp(0.0, 1.0) };
        Share { fraction: (s * f64::from(u16::MAX)).round() as u16, above_high }
    }

    pub fn as_f64(self) -> f64 {
        f64::from(self.fraction) / f64::from(u16::MAX)
    }

    pub fn is_full(self) -> bool {
        self == Share::FULL
    }

    fn pack(self) -> u32 {
        u32::from(self.fraction) | (u32::from(self.above_high) << 16)
    }

    fn unpack(v: u32) -> Share {
        Share { fraction: v as u16, above_high: v & (1 << 16) != 0 }
    }
}

/// The lock-free table routing reads: one share per health slot.
#[derive(Debug)]
pub struct LoadTable {
    slots: Box<[AtomicU32]>,
}

impl LoadTable {
    /// `len` slots, all full.
    pub fn new(len: usize) -> LoadTable {
        LoadTable { slots: (0..len).map(|_| AtomicU32::new(Share::FULL.pack())).collect() }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Sets a slot (ignored past the end: a step computed for an older snapshot).
    pub fn set(&self, slot: usize, share: f64, above_high: bool) {
        if let Some(s) = self.slots.get(slot) {
            s.store(Share::of(share, above_high).pack(), Ordering::Relaxed);
        }
    }

    /// A slot's share; full past the end.
    #[inline]
    pub fn get(&self, slot: usize) -> Share {
        self.slots.get(slot).map_or(Share::FULL, |s| Share::unpack(s.load(Ordering::Relaxed)))
    }

    /// The table of a new configuration, `len` slots: each endpoint with a load feed keeps
    /// the share it had in `prev` (found by profile and endpoint name); every other slot is
    /// full, so a removed endpoint's share is gone and a new one starts full.
    pub fn carried_over(
        len: usize,
        profiles: &[Arc<Profile>],
        prev: Option<(&[Arc<Profile>], &LoadTable)>,
    ) -> LoadTable {
        let table = LoadTable::new(len);
        let Some((prev_profiles, prev_table)) = prev else { return table };
        if !profiles.iter().flat_map(|p| &p.endpoints).any(|e| e.load.is_some()) {
            return table;
        }
        let by_name: crate::FastMap<&str, &Profile> =
            prev_profiles.iter().map(|p| (p.name.as_str(), &**p)).collect();
        for p in profiles {
            let Some(old) = by_name.get(p.name.as_str()) else { continue };
            for ep in p.endpoints.iter().filter(|e| e.load.is_some()) {
                let old_slot =
                    old.endpoints.iter().find(|o| o.name == ep.name).and_then(|o| o.health_slot);
                if let (Some(slot), Some(old_slot)) = (ep.health_slot, old_slot) {
                    let s = prev_table.get(old_slot);
                    table.set(slot, s.as_f64(), s.above_high);
                }
            }
        }
        table
    }
}
