//! The query path's counters: what was asked and answered, counted in relaxed atomics in
//! dense arrays that belong to the snapshot (indexed by profile, zone and health slot — no
//! hashing, no lock). The admin API reads them to render metrics.

use std::sync::atomic::{AtomicU64, Ordering};

use arrayvec::ArrayVec;

use super::profile::{MAX_ANSWERS, ProfileId};
use crate::wire::cookie::Verdict;
use crate::wire::{Rcode, Rtype};

/// What was asked and answered, for metrics: the shell counts it after the reply is sent,
/// so the responder itself stays free of side effects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Zone index, when the name is in one of ours.
    pub zone: Option<usize>,
    /// Profile index, when the name is a profile.
    pub profile: Option<usize>,
    pub qtype: Rtype,
    /// Full (extended) RCODE of the reply.
    pub rcode: Rcode,
    /// The query carried an EDNS Client Subnet option.
    pub ecs: bool,
    /// How the server cookie of the query's COOKIE option checked out; `None` without one.
    pub cookie: Option<Verdict>,
    /// Health slots of the endpoints in the answer.
    pub endpoints: ArrayVec<usize, MAX_ANSWERS>,
}

impl Outcome {
    /// The query carried a server cookie we made: its source address is proven.
    pub fn proven_source(&self) -> bool {
        self.cookie == Some(Verdict::Valid)
    }
}

/// Queries by what their COOKIE option held, in the order of `QueryCounters::cookies`.
const COOKIE_KINDS: usize = 4;

fn cookie_index(c: Option<Verdict>) -> usize {
    match c {
        None => 0,
        Some(Verdict::ClientOnly) => 1,
        Some(Verdict::Valid) => 2,
        Some(Verdict::Invalid) => 3,
    }
}

/// Query types kept apart in `steerdns_queries_total`; the rest are `other`.
const QTYPES: [Rtype; 4] = [Rtype::A, Rtype::AAAA, Rtype::CNAME, Rtype::ANY];
/// RCODEs kept apart; the rest are `other`.
const RCODES: [Rcode; 5] =
    [Rcode::NOERROR, Rcode::NXDOMAIN, Rcode::REFUSED, Rcode::FORMERR, Rcode::NOTIMP];
/// Columns per kept value, plus one for `other`.
const QTYPE_COLUMNS: usize = QTYPES.len() + 1;
const RCODE_COLUMNS: usize = RCODES.len() + 1;

fn qtype_index(t: Rtype) -> usize {
    QTYPES.iter().position(|&k| k == t).unwrap_or(QTYPES.len())
}

fn rcode_index(r: Rcode) -> usize {
    RCODES.iter().position(|&k| k == r).unwrap_or(RCODES.len())
}

const CELLS: usize = QTYPE_COLUMNS * RCODE_COLUMNS;

/// The counters of one snapshot. Rows: each profile, then each zone (names in the zone
/// that are not profiles), then one row for queries outside every zone.
#[derive(Debug)]
pub struct QueryCounters {
    profiles: usize,
    zones: usize,
    queries: Box<[AtomicU64]>,
    answers: Box<[AtomicU64]>,
    ecs: [AtomicU64; 2],
    cookies: [AtomicU64; COOKIE_KINDS],
}

fn zeroed(n: usize) -> Box<[AtomicU64]> {
    (0..n).map(|_| AtomicU64::new(0)).collect()
}

impl QueryCounters {
    pub fn new(profiles: usize, zones: usize, slots: usize) -> QueryCounters {
        QueryCounters {
            profiles,
            zones,
            queries: zeroed((profiles + zones + 1) * CELLS),
            answers: zeroed(slots),
            ecs: [AtomicU64::new(0), AtomicU64::new(0)],
            cookies: Default::default(),
        }
    }

    fn row(&self, o: &Outcome) -> usize {
        match (o.profile, o.zone) {
            (Some(p), _) => p,
            (None, Some(z)) => self.profiles + z,
            (None, None) => self.profiles + self.zones,
        }
    }

    /// Counts one answered query. Relaxed atomics: totals only, no ordering needed.
    pub fn record(&self, o: &Outcome) {
        self.add(Cell::Query(self.cell(o)), 1);
        for &slot in &o.endpoints {
            self.add(Cell::Answer(slot), 1);
        }
        self.ecs[usize::from(o.ecs)].fetch_add(1, Ordering::Relaxed);
        self.cookies[cookie_index(o.cookie)].fetch_add(1, Ordering::Relaxed);
    }

    fn cell(&self, o: &Outcome) -> usize {
        self.row(o) * CELLS + qtype_index(o.qtype) * RCODE_COLUMNS + rcode_index(o.rcode)
    }

    fn add(&self, cell: Cell, n: u64) {
        let counter = match cell {
            Cell::Query(i) => self.queries.get(i),
            Cell::Answer(slot) => self.answers.get(slot),
        };
        if let Some(c) = counter {
            c.fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// Which row of the query counters a count belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Row {
    Profile(ProfileId),
    /// Names of this zone that are not profiles.
    Zone(usize),
    /// Queries outside every zone.
    Outside,
}

/// One non-zero cell of the query counters. `None` stands for every other type or code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueryCount {
    pub row: Row,
    pub qtype: Option<Rtype>,
    pub rcode: Option<Rcode>,
    pub count: u64,
}

impl QueryCounters {
    /// The non-zero query counts.
    pub fn queries(&self) -> impl Iterator<Item = QueryCount> + '_ {
        self.queries.iter().enumerate().filter_map(|(cell, n)| {
            let count = n.load(Ordering::Relaxed);
            let (row, rest) = (cell / CELLS, cell % CELLS);
            let row = match row {
                r if r < self.profiles => Row::Profile(r),
                r if r < self.profiles + self.zones => Row::Zone(r - self.profiles),
                _ => Row::Outside,
            };
            let qtype = QTYPES.get(rest / RCODE_COLUMNS).copied();
            let rcode = RCODES.get(rest % RCODE_COLUMNS).copied();
            (count > 0).then_some(QueryCount { row, qtype, rcode, count })
        })
    }

    /// Every query counted for profile `id`, whatever its type and code (0 for an
    /// unknown id): one row, so the admin API's per-profile figures stay cheap.
    pub fn profile_queries(&self, id: ProfileId) -> u64 {
        if id >= self.profiles {
            return 0;
        }
        let row = &self.queries[id * CELLS..(id + 1) * CELLS];
        row.iter().map(|n| n.load(Ordering::Relaxed)).sum()
    }

    /// How often the endpoint in health slot `slot` was in an answer.
    pub fn answers(&self, slot: usize) -> u64 {
        self.answers.get(slot).map_or(0, |n| n.load(Ordering::Relaxed))
    }

    /// Queries without and with an EDNS Client Subnet option.
    pub fn ecs(&self) -> [u64; 2] {
        [self.ecs[0].load(Ordering::Relaxed), self.ecs[1].load(Ordering::Relaxed)]
    }

    /// Queries without a COOKIE option, then with one whose server cookie was missing
    /// (client cookie only), valid, and invalid.
    pub fn cookies(&self) -> [u64; COOKIE_KINDS] {
        self.cookies.each_ref().map(|n| n.load(Ordering::Relaxed))
    }
}

/// A counter of `QueryCounters`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cell {
    Query(usize),
    Answer(usize),
}

/// Cells a tally holds (a power of two): a direct-mapped table, so counting a query is one
/// index computation, not a search.
const TALLY_CELLS: usize = 64;

/// The counts of one batch of queries, added to a snapshot's counters in one go. Worker
/// threads share the counters, and every query bumps the same few hot cells (its profile's
/// row, the ECS counter); summing a batch first turns those into one atomic add each, so
/// the cache lines move between cores once per batch instead of once per query.
#[derive(Debug)]
pub struct Tally {
    /// `(cell, count)`; a count of 0 marks a free entry.
    cells: [(Cell, u64); TALLY_CELLS],
    ecs: [u64; 2],
    cookies: [u64; COOKIE_KINDS],
}

impl Default for Tally {
    fn default() -> Self {
        Tally { cells: [(Cell::Query(0), 0); TALLY_CELLS], ecs: [0; 2], cookies: [0; COOKIE_KINDS] }
    }
}

impl Tally {
    /// Counts `o`; `counters` must be the ones `flush` will get (the same snapshot).
    pub fn add(&mut self, counters: &QueryCounters, o: &Outcome) {
        self.bump(counters, Cell::Query(counters.cell(o)));
        for &slot in &o.endpoints {
            self.bump(counters, Cell::Answer(slot));
        }
        self.ecs[usize::from(o.ecs)] += 1;
        self.cookies[cookie_index(o.cookie)] += 1;
    }

    /// A cell whose entry another cell holds adds that one to the counters first.
    fn bump(&mut self, counters: &QueryCounters, cell: Cell) {
        let key = match cell {
            Cell::Query(i) => i << 1,
            Cell::Answer(s) => s << 1 | 1,
        };
        let at = (key as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - TALLY_CELLS.ilog2());
        let entry = &mut self.cells[at as usize];
        if entry.1 > 0 && entry.0 != cell {
            counters.add(entry.0, entry.1);
            entry.1 = 0;
        }
        entry.0 = cell;
        entry.1 += 1;
    }

    /// Adds everything counted so far to `counters` and starts over.
    pub fn flush(&mut self, counters: &QueryCounters) {
        for entry in self.cells.iter_mut().filter(|e| e.1 > 0) {
            counters.add(entry.0, std::mem::take(&mut entry.1));
        }
        let sums = counters.ecs.iter().zip(&mut self.ecs);
        for (c, n) in sums.chain(counters.cookies.iter().zip(&mut self.cookies)) {
            if *n > 0 {
                c.fetch_add(std::mem::take(n), Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(profile: Option<usize>, rcode: Rcode, ecs: bool, endpoints: &[usize]) -> Outcome {
        Outcome {
            zone: Some(0),
            profile,
            qtype: Rtype::A,
            rcode,
            ecs,
            cookie: None,
            endpoints: endpoints.iter().copied().collect(),
        }
    }

    type Values = (Vec<u64>, Vec<u64>, [u64; 2], [u64; COOKIE_KINDS]);

    fn values(c: &QueryCounters) -> Values {
        let load = |v: &[AtomicU64]| v.iter().map(|a| a.load(Ordering::Relaxed)).collect();
        (load(&c.queries), load(&c.answers), c.ecs(), c.cookies())
    }

    #[test]
    fn a_tally_adds_up_to_what_recording_each_query_does() {
        // 300 profiles and slots: far more distinct cells than a tally holds at once.
        let outcomes: Vec<Outcome> = (0..5000usize)
            .map(|i| {
                let p = (i * 7919) % 300;
                let cookie = [None, Some(Verdict::ClientOnly), Some(Verdict::Valid)][i % 3];
                let cookie = if i % 7 == 0 { Some(Verdict::Invalid) } else { cookie };
                Outcome {
                    cookie,
                    ..outcome(
                        Some(p).filter(|_| i % 5 != 0),
                        [Rcode::NOERROR, Rcode::NXDOMAIN, Rcode::REFUSED][i % 3],
                        i % 2 == 0,
                        &[p, 299 - p],
                    )
                }
            })
            .collect();
        let (direct, tallied) = (QueryCounters::new(300, 1, 300), QueryCounters::new(300, 1, 300));
        let mut tally = Tally::default();
        for (i, o) in outcomes.iter().enumerate() {
            direct.record(o);
            tally.add(&tallied, o);
            if i % 32 == 31 {
                tally.flush(&tallied);
            }
        }
        tally.flush(&tallied);
        assert_eq!(values(&tallied), values(&direct));
        let per_profile: u64 = (0..300).map(|p| direct.profile_queries(p)).sum();
        let counted: u64 = direct.queries().map(|q| q.count).sum();
        let outside_profiles = outcomes.iter().filter(|o| o.profile.is_none()).count() as u64;
        assert_eq!(per_profile, counted - outside_profiles);
        assert_eq!(direct.profile_queries(300), 0);
        assert_eq!(values(&direct).2, [2500, 2500]);
        assert_eq!(values(&direct).3.iter().sum::<u64>(), 5000);
        assert!(values(&direct).3.iter().all(|n| *n > 0), "{:?}", values(&direct).3);
    }
}
