//! Endpoint monitor statuses and the health view the query path reads.
//!
//! The prober writes one status per health slot; queries read them with a relaxed atomic
//! load, so no prober or reloader can make a query wait. Routing code sees only `Status`,
//! never probe details, through the `HealthView` trait (which `explain` also implements to
//! simulate endpoints that are down).

use std::sync::atomic::{AtomicU8, Ordering};

/// Monitor status of an endpoint (the statuses are described in `docs/routing.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Status {
    Online = 0,
    Checking = 1,
    Degraded = 2,
    Disabled = 3,
    Stopped = 4,
    Unmonitored = 5,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Online => "online",
            Status::Checking => "checking",
            Status::Degraded => "degraded",
            Status::Disabled => "disabled",
            Status::Stopped => "stopped",
            Status::Unmonitored => "unmonitored",
        }
    }

    /// Serving: may be picked without fail-open.
    pub fn is_serving(self) -> bool {
        matches!(self, Status::Online | Status::Checking | Status::Unmonitored)
    }

    fn from_u8(v: u8) -> Status {
        match v {
            0 => Status::Online,
            1 => Status::Checking,
            2 => Status::Degraded,
            3 => Status::Disabled,
            4 => Status::Stopped,
            _ => Status::Unmonitored,
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Read access to the monitor status of leaf (non-nested) endpoints, by health slot.
pub trait HealthView {
    fn status(&self, slot: usize) -> Status;
}

/// The live table of statuses: one atomic byte per health slot.
#[derive(Debug)]
pub struct HealthTable {
    slots: Box<[AtomicU8]>,
}

impl HealthTable {
    pub fn new(initial: impl IntoIterator<Item = Status>) -> HealthTable {
        HealthTable { slots: initial.into_iter().map(|s| AtomicU8::new(s as u8)).collect() }
    }

    pub fn set(&self, slot: usize, status: Status) {
        self.slots[slot].store(status as u8, Ordering::Relaxed);
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

impl HealthView for HealthTable {
    fn status(&self, slot: usize) -> Status {
        self.slots
            .get(slot)
            .map_or(Status::Degraded, |s| Status::from_u8(s.load(Ordering::Relaxed)))
    }
}

/// A view that overrides some slots (used by `explain --down` and in tests).
pub struct Overlay<'a, H: HealthView + ?Sized> {
    pub base: &'a H,
    pub overrides: &'a [(usize, Status)],
}

impl<H: HealthView + ?Sized> HealthView for Overlay<'_, H> {
    fn status(&self, slot: usize) -> Status {
        self.overrides
            .iter()
            .find(|(s, _)| *s == slot)
            .map_or_else(|| self.base.status(slot), |(_, st)| *st)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_round_trips_every_status() {
        let all = [
            Status::Online,
            Status::Checking,
            Status::Degraded,
            Status::Disabled,
            Status::Stopped,
            Status::Unmonitored,
        ];
        let t = HealthTable::new(all);
        for (i, s) in all.iter().enumerate() {
            assert_eq!(t.status(i), *s);
        }
        t.set(0, Status::Degraded);
        assert_eq!(t.status(0), Status::Degraded);
        let o = Overlay { base: &t, overrides: &[(1, Status::Degraded)] };
        assert_eq!(o.status(1), Status::Degraded);
        assert_eq!(o.status(2), Status::Degraded);
        assert_eq!(o.status(5), Status::Unmonitored);
    }
}
