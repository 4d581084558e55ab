//! The table of open DNS TCP connections, shared by every TCP listener: it enforces the
//! connection cap and the per-source cap, and picks the connection to evict when full.
//!
//! When the table is full a newcomer evicts the connection that has been idle longest
//! (as gdnsd does) instead of being refused: otherwise whoever opened the most connections
//! first keeps the service to themselves. The table is locked only when a connection opens
//! or closes; queries only store their time into their own connection's atomic.
//!
//! The longest-idle connection is found through an index ordered by (activity, id) that is
//! updated lazily: a query does not touch it, and eviction re-files the oldest entry whose
//! connection has been active since it was filed until it finds one that has not. Each
//! re-filing stands for at least one query, so eviction costs O(log n) per query and per
//! admission (amortised) instead of a scan of the whole table under the shared lock.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tokio_util::sync::CancellationToken;

/// Where a connection comes from, for the per-source cap: an IPv4 address, or the /64 of
/// an IPv6 address (one host usually holds a whole /64).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    V4(u32),
    V6(u64),
}

impl Source {
    pub fn of(ip: IpAddr) -> Source {
        match ip {
            IpAddr::V4(v4) => Source::V4(u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source::V4(u32::from(v4)),
                None => Source::V6((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

/// One open connection, as the table and the connection's task share it.
#[derive(Debug)]
pub struct Conn {
    id: u64,
    source: Source,
    /// When the connection last completed a query, in ms since the table's epoch.
    active_ms: AtomicU64,
    /// Fired when the table evicts this connection.
    pub evicted: CancellationToken,
}

/// Why a connection was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Its source already holds `per_source` connections.
    PerSource,
}

#[derive(Debug)]
pub struct Conns {
    max: usize,
    per_source: usize,
    epoch: Instant,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    /// Each open connection and the activity time it is filed under in `idle`.
    open: HashMap<u64, (Arc<Conn>, u64)>,
    /// (activity when filed, id) of every open connection; a filed time is never later
    /// than the connection's real last activity.
    idle: BTreeSet<(u64, u64)>,
    by_source: HashMap<Source, usize>,
}

impl Inner {
    fn insert(&mut self, conn: Arc<Conn>) {
        let (id, active) = (conn.id, conn.active_ms.load(Ordering::Relaxed));
        *self.by_source.entry(conn.source).or_insert(0) += 1;
        self.idle.insert((active, id));
        self.open.insert(id, (conn, active));
    }

    fn remove(&mut self, id: u64) -> Option<Arc<Conn>> {
        let (conn, filed) = self.open.remove(&id)?;
        self.idle.remove(&(filed, id));
        if let Some(n) = self.by_source.get_mut(&conn.source) {
            *n -= 1;
            if *n == 0 {
                self.by_source.remove(&conn.source);
            }
        }
        Some(conn)
    }

    /// The connection with the oldest activity, the lower id (the older connection) on a
    /// tie. Entries filed before their connection's latest query are re-filed on the way:
    /// the first entry whose time is still current is older than every other real time.
    fn longest_idle(&mut self) -> Option<u64> {
        loop {
            let &(filed, id) = self.idle.first()?;
            let Some((conn, at)) = self.open.get_mut(&id) else {
                // Not reachable: `idle` and `open` change together. Drop the stray entry.
                self.idle.pop_first();
                continue;
            };
            let active = conn.active_ms.load(Ordering::Relaxed);
            if active == filed {
                return Some(id);
            }
            self.idle.pop_first();
            self.idle.insert((active, id));
            *at = active;
        }
    }
}

/// An admitted connection; dropping it takes the connection out of the table.
#[derive(Debug)]
pub struct Admitted {
    pub conn: Arc<Conn>,
    table: Arc<Conns>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.table.lock().remove(self.conn.id);
    }
}

impl Admitted {
    /// Notes that the connection just completed a query: it is no longer idle.
    pub fn touch(&self) {
        self.conn.active_ms.store(self.table.now_ms(), Ordering::Relaxed);
    }
}

impl Conns {
    /// A table of at most `max` connections, `per_source` of them from one source.
    pub fn new(max: usize, per_source: usize) -> Conns {
        Conns {
            max: max.max(1),
            per_source: per_source.max(1),
            epoch: Instant::now(),
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Counts only: a panic elsewhere cannot leave them half-updated.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Connections open now.
    pub fn len(&self) -> usize {
        self.lock().open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Admits a connection from `ip`: refused when its source is at the per-source cap;
    /// when the table is full, the longest-idle connection is evicted to make room.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Admitted, Refused> {
        let source = Source::of(ip);
        let now = self.now_ms();
        let mut inner = self.lock();
        if inner.by_source.get(&source).copied().unwrap_or(0) >= self.per_source {
            return Err(Refused::PerSource);
        }
        if inner.open.len() >= self.max
            && let Some(victim) = inner.longest_idle()
            && let Some(conn) = inner.remove(victim)
        {
            conn.evicted.cancel();
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let conn = Arc::new(Conn {
            id,
            source,
            active_ms: AtomicU64::new(now),
            evicted: CancellationToken::new(),
        });
        inner.insert(conn.clone());
        Ok(Admitted { conn, table: self.clone() })
    }
}

/// File descriptors kept out of the TCP connection budget: the listeners, the admin API
/// and its clients, probes, the configuration files read by a reload, logs.
pub const FD_RESERVE: u64 = 512;

/// The connection cap for a process allowed `fd_limit` open files: half of what is left
/// after `FD_RESERVE` (the other half stays for probes, which need one descriptor each
/// while they run), at least 16 so TCP keeps working under a tiny limit, and never more
/// than `configured`.
pub fn cap_for_fd_limit(configured: usize, fd_limit: u64) -> usize {
    let budget = usize::try_from(fd_limit.saturating_sub(FD_RESERVE) / 2).unwrap_or(usize::MAX);
    configured.min(budget.max(16))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn sources_are_v4_addresses_and_v6_slash_64s() {
        let same = [
            ("192.0.2.1", "192.0.2.1", true),
            ("192.0.2.1", "192.0.2.2", false),
            ("2001:db8:1:2::1", "2001:db8:1:2:ffff::9", true),
            ("2001:db8:1:2::1", "2001:db8:1:3::1", false),
            ("::ffff:192.0.2.1", "192.0.2.1", true),
        ];
        for (a, b, want) in same {
            assert_eq!(Source::of(ip(a)) == Source::of(ip(b)), want, "{a} vs {b}");
        }
    }

    #[test]
    fn cap_from_the_descriptor_limit() {
        let cases = [
            (1024, 1024, 256),
            (1024, 20_000, 1024),
            (100_000, 20_000, 9744),
            (1024, 600, 44),
            (1024, 256, 16),
            (8, 256, 8),
            (1024, u64::MAX, 1024),
        ];
        for (configured, limit, want) in cases {
            assert_eq!(cap_for_fd_limit(configured, limit), want, "{configured} at {limit}");
        }
    }

    #[test]
    fn per_source_cap_and_eviction_of_the_longest_idle() {
        let t = Arc::new(Conns::new(3, 2));
        let a1 = t.admit(ip("192.0.2.1")).unwrap();
        let a2 = t.admit(ip("192.0.2.1")).unwrap();
        assert_eq!(t.admit(ip("192.0.2.1")).unwrap_err(), Refused::PerSource);
        let b1 = t.admit(ip("2001:db8::1")).unwrap();
        assert_eq!(t.len(), 3);
        // Full: a1 has been idle longest (b1 and a2 were active later).
        a1.conn.active_ms.store(5, Ordering::Relaxed);
        a2.conn.active_ms.store(9, Ordering::Relaxed);
        b1.conn.active_ms.store(7, Ordering::Relaxed);
        let c1 = t.admit(ip("198.51.100.1")).unwrap();
        assert!(a1.conn.evicted.is_cancelled());
        assert!(!a2.conn.evicted.is_cancelled() && !b1.conn.evicted.is_cancelled());
        assert_eq!(t.len(), 3);
        c1.conn.active_ms.store(10, Ordering::Relaxed);
        // The evicted connection's slot of its source is free again at once.
        let a3 = t.admit(ip("192.0.2.1")).unwrap();
        assert!(b1.conn.evicted.is_cancelled(), "b1 (7) was idle longer than a2 (9) and c1");
        // Dropping an evicted connection frees nothing twice.
        drop((a1, b1));
        assert_eq!(t.len(), 3);
        drop((a2, a3, c1));
        assert!(t.is_empty());
        assert!(t.lock().by_source.is_empty());
    }

    /// Admits one connection per activity time, each from its own source.
    fn table_of(activity: &[u64]) -> (Arc<Conns>, Vec<Admitted>) {
        let t = Arc::new(Conns::new(activity.len(), 1));
        let held: Vec<Admitted> =
            (0..activity.len()).map(|n| t.admit(ip(&format!("10.0.0.{n}"))).unwrap()).collect();
        for (a, &at) in held.iter().zip(activity) {
            a.conn.active_ms.store(at, Ordering::Relaxed);
        }
        (t, held)
    }

    #[test]
    fn eviction_order_is_longest_idle_first() {
        // (activity of each connection, activity set after the first eviction, the order in
        // which the connections are evicted)
        type Case = (&'static [u64], &'static [(usize, u64)], &'static [usize]);
        let cases: &[Case] = &[
            (&[5, 9, 7], &[], &[0, 2, 1]),
            (&[3, 3, 3], &[], &[0, 1, 2]),
            (&[8, 2, 6, 4], &[(3, 20)], &[1, 2, 0, 3]),
            (&[1, 2, 3], &[(1, 9), (2, 9)], &[0, 1, 2]),
            (&[4, 1, 1], &[(2, 5)], &[1, 0, 2]),
            (&[7, 7, 1, 7], &[(0, 8)], &[2, 1, 3, 0]),
        ];
        for (i, (activity, later, want)) in cases.iter().enumerate() {
            let (t, held) = table_of(activity);
            let mut inner = t.lock();
            let mut order = Vec::new();
            while let Some(victim) = inner.longest_idle() {
                inner.remove(victim);
                order.push(held.iter().position(|a| a.conn.id == victim).unwrap());
                if order.len() == 1 {
                    for &(n, at) in *later {
                        held[n].conn.active_ms.store(at, Ordering::Relaxed);
                    }
                }
            }
            assert_eq!(order, *want, "case {i}");
            assert!(inner.open.is_empty() && inner.idle.is_empty() && inner.by_source.is_empty());
        }
    }

    #[test]
    fn the_index_picks_what_a_full_scan_picks() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let (t, held) = table_of(&[0; 64]);
        let mut clock = 1;
        for _ in 0..2000 {
            // Some connections answer queries, then one is evicted and its slot refilled.
            for _ in 0..rng.random_range(0..8) {
                clock += rng.random_range(0..3);
                held[rng.random_range(0..held.len())]
                    .conn
                    .active_ms
                    .store(clock, Ordering::Relaxed);
            }
            let mut inner = t.lock();
            let scan = inner
                .open
                .values()
                .map(|(c, _)| (c.active_ms.load(Ordering::Relaxed), c.id))
                .min()
                .map(|(_, id)| id);
            let victim = inner.longest_idle();
            assert_eq!(victim, scan);
            let conn = inner.remove(victim.unwrap()).unwrap();
            conn.active_ms.store(clock, Ordering::Relaxed);
            inner.insert(conn);
            assert_eq!(inner.idle.len(), inner.open.len());
        }
    }

    /// Not a test: admissions per second into a full table (each evicts the longest idle),
    /// with a tenth of the connections active between admissions. Prints the figures; run
    /// with `cargo test --lib server::conns::tests::admissions -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, not a test"]
    fn admissions_per_second_into_a_full_table() {
        for size in [1_000, 10_000, 100_000] {
            let t = Arc::new(Conns::new(size, usize::MAX));
            let mut held = Vec::new();
            let from = |n: usize| IpAddr::from([10, (n >> 16) as u8, (n >> 8) as u8, n as u8]);
            for n in 0..size {
                held.push(t.admit(from(n)).unwrap());
            }
            let rounds = 2_000;
            let started = Instant::now();
            for n in 0..rounds {
                // Some connections answer queries meanwhile.
                for k in 0..10 {
                    held[(n + k * size / 10) % held.len()].touch();
                }
                held.push(t.admit(from(size + n)).unwrap());
            }
            let took = started.elapsed();
            let rate = rounds as f64 / took.as_secs_f64();
            eprintln!("table of {size}: {rounds} admissions in {took:?}: {rate:.0}/s");
        }
    }
}
