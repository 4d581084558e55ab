//! Signed answers (`docs/dnssec.md`, "Signed answers"): the RRSIGs after each RRset of a
//! signed zone when the query has DO set, the apex key sets, and compact denial (RFC 9824:
//! one NSEC at the query name instead of a proof from the zone's real names).
//!
//! A signature comes from the thread's own cache, else the snapshot's pre-signed table,
//! else it is made now, within the thread's budget; past the budget the query gets no
//! reply. The cache, budget and scratch space are the thread's own (`thread_local`), and so
//! are counts not yet added to the server's, so the query path takes no lock and, once
//! warm, allocates nothing.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use arrayvec::ArrayVec;

use crate::model::presigned::Presigned;
use crate::model::sigcache::{Budget, CACHE_SLOTS, MISS_BURST, MISSES_PER_MS, SigCache};
use crate::model::sign_counts::{SignCounts, SignTotals};
use crate::model::signing::{self, Rrset, Signature};
use crate::model::zone::{Node, Zone};
use crate::model::{Families, Profile};
use crate::wire::dnssec::{compact_next_name, type_bitmap};
use crate::wire::response::{Owner, Section, Writer};
use crate::wire::{Rtype, dnssec};

/// The query could not be answered within the thread's signing budget: no reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverBudget;

/// A thread adds its counts to its server's `SignCounts` every so often (after
/// `FLUSH_EVERY` events, and on any miss or drop), so they may lag by that many per thread.
const FLUSH_EVERY: u64 = 64;

/// Counts not yet added to `to`, the counts of the server whose queries they are. A thread
/// that answers for another server (tests run several in one process) flushes first.
#[derive(Default)]
struct Pending {
    to: Option<Arc<SignCounts>>,
    n: SignTotals,
}

impl Pending {
    /// The counts to add to, flushed to the previous server's first when it changes.
    fn of(&mut self, counts: &Arc<SignCounts>) -> &mut SignTotals {
        if !self.to.as_ref().is_some_and(|to| Arc::ptr_eq(to, counts)) {
            self.flush();
            // An Arc clone: a reference count, no allocation.
            self.to = Some(counts.clone());
        }
        &mut self.n
    }

    fn flush(&mut self) {
        if let Some(to) = &self.to {
            to.add(&self.n);
        }
        self.n = SignTotals::default();
    }

    fn total(&self) -> u64 {
        self.n.answers + self.n.cached + self.n.presigned
    }
}

/// What a query thread keeps for signing.
struct Local {
    cache: SigCache,
    budget: Budget,
    scratch: signing::Scratch,
    pending: Pending,
}

thread_local! {
    static LOCAL: RefCell<Local> = RefCell::new(Local {
        cache: SigCache::new(CACHE_SLOTS),
        budget: Budget::new(MISSES_PER_MS, MISS_BURST),
        scratch: signing::Scratch::new(),
        pending: Pending::default(),
    });
}

/// Counts a signed answer, or a dropped query, for the server whose `counts` they are.
pub fn count(counts: &Arc<SignCounts>, answered: bool) {
    LOCAL.with_borrow_mut(|l| {
        if answered {
            l.pending.of(counts).answers += 1;
            if l.pending.total() >= FLUSH_EVERY {
                l.pending.flush();
            }
        } else {
            l.pending.of(counts).dropped += 1;
            l.pending.flush();
        }
    });
}

/// Adds this thread's pending counts to its server's now (for tests, which read the counts
/// right after their queries).
pub fn flush_counts() {
    LOCAL.with_borrow_mut(|l| l.pending.flush());
}

/// Signing for one reply: the query had DO set.
pub struct Sign<'s> {
    pub presigned: &'s Presigned,
    /// The server's counts.
    pub counts: &'s Arc<SignCounts>,
    /// Unix seconds.
    pub now: u32,
}

impl Sign<'_> {
    /// Writes, after the RRset just written at `owner` in `section` (with `written_ttl`), one
    /// RRSIG per key of `zone` that signs it (none when the zone is unsigned). `set.owner`
    /// may be in any case; signatures cover it lower-cased.
    pub fn rrsigs<'a, I>(
        &self,
        w: &mut Writer<'_>,
        section: Section,
        owner: Owner<'_>,
        zone: &Zone,
        set: Rrset<'_, I>,
        written_ttl: u32,
    ) -> Result<(), OverBudget>
    where
        I: Iterator<Item = &'a [u8]> + Clone,
    {
        let Some(signing) = &zone.dnssec else { return Ok(()) };
        let mut lower: ArrayVec<u8, 255> = ArrayVec::new();
        let _ = lower.try_extend_from_slice(set.owner);
        lower.make_ascii_lowercase();
        let set = Rrset { owner: &lower, rtype: set.rtype, ttl: set.ttl, rdata: set.rdata };
        let origin = zone.origin.as_bytes();
        let mut hash = None;
        for key in &signing.keys {
            if !signing::signs(signing, key, set.rtype, self.now.into()) {
                continue;
            }
            let rrset = *hash.get_or_insert_with(|| signing::rrset_hash(&set));
            let ck = rrset ^ signing::key_id(key);
            let Some(sig) = self.signature(signing, key, origin, &set, ck)? else { continue };
            let head = signing::rrsig_head(key, set.owner, set.rtype, set.ttl, sig);
            let len = key.algorithm.signature_len();
            let parts: [&[u8]; 3] = [&head.bytes(), origin, &sig.bytes[..len]];
            w.record_parts(section, owner, Rtype::RRSIG, written_ttl, &parts);
        }
        Ok(())
    }

    fn signature<'a, I>(
        &self,
        signing: &crate::model::dnssec::ZoneSigning,
        key: &crate::model::dnssec::ZoneKey,
        origin: &[u8],
        set: &Rrset<'_, I>,
        ck: u128,
    ) -> Result<Option<Signature>, OverBudget>
    where
        I: Iterator<Item = &'a [u8]> + Clone,
    {
        LOCAL.with_borrow_mut(|l| {
            if let Some(sig) = l.cache.get(ck, self.now) {
                l.pending.of(self.counts).cached += 1;
                return Ok(Some(sig));
            }
            if let Some(sig) = self.presigned.get(ck).filter(|s| s.fresh(self.now)) {
                l.pending.of(self.counts).presigned += 1;
                // Copied in: the next look-up stays in the thread's own memory.
                l.cache.put(ck, sig);
                return Ok(Some(sig));
            }
            if !l.budget.take(Instant::now()) {
                return Err(OverBudget);
            }
            let sig = signing::sign(signing, key, origin, set, self.now, &mut l.scratch);
            if let Some(sig) = sig {
                l.cache.put(ck, sig);
                l.pending.of(self.counts).made += 1;
                l.pending.flush();
            }
            Ok(sig)
        })
    }

    /// The NSEC of compact denial at `qname` (RFC 9824 §3) in the authority section, with
    /// its RRSIGs: next name `\000.<qname>`, the types in `types` plus RRSIG and NSEC.
    pub fn nsec(
        &self,
        w: &mut Writer<'_>,
        owner: Owner<'_>,
        qname: &[u8],
        zone: &Zone,
        types: &[Rtype],
    ) -> Result<(), OverBudget> {
        let mut all: ArrayVec<Rtype, 24> = ArrayVec::new();
        all.extend([Rtype::RRSIG, Rtype::NSEC]);
        for t in types.iter().take(all.remaining_capacity()) {
            all.push(*t);
        }
        let bitmap = type_bitmap(&all);
        let next = compact_next_name(qname);
        let ttl = zone.negative_ttl();
        w.record_parts(Section::Authority, owner, Rtype::NSEC, ttl, &[&next, &bitmap]);
        let mut rdata: ArrayVec<u8, { 255 + dnssec::BITMAP_MAX }> = ArrayVec::new();
        let _ = rdata.try_extend_from_slice(&next);
        let _ = rdata.try_extend_from_slice(&bitmap);
        let set =
            Rrset { owner: qname, rtype: Rtype::NSEC, ttl, rdata: std::iter::once(&rdata[..]) };
        self.rrsigs(w, Section::Authority, owner, zone, set, ttl)
    }
}

/// The types a static name has (for a NODATA NSEC): its RRsets, and at the apex the SOA
/// and the key sets.
pub fn node_types(zone: &Zone, node: &Node, is_apex: bool, now: u64) -> ArrayVec<Rtype, 22> {
    let mut out = ArrayVec::new();
    for set in node.rrsets.iter().take(16) {
        out.push(set.rtype);
    }
    if is_apex {
        out.push(Rtype::SOA);
        if let Some(signing) = &zone.dnssec {
            out.push(Rtype::DNSKEY);
            if signing::published(signing, now).any(|k| k.is_sep()) {
                out.extend([Rtype::CDS, Rtype::CDNSKEY]);
            }
        }
    }
    out
}

/// The types a profile name has for a client that got NODATA for `qtype`: the address
/// families it answers, never the type asked.
pub fn profile_types(profile: &Profile, qtype: Rtype) -> ArrayVec<Rtype, 2> {
    let Families { v4, v6, .. } = profile.families;
    let mut out = ArrayVec::new();
    if v4 && qtype != Rtype::A {
        out.push(Rtype::A);
    }
    if v6 && qtype != Rtype::AAAA {
        out.push(Rtype::AAAA);
    }
    out
}

/// The apex's DNSKEY, CDS or CDNSKEY RRset (RFC 7344 §4: CDS and CDNSKEY name the SEP
/// keys, the DS digest SHA-256) at `owner`; returns whether it has any record.
pub fn key_set(
    w: &mut Writer<'_>,
    owner: Owner<'_>,
    zone: &Zone,
    rtype: Rtype,
    now: u64,
    sign: Option<&Sign<'_>>,
) -> Result<bool, OverBudget> {
    let Some(signing) = &zone.dnssec else { return Ok(false) };
    let origin = zone.origin.as_bytes();
    let mut rdatas: ArrayVec<ArrayVec<u8, 68>, 16> = ArrayVec::new();
    for key in signing::published(signing, now) {
        let rdata = match rtype {
            Rtype::DNSKEY => key.dnskey_rdata(),
            Rtype::CDNSKEY if key.is_sep() => key.dnskey_rdata(),
            Rtype::CDS if key.is_sep() => {
                let mut ds = ArrayVec::new();
                let _ = ds.try_extend_from_slice(&key.ds_rdata(origin));
                ds
            }
            _ => continue,
        };
        rdatas.push(rdata);
    }
    for rd in &rdatas {
        w.record(Section::Answer, owner, rtype, zone.ttl, rd);
    }
    if rdatas.is_empty() {
        return Ok(false);
    }
    if let Some(sign) = sign {
        let set =
            Rrset { owner: origin, rtype, ttl: zone.ttl, rdata: rdatas.iter().map(|r| &r[..]) };
        sign.rrsigs(w, Section::Answer, owner, zone, set, zone.ttl)?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::sync::Arc;

    use rand::SeedableRng;

    use super::*;
    use crate::FastMap;
    use crate::geo::World;
    use crate::model::dnssec::{Algorithm, FLAGS_KSK, ZoneSigning};
    use crate::model::health::HealthTable;
    use crate::model::signing::tests::test_key;
    use crate::model::snapshot::{Listen, Snapshot};
    use crate::model::zone::{RrSet, Soa};
    use crate::responder::{Packet, Transport, respond};
    use crate::wire::name::WireName;

    /// A DO query for `name`, type A.
    fn query(name: &str) -> Vec<u8> {
        let mut q = vec![0, 7, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1];
        for label in name.split('.').filter(|l| !l.is_empty()) {
            q.push(label.len() as u8);
            q.extend_from_slice(label.as_bytes());
        }
        q.extend_from_slice(&[0, 0, 1, 0, 1]);
        q.extend_from_slice(&[0, 0, 41, 4, 208, 0, 0, 0x80, 0, 0, 0]);
        q
    }

    /// A snapshot of one zone signed by one Ed25519 CSK: an apex with its NS, and `www` with
    /// one A record. Built by hand, so the responder's tests need no configuration loader.
    fn signed_snapshot() -> Snapshot {
        let name = |t: &str| WireName::parse(t).unwrap();
        let origin = name("tm.example.test.");
        let soa = Soa {
            mname: name("ns1.tm.example.test."),
            rname: name("hostmaster.example.test."),
            refresh: 3600,
            retry: 600,
            expire: 604800,
            minimum: 300,
        };
        let mut nodes: FastMap<WireName, Node> = FastMap::default();
        let ns = vec![Box::<[u8]>::from(name("ns1.tm.example.test.").as_bytes())];
        let apex = RrSet { rtype: Rtype::NS, ttl: 300, rdata: ns };
        nodes.insert(origin.clone(), Node { rrsets: vec![apex], profile: None });
        let a = RrSet { rtype: Rtype::A, ttl: 300, rdata: vec![Box::from(&[192, 0, 2, 1][..])] };
        nodes.insert(name("www.tm.example.test."), Node { rrsets: vec![a], profile: None });
        let keys = vec![test_key(Algorithm::Ed25519, FLAGS_KSK, 3)];
        let zone = Zone {
            origin,
            soa_rdata: soa.rdata(1),
            soa,
            serial: 1,
            ttl: 300,
            nodes: Arc::new(nodes),
            fingerprint: 0,
            dnssec: Some(ZoneSigning { keys, validity: 86400, inception_offset: 0 }),
        };
        let health = Arc::new(HealthTable::new([]));
        Snapshot::new(Listen::default(), vec![zone], vec![], health, Arc::new(World::empty()))
    }

    #[test]
    fn past_the_budget_a_query_that_needs_a_new_signature_gets_no_reply() {
        let snap = signed_snapshot();
        // This thread may make three signatures, and never more.
        LOCAL.with_borrow_mut(|l| l.budget = Budget::new(0, 3));
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let mut out = Vec::new();
        let src: IpAddr = "127.0.0.1".parse().unwrap();
        let mut ask = |name: &str| {
            let q = query(name);
            let packet = Packet {
                bytes: &q,
                src,
                transport: Transport::Udp,
                now: 1_800_000_000,
                measured: None,
            };
            respond(&snap, &*snap.health, packet, &mut rng, &mut out, None).is_some()
        };
        // www: its A RRset (one signature). Two names that do not exist: the SOA and one
        // NSEC, then only an NSEC (the SOA's signature is cached).
        assert!(ask("www.tm.example.test."));
        assert!(ask("nx1.tm.example.test."));
        assert!(!ask("nx2.tm.example.test."), "a fourth signature is over the budget");
        assert!(!ask("nx3.tm.example.test."));
        // Cached signatures need no budget.
        assert!(ask("www.tm.example.test."));
        assert!(ask("nx1.tm.example.test."));
        flush_counts();
        // This snapshot's own counts: exact, whatever other tests of the binary do.
        let counts = snap.sign_counts.totals();
        assert_eq!((counts.made, counts.dropped, counts.answers), (3, 2, 4), "{counts:?}");
        // From the cache: the SOA's for nx2 and nx3 (their NSEC was over the budget), then
        // www's A, nx1's SOA and NSEC.
        assert_eq!(counts.cached, 5, "{counts:?}");
    }
}
