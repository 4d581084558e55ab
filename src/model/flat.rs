//! Flattened host names (`flatten: true`): the addresses a resolver last gave for each, and
//! the rules that turn their age into the TTL an answer carries, a stale answer, or none.
//!
//! The background resolver (`probe::flatten`) writes one `Lookup` per name and family; the
//! query path reads it through an `ArcSwapOption` (no lock, no allocation) and counts its
//! TTL down from when it was received, as a caching resolver would. Slots are shared by
//! `Arc` between the snapshots of successive loads, so a reload keeps what was resolved.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use arrayvec::ArrayVec;

use crate::wire::name::WireName;

/// Most addresses of one family an answer carries (more are dropped, in the order received).
pub const MAX_FLAT_ADDRESSES: usize = 8;

/// How flattened names are resolved and how long their addresses are served
/// (`flatten:` in `steerdns.yaml`, `docs/configuration.md`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlattenSettings {
    /// Recursive resolvers, tried in turn (each lookup starts at the next one).
    pub resolvers: Vec<SocketAddr>,
    /// Where the resolvers came from: `flatten.resolvers` or `/etc/resolv.conf`.
    pub resolvers_from: String,
    /// How long one resolver may take to answer one lookup.
    pub timeout: Duration,
    /// An answer without the AD bit counts as a failure.
    pub require_ad: bool,
    /// Lookups running at once, over every name.
    pub max_in_flight: usize,
    /// The query-path rules.
    pub rules: FlatRules,
}

/// What the query path needs to know to serve a lookup's addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlatRules {
    /// Past the records' expiry, their addresses are served stale for this long (RFC 8767).
    pub stale_for: Duration,
    /// The TTL of a stale answer (RFC 8767 recommends 30 s).
    pub stale_ttl: u32,
}

impl Default for FlatRules {
    fn default() -> FlatRules {
        FlatRules { stale_for: Duration::from_secs(86_400), stale_ttl: 30 }
    }
}

/// The address family of a lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn as_str(self) -> &'static str {
        match self {
            Family::V4 => "A",
            Family::V6 => "AAAA",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Family::V4 => 1,
            Family::V6 => 2,
        }
    }
}

/// One successful lookup of one family of a flattened name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lookup {
    /// The addresses, possibly none (the name has no records of this family).
    pub addresses: ArrayVec<IpAddr, MAX_FLAT_ADDRESSES>,
    /// When the answer arrived, in Unix seconds.
    pub received: u64,
    /// The smallest TTL over the records used (the CNAME chain and the addresses).
    pub ttl: u32,
    /// The resolver that answered.
    pub resolver: SocketAddr,
    /// The resolver set AD: it validated the answer.
    pub authenticated: bool,
    /// The CNAME targets followed from the flattened name, in order.
    pub chain: Vec<WireName>,
}

/// How fresh a lookup is at some moment, and the TTL an answer from it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// Within the records' TTL: the answer's TTL is what remains of it (at most the
    /// profile's TTL).
    Fresh { ttl: u32 },
    /// Past the records' expiry, within `stale_for`: served with the stale TTL.
    Stale { ttl: u32, expired_for: u64 },
    /// Past `stale_for` too: not served.
    Expired,
}

impl Freshness {
    pub fn ttl(self) -> Option<u32> {
        match self {
            Freshness::Fresh { ttl } | Freshness::Stale { ttl, .. } => Some(ttl),
            Freshness::Expired => None,
        }
    }
}

impl Lookup {
    /// When its records expire, in Unix seconds.
    pub fn expires(&self) -> u64 {
        self.received + u64::from(self.ttl)
    }

    /// How fresh it is at `now` (Unix seconds) for a profile answering with `profile_ttl`.
    /// Never a TTL above the profile's: the signatures of a signed zone name it as the
    /// original TTL.
    pub fn freshness(&self, now: u64, profile_ttl: u32, rules: FlatRules) -> Freshness {
        let expires = self.expires();
        if now < expires {
            let left = u32::try_from(expires - now).unwrap_or(u32::MAX);
            return Freshness::Fresh { ttl: left.min(profile_ttl) };
        }
        let expired_for = now - expires;
        if expired_for < rules.stale_for.as_secs() {
            Freshness::Stale { ttl: rules.stale_ttl.min(profile_ttl), expired_for }
        } else {
            Freshness::Expired
        }
    }

    /// When the background resolver looks the name up again: a quarter of the TTL before
    /// expiry (at least a second after it was received), so that a working resolver
    /// replaces the records before they expire.
    pub fn refresh_at(&self) -> u64 {
        let ahead = u64::from(self.ttl) / 4;
        self.received + (u64::from(self.ttl) - ahead).max(1)
    }
}

/// One line of `explain`: where a flattened endpoint's addresses came from, how old they
/// are and how they are served.
pub fn describe(
    endpoint: &str,
    host: &WireName,
    family: Family,
    l: &Lookup,
    now: u64,
    freshness: Freshness,
) -> String {
    let addresses: Vec<String> = l.addresses.iter().map(ToString::to_string).collect();
    let addresses = if addresses.is_empty() { "none".to_string() } else { addresses.join(", ") };
    let chain: Vec<String> = l.chain.iter().map(ToString::to_string).collect();
    let via = if chain.is_empty() { String::new() } else { format!(" via {}", chain.join(" -> ")) };
    let ad = if l.authenticated { "validated (AD)" } else { "not validated" };
    let age = now.saturating_sub(l.received);
    let state = match freshness {
        Freshness::Fresh { ttl } => format!(
            "fresh, {} s of the records' TTL left: TTL {ttl}",
            l.expires().saturating_sub(now)
        ),
        Freshness::Stale { ttl, expired_for } => {
            format!("stale: expired {expired_for} s ago, served with TTL {ttl} (RFC 8767)")
        }
        Freshness::Expired => "expired past the stale bound: not served".to_string(),
    };
    format!(
        "endpoint {endpoint} flattens {host}{via}: {} {addresses} from resolver {}, received {age} s ago with TTL {}, {ad}; {state}",
        family.as_str(),
        l.resolver,
        l.ttl
    )
}

/// The wait before the next try after `failures` failed lookups in a row: 1 s, doubling,
/// at most 30 s, so that a resolver coming back is used soon and a dead one is not hammered.
pub fn retry_after(failures: u32) -> Duration {
    let secs = 1u64 << failures.saturating_sub(1).min(5);
    Duration::from_secs(secs.min(30))
}

/// One flattened host name: its last lookups, and which families may answer now.
#[derive(Debug)]
pub struct FlatSlot {
    pub name: WireName,
    v4: ArcSwapOption<Lookup>,
    v6: ArcSwapOption<Lookup>,
    /// Bit per family (`Family::bit`): set while that family has addresses fresh or within
    /// the stale bound. The background resolver keeps it; routing reads it.
    usable: AtomicU8,
    /// Lookups that succeeded and failed, and answers served stale (for `/metrics`).
    pub lookups_ok: AtomicU64,
    pub lookups_failed: AtomicU64,
    pub stale_answers: AtomicU64,
}

impl FlatSlot {
    pub fn new(name: WireName) -> FlatSlot {
        FlatSlot {
            name,
            v4: ArcSwapOption::empty(),
            v6: ArcSwapOption::empty(),
            usable: AtomicU8::new(0),
            lookups_ok: AtomicU64::new(0),
            lookups_failed: AtomicU64::new(0),
            stale_answers: AtomicU64::new(0),
        }
    }

    fn cell(&self, family: Family) -> &ArcSwapOption<Lookup> {
        match family {
            Family::V4 => &self.v4,
            Family::V6 => &self.v6,
        }
    }

    /// The last successful lookup of `family`, if any. A guard, not a clone: no
    /// allocation and no reference count taken on the query path.
    #[inline]
    pub fn lookup(&self, family: Family) -> arc_swap::Guard<Option<Arc<Lookup>>> {
        self.cell(family).load()
    }

    pub fn store(&self, family: Family, lookup: Lookup) {
        self.cell(family).store(Some(Arc::new(lookup)));
    }

    /// Whether `family` has addresses to serve (fresh or stale), as last updated.
    #[inline]
    pub fn usable(&self, family: Family) -> bool {
        self.usable.load(Ordering::Relaxed) & family.bit() != 0
    }

    /// Whether any family has addresses to serve.
    #[inline]
    pub fn any_usable(&self) -> bool {
        self.usable.load(Ordering::Relaxed) != 0
    }

    /// Sets which families are usable at `now` under `rules`: a family with addresses
    /// whose lookup has not passed the stale bound.
    pub fn update_usable(&self, now: u64, rules: FlatRules) {
        let mut bits = 0;
        for family in [Family::V4, Family::V6] {
            if let Some(l) = &*self.lookup(family)
                && !l.addresses.is_empty()
                && l.freshness(now, u32::MAX, rules) != Freshness::Expired
            {
                bits |= family.bit();
            }
        }
        self.usable.store(bits, Ordering::Relaxed);
    }
}

/// Every flattened name of a configuration, by flat slot (`Endpoint::flat_slot`).
#[derive(Debug, Default)]
pub struct FlatTable {
    pub slots: Vec<Arc<FlatSlot>>,
    pub rules: FlatRules,
}

impl FlatTable {
    /// A table of `names` (distinct), taking over the slot of each name `previous` holds,
    /// with what was resolved for it.
    pub fn new(names: Vec<WireName>, rules: FlatRules, previous: Option<&FlatTable>) -> FlatTable {
        let slots = names
            .into_iter()
            .map(|name| {
                previous
                    .and_then(|p| p.slots.iter().find(|s| s.name == name))
                    .cloned()
                    .unwrap_or_else(|| Arc::new(FlatSlot::new(name)))
            })
            .collect();
        FlatTable { slots, rules }
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(received: u64, ttl: u32) -> Lookup {
        Lookup {
            addresses: [IpAddr::from([192, 0, 2, 1])].into_iter().collect(),
            received,
            ttl,
            resolver: "127.0.0.1:53".parse().unwrap(),
            authenticated: false,
            chain: Vec::new(),
        }
    }

    #[test]
    fn ttl_counts_down_then_stale_then_expired() {
        let rules = FlatRules { stale_for: Duration::from_secs(100), stale_ttl: 30 };
        // (received, record ttl, profile ttl, now, expected)
        let cases: &[(u64, u32, u32, u64, Freshness)] = &[
            (1000, 60, 300, 1000, Freshness::Fresh { ttl: 60 }),
            (1000, 60, 300, 1001, Freshness::Fresh { ttl: 59 }),
            (1000, 60, 300, 1059, Freshness::Fresh { ttl: 1 }),
            // The profile's TTL caps the remaining one.
            (1000, 60, 20, 1010, Freshness::Fresh { ttl: 20 }),
            (1000, 60, 20, 1045, Freshness::Fresh { ttl: 15 }),
            // Expired: stale for 100 s counted from the expiry, with the stale TTL.
            (1000, 60, 300, 1060, Freshness::Stale { ttl: 30, expired_for: 0 }),
            (1000, 60, 300, 1159, Freshness::Stale { ttl: 30, expired_for: 99 }),
            (1000, 60, 10, 1100, Freshness::Stale { ttl: 10, expired_for: 40 }),
            (1000, 60, 300, 1160, Freshness::Expired),
            (1000, 0, 300, 1000, Freshness::Stale { ttl: 30, expired_for: 0 }),
        ];
        for (i, &(received, ttl, profile_ttl, now, want)) in cases.iter().enumerate() {
            assert_eq!(lookup(received, ttl).freshness(now, profile_ttl, rules), want, "case {i}");
        }
    }

    #[test]
    fn no_stale_bound_means_no_stale_answers() {
        let rules = FlatRules { stale_for: Duration::ZERO, stale_ttl: 30 };
        assert_eq!(lookup(0, 10).freshness(9, 300, rules), Freshness::Fresh { ttl: 1 });
        assert_eq!(lookup(0, 10).freshness(10, 300, rules), Freshness::Expired);
    }

    #[test]
    fn refresh_comes_before_expiry() {
        // (ttl, refresh after received)
        for (ttl, after) in [(0, 1), (1, 1), (2, 2), (4, 3), (60, 45), (300, 225)] {
            assert_eq!(lookup(1000, ttl).refresh_at(), 1000 + after, "ttl {ttl}");
        }
    }

    #[test]
    fn retries_back_off_to_thirty_seconds() {
        let waits: Vec<u64> = (1..=8).map(|f| retry_after(f).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
    }

    #[test]
    fn usable_families_follow_the_stale_bound() {
        let rules = FlatRules { stale_for: Duration::from_secs(50), stale_ttl: 30 };
        let slot = FlatSlot::new(WireName::parse("cdn.example.net.").unwrap());
        slot.update_usable(0, rules);
        assert!(!slot.any_usable(), "nothing resolved yet");
        slot.store(Family::V4, lookup(100, 60));
        let mut empty = lookup(100, 60);
        empty.addresses.clear();
        slot.store(Family::V6, empty);
        for (now, v4) in [(100, true), (159, true), (160, true), (209, true), (210, false)] {
            slot.update_usable(now, rules);
            assert_eq!(slot.usable(Family::V4), v4, "at {now}");
            assert!(!slot.usable(Family::V6), "no AAAA records: never usable");
        }
    }

    #[test]
    fn a_new_table_keeps_the_slots_of_names_it_had() {
        let a = WireName::parse("a.example.net.").unwrap();
        let b = WireName::parse("b.example.net.").unwrap();
        let first = FlatTable::new(vec![a.clone()], FlatRules::default(), None);
        first.slots[0].store(Family::V4, lookup(5, 60));
        let next = FlatTable::new(vec![b, a], FlatRules::default(), Some(&first));
        assert!(Arc::ptr_eq(&next.slots[1], &first.slots[0]));
        assert!(next.slots[0].lookup(Family::V4).is_none());
    }
}
