//! The table of open DNS TCP connections, shared by every TCP listener: it enforces the
//! connection cap and the per-source cap, and picks the connection to evict when full.
//!
//! When the table is full a newcomer evicts the connection that has been idle longest
//! (as gdnsd does) instead of being refused: otherwise whoever opened the most connections
//! first keeps the service to themselves. The table is locked only when a connection opens
//! or closes; queries only store their time into their own connection's atomic.

use std::collections::HashMap;
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
    open: HashMap<u64, Arc<Conn>>,
    by_source: HashMap<Source, usize>,
}

impl Inner {
    fn remove(&mut self, id: u64) -> Option<Arc<Conn>> {
        let conn = self.open.remove(&id)?;
        if let Some(n) = self.by_source.get_mut(&conn.source) {
            *n -= 1;
            if *n == 0 {
                self.by_source.remove(&conn.source);
            }
        }
        Some(conn)
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
        if inner.open.len() >= self.max {
            let idle = inner.open.values().map(|c| (c.id, c.active_ms.load(Ordering::Relaxed)));
            if let Some(victim) = longest_idle(idle)
                && let Some(conn) = inner.remove(victim)
            {
                conn.evicted.cancel();
            }
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let conn = Arc::new(Conn {
            id,
            source,
            active_ms: AtomicU64::new(now),
            evicted: CancellationToken::new(),
        });
        inner.open.insert(id, conn.clone());
        *inner.by_source.entry(source).or_insert(0) += 1;
        Ok(Admitted { conn, table: self.clone() })
    }
}

/// The connection with the oldest activity; the lower id (the older connection) on a tie.
fn longest_idle(conns: impl Iterator<Item = (u64, u64)>) -> Option<u64> {
    conns.min_by_key(|&(id, active)| (active, id)).map(|(id, _)| id)
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
}
