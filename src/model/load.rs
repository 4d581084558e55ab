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

/// The k (utilisation at full share) a fixed-point target implies: the inverse of
/// `fixed_point` where it is one to one (a target strictly between 0 and 1).
fn held_k(low: f64, high: f64, target: f64) -> Option<f64> {
    (target > 0.0 && target < 1.0).then(|| high / target - (high - low))
}

/// One control step for one endpoint (pure, deterministic).
pub fn step(
    rules: &LoadRules,
    feed: &LoadFeed,
    prev: &EndpointLoad,
    reading: Reading,
) -> EndpointLoad {
    let (low, high) = (feed.low, feed.high);
    // Idle: routing gave the endpoint no new answers while it was above high, so this
    // reading shows it without its share and says nothing new about k.
    let mut idle = false;
    let (load, utilisation, target, stale, above_high) = match reading {
        Reading::NoFeed => return EndpointLoad::FULL,
        Reading::Fresh { load } if load.is_finite() => {
            let load = load.max(0.0);
            let u = load / feed.capacity;
            let above_high = u >= high;
            idle = prev.above_high && !prev.stale && !above_high;
            let target = if idle {
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
    // An idle endpoint stays above high while its new share would still put it there (by
    // the k its held target implies): coming back for one step at a share that overloads
    // it, then leaving again, would make its traffic flap on and off while the share falls.
    let above_high = if idle {
        held_k(low, high, target).is_some_and(|k| k * share >= high)
    } else {
        above_high
    };
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

#[cfg(test)]
mod tests {
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    fn feed(capacity: f64) -> LoadFeed {
        LoadFeed { capacity, source: FeedSource::Pushed, low: 0.7, high: 0.9 }
    }

    fn at(share: f64) -> EndpointLoad {
        EndpointLoad { share, target: share, ..EndpointLoad::FULL }
    }

    /// Every branch of the rule, on capacity 100 with low 0.7, high 0.9, max_step 0.1 and
    /// deadband 0.02 unless the case says otherwise. Expected targets are worked by hand
    /// from high / (high − low + k).
    #[test]
    fn step_follows_the_rule_in_every_branch() {
        struct Case {
            what: &'static str,
            rules: LoadRules,
            prev: EndpointLoad,
            reading: Reading,
            // (target, share, stale, above_high)
            want: (f64, f64, bool, bool),
        }
        let d = LoadRules::default;
        let with = |f: fn(&mut LoadRules)| {
            let mut r = LoadRules::default();
            f(&mut r);
            r
        };
        let fresh = |load| Reading::Fresh { load };
        let held = EndpointLoad { above_high: true, ..at(0.8) };
        let held = EndpointLoad { target: 0.5294, ..held };
        let cases = [
            Case {
                what: "below low",
                rules: d(),
                prev: at(1.0),
                reading: fresh(50.0),
                want: (1.0, 1.0, false, false),
            },
            Case {
                what: "below low, share returns",
                rules: d(),
                prev: at(0.5),
                reading: fresh(20.0),
                want: (1.0, 0.6, false, false),
            },
            Case {
                what: "between: k 0.8",
                rules: d(),
                prev: at(1.0),
                reading: fresh(80.0),
                want: (0.9, 0.9, false, false),
            },
            Case {
                what: "between, at the fixed point",
                rules: d(),
                prev: at(0.9),
                reading: fresh(72.0),
                want: (0.9, 0.9, false, false),
            },
            Case {
                what: "above high: k 1.5",
                rules: d(),
                prev: at(1.0),
                reading: fresh(150.0),
                want: (0.9 / 1.7, 0.9, false, true),
            },
            Case {
                what: "above high at half share: k 2",
                rules: d(),
                prev: at(0.5),
                reading: fresh(100.0),
                want: (0.9 / 2.2, 0.409090909, false, true),
            },
            Case {
                what: "after above high, target held; still above high at the new share",
                rules: d(),
                prev: held.clone(),
                reading: fresh(10.0),
                // k = 0.9 / 0.5294 - 0.2 = 1.5, and 1.5 × 0.7 = 1.05 ≥ high.
                want: (0.5294, 0.7, false, true),
            },
            Case {
                what: "after above high, target held; back below high at the new share",
                rules: d(),
                prev: EndpointLoad { share: 0.6, ..held },
                reading: fresh(10.0),
                // 1.5 × 0.5294 = 0.794 < high: it takes answers again.
                want: (0.5294, 0.5294, false, false),
            },
            Case {
                what: "stale, ignore",
                rules: d(),
                prev: at(0.5),
                reading: Reading::Stale,
                want: (1.0, 0.6, true, false),
            },
            Case {
                what: "stale, overloaded",
                rules: with(|r| r.on_stale = OnStale::Overloaded),
                prev: at(0.5),
                reading: Reading::Stale,
                want: (0.0, 0.4, true, true),
            },
            Case {
                what: "not a number is stale",
                rules: d(),
                prev: at(0.5),
                reading: fresh(f64::NAN),
                want: (1.0, 0.6, true, false),
            },
            Case {
                what: "negative load is none",
                rules: d(),
                prev: at(0.5),
                reading: fresh(-5.0),
                want: (1.0, 0.6, false, false),
            },
            Case {
                what: "deadband: 0.03 below target, 0.05 band",
                rules: with(|r| r.deadband = 0.05),
                prev: at(0.93),
                reading: fresh(74.4),
                want: (0.9, 0.93, false, false),
            },
            Case {
                what: "deadband: 0.03 below target, 0.02 band",
                rules: d(),
                prev: at(0.93),
                reading: fresh(74.4),
                want: (0.9, 0.9, false, false),
            },
            Case {
                what: "deadband never keeps a share short of full",
                rules: d(),
                prev: at(0.99),
                reading: fresh(10.0),
                want: (1.0, 1.0, false, false),
            },
            Case {
                what: "max_step limits a fall",
                rules: d(),
                prev: at(1.0),
                reading: fresh(300.0),
                want: (0.28125, 0.9, false, true),
            },
            Case {
                what: "max_step 1 sheds at once",
                rules: with(|r| r.max_step = 1.0),
                prev: at(1.0),
                reading: fresh(300.0),
                want: (0.28125, 0.28125, false, true),
            },
            Case {
                what: "share below 0.05: g(u) below low",
                rules: d(),
                prev: at(0.04),
                reading: fresh(2.0),
                want: (1.0, 0.14, false, false),
            },
            Case {
                what: "share below 0.05: g(u) between",
                rules: d(),
                prev: at(0.04),
                reading: fresh(80.0),
                want: (0.5, 0.14, false, false),
            },
            Case {
                what: "share below 0.05: g(u) above high",
                rules: d(),
                prev: at(0.04),
                reading: fresh(95.0),
                want: (0.0, 0.0, false, true),
            },
        ];
        for c in cases {
            let got = step(&c.rules, &feed(100.0), &c.prev, c.reading);
            let (target, share, stale, above_high) = c.want;
            let ok = (got.target - target).abs() < 1e-4
                && (got.share - share).abs() < 1e-4
                && got.stale == stale
                && got.above_high == above_high;
            assert!(ok, "{}: got {got:?}, want {:?}", c.what, c.want);
            match c.reading {
                Reading::Fresh { load } if load.is_finite() => {
                    assert_eq!(got.load, Some(load.max(0.0)), "{}", c.what);
                    assert_eq!(got.utilisation, Some(load.max(0.0) / 100.0), "{}", c.what);
                }
                _ => assert_eq!((got.load, got.utilisation), (None, None), "{}", c.what),
            }
        }
        let loaded = EndpointLoad { above_high: true, ..at(0.2) };
        assert_eq!(step(&d(), &feed(100.0), &loaded, Reading::NoFeed), EndpointLoad::FULL);
    }

    /// The target is the fixed point of the watermark rule: share = g(k · share), for any
    /// watermarks and any utilisation at full share (a seeded search over random values).
    #[test]
    fn the_target_is_the_watermark_rules_fixed_point() {
        let mut rng = SmallRng::seed_from_u64(6901);
        for _ in 0..100_000 {
            let low = rng.random_range(0.0..9.9);
            let high = rng.random_range(low + 0.001..=10.0);
            let k = rng.random_range(0.0..30.0);
            let s = fixed_point(low, high, k);
            assert!((0.0..=1.0).contains(&s));
            let g = watermark(low, high, k * s);
            assert!((s - g).abs() < 1e-9, "low {low} high {high} k {k}: s {s}, g(k s) {g}");
        }
    }

    /// What the controller does over time against a plant whose utilisation follows the
    /// share: a demand, per step, and the loads each endpoint reports for the shares.
    fn simulate(
        rules: &LoadRules,
        feeds: &[LoadFeed],
        demand: &[f64],
        plant: impl Fn(f64, &[f64]) -> Vec<f64>,
    ) -> Vec<Vec<f64>> {
        let mut state = vec![EndpointLoad::FULL; feeds.len()];
        let mut shares = Vec::new();
        for &d in demand {
            let now: Vec<f64> = state.iter().map(|s| s.share).collect();
            let loads = plant(d, &now);
            for ((s, f), load) in state.iter_mut().zip(feeds).zip(loads) {
                *s = step(rules, f, s, Reading::Fresh { load });
            }
            shares.push(now);
        }
        shares
    }

    /// After each change of demand (at `starts`), the share settles within
    /// ceil(|Δ| / max_step) + 2 steps of the change to within `band` of `settled`, never
    /// passes it by more than `band`, and changes direction at most once.
    fn assert_settles(
        rules: &LoadRules,
        band: f64,
        series: &[f64],
        starts: &[usize],
        settled: &[f64],
    ) {
        for (seg, (&start, &target)) in starts.iter().zip(settled).enumerate() {
            let end = starts.get(seg + 1).copied().unwrap_or(series.len());
            let part = &series[start..end];
            let from = part[0];
            let bound = ((target - from).abs() / rules.max_step - 1e-9).ceil() as usize + 2;
            let settle = part.iter().position(|s| (s - target).abs() <= band);
            let settle = settle.unwrap_or_else(|| panic!("segment {seg} never settles: {part:?}"));
            assert!(settle <= bound, "segment {seg}: settles after {settle} > {bound}: {part:?}");
            assert!(
                part[settle..].iter().all(|s| (s - target).abs() <= band),
                "segment {seg} leaves {target} after settling: {part:?}"
            );
            let over = part.iter().map(|s| if target < from { target - s } else { s - target });
            let overshoot = over.fold(0.0, f64::max);
            assert!(overshoot <= band + 1e-9, "segment {seg}: overshoot {overshoot}: {part:?}");
            let moves: Vec<f64> =
                part.windows(2).map(|w| w[1] - w[0]).filter(|d| d.abs() > 1e-12).collect();
            let turns = moves.windows(2).filter(|m| m[0].signum() != m[1].signum()).count();
            assert!(turns <= 1, "segment {seg}: {turns} changes of direction: {part:?}");
        }
    }

    /// One endpoint, utilisation = demand · share / capacity, demand stepping up and down.
    #[test]
    fn one_endpoint_settles_without_oscillating() {
        let rules = LoadRules::default();
        let f = feed(1000.0);
        let (changes, levels) = ([0, 10, 30, 50, 70], [500.0, 1500.0, 2500.0, 1200.0, 600.0]);
        let mut demand = Vec::new();
        for (i, &d) in levels.iter().enumerate() {
            let until = changes.get(i + 1).copied().unwrap_or(90);
            demand.resize(until, d);
        }
        let shares = simulate(&rules, std::slice::from_ref(&f), &demand, |d, s| vec![d * s[0]]);
        let series: Vec<f64> = shares.iter().map(|s| s[0]).collect();
        // The fixed point with k = demand / capacity, worked by hand.
        let settled = [1.0, 0.9 / 1.7, 0.9 / 2.7, 0.9 / 1.4, 1.0];
        assert_settles(&rules, rules.deadband, &series, &changes, &settled);
        for (&start, &s) in changes.iter().zip(&settled) {
            assert!((fixed_point(f.low, f.high, demand[start] / 1000.0) - s).abs() < 1e-12);
        }
    }

    /// Two endpoints sharing one demand through weighted routing (effective weight =
    /// weight × share): `a` (capacity 1000) sheds to `b` (capacity 3000), which stays below
    /// low. The settled share of `a` is the plant's own fixed point, found by bisection.
    #[test]
    fn two_weighted_endpoints_settle_on_the_plants_fixed_point() {
        let rules = LoadRules::default();
        let feeds = [feed(1000.0), feed(3000.0)];
        let (changes, levels) = ([0, 10, 30, 50], [1000.0, 1800.0, 2600.0, 1300.0]);
        let mut demand = Vec::new();
        for (i, &d) in levels.iter().enumerate() {
            demand.resize(changes.get(i + 1).copied().unwrap_or(70), d);
        }
        let plant = |d: f64, s: &[f64]| {
            let total = s[0] + s[1];
            vec![d * s[0] / total, d * s[1] / total]
        };
        let shares = simulate(&rules, &feeds, &demand, plant);
        // a's share s solves s = g(u_a) with u_a = d · s / (s + 1) / 1000 (b at share 1).
        let fixed = |d: f64| {
            let f = |s: f64| s - watermark(0.7, 0.9, d * s / (s + 1.0) / 1000.0);
            let (mut lo, mut hi) = (0.0, 1.0);
            if f(hi) <= 0.0 {
                return 1.0;
            }
            for _ in 0..100 {
                let mid = (lo + hi) / 2.0;
                if f(mid) > 0.0 { hi = mid } else { lo = mid }
            }
            lo
        };
        let settled: Vec<f64> = levels.iter().map(|&d| fixed(d)).collect();
        let a: Vec<f64> = shares.iter().map(|s| s[0]).collect();
        // The controller's k = u / share assumes a's traffic follows its share alone; here
        // shedding also shrinks the total weight, so a's utilisation falls less than in
        // proportion, and the deadband (which stops the share once its target is that
        // close) leaves it up to deadband / (1 − d target / d share) ≈ 1.4 deadbands from
        // the plant's fixed point at these demands.
        assert_settles(&rules, 2.0 * rules.deadband, &a, &changes, &settled);
        assert!(shares.iter().all(|s| s[1] == 1.0), "b never sheds: {shares:?}");
        assert!(settled[1] < 0.9 && settled[2] < settled[1], "the demands load a: {settled:?}");
    }

    /// The worked example of docs/load.md: capacity 1000, demand 1500 at full share.
    #[test]
    fn the_documented_example_holds() {
        let rules = LoadRules::default();
        let f = feed(1000.0);
        let mut state = EndpointLoad::FULL;
        let mut rows = Vec::new();
        for _ in 0..6 {
            let load = 1500.0 * state.share;
            state = step(&rules, &f, &state, Reading::Fresh { load });
            let r = |x: f64| (x * 100.0).round() / 100.0;
            rows.push((r(load / 1000.0), state.above_high, r(state.target), r(state.share)));
        }
        let want = [
            (1.5, true, 0.53, 0.9),
            (1.35, true, 0.53, 0.8),
            (1.2, true, 0.53, 0.7),
            (1.05, true, 0.53, 0.6),
            (0.9, true, 0.53, 0.53),
            (0.79, false, 0.53, 0.53),
        ];
        assert_eq!(rows, want);
    }

    #[test]
    fn the_table_packs_share_and_flag() {
        let t = LoadTable::new(3);
        assert!((0..3).all(|i| t.get(i).is_full()));
        t.set(1, 0.25, true);
        t.set(2, 1.5, false);
        t.set(7, 0.5, false);
        assert_eq!(t.get(1), Share { fraction: 16384, above_high: true });
        assert!((t.get(1).as_f64() - 0.25).abs() < 1e-4);
        assert!(t.get(2).is_full(), "clamped to 1");
        assert!(t.get(7).is_full(), "past the end: full");
        t.set(0, 0.0, false);
        assert_eq!(t.get(0), Share { fraction: 0, above_high: false });
    }
}
