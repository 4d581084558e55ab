//! Signed answers (`docs/dnssec.md`, "Signed answers"): the RRSIGs after each RRset of a
//! signed zone when the query has DO set, the apex key sets, and compact denial (RFC 9824:
//! one NSEC at the query name instead of a proof from the zone's real names).
//!
//! A signature comes from the thread's own cache, else the snapshot's pre-signed table,
//! else it is made now, within the thread's budget; past the budget the query gets no
//! reply. The cache, budget and counts are the thread's own (`thread_local`), so the query
//! path takes no lock and, once warm, allocates nothing.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use arrayvec::ArrayVec;

use crate::model::presigned::Presigned;
use crate::model::sigcache::{Budget, CACHE_SLOTS, MISS_BURST, MISSES_PER_MS, SigCache};
use crate::model::signing::{self, Rrset, Signature};
use crate::model::zone::{Node, Zone};
use crate::model::{Families, Profile};
use crate::wire::dnssec::{compact_next_name, type_bitmap};
use crate::wire::response::{Owner, Section, Writer};
use crate::wire::{Rtype, dnssec};

/// The query could not be answered within the thread's signing budget: no reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverBudget;

/// Signing counts of the whole process, for metrics.
#[derive(Debug, Default)]
pub struct SignCounts {
    /// Answers that carried signatures.
    pub answers: AtomicU64,
    /// Signatures found in a thread's cache.
    pub cached: AtomicU64,
    /// Signatures found in the pre-signed table.
    pub presigned: AtomicU64,
    /// Signatures made while answering (cache misses).
    pub made: AtomicU64,
    /// Queries left unanswered because the budget was spent.
    pub dropped: AtomicU64,
}

/// The process's signing counts. Each thread adds its own counts in every so often (after
/// `FLUSH_EVERY` events, and on any miss or drop), so they may lag by that many per thread.
pub static COUNTS: SignCounts = SignCounts {
    answers: AtomicU64::new(0),
    cached: AtomicU64::new(0),
    presigned: AtomicU64::new(0),
    made: AtomicU64::new(0),
    dropped: AtomicU64::new(0),
};

const FLUSH_EVERY: u64 = 64;

/// Counts not yet added to `COUNTS`.
#[derive(Default)]
struct Pending {
    answers: u64,
    cached: u64,
    presigned: u64,
    made: u64,
    dropped: u64,
}

impl Pending {
    fn flush(&mut self) {
        for (n, to) in [
            (&mut self.answers, &COUNTS.answers),
            (&mut self.cached, &COUNTS.cached),
            (&mut self.presigned, &COUNTS.presigned),
            (&mut self.made, &COUNTS.made),
            (&mut self.dropped, &COUNTS.dropped),
        ] {
            if *n > 0 {
                to.fetch_add(*n, Ordering::Relaxed);
                *n = 0;
            }
        }
    }

    fn total(&self) -> u64 {
        self.answers + self.cached + self.presigned
    }
}

/// What a query thread keeps for signing.
struct Local {
    cache: SigCache,
    budget: Budget,
    scratch: Vec<u8>,
    pending: Pending,
}

thread_local! {
    static LOCAL: RefCell<Local> = RefCell::new(Local {
        cache: SigCache::new(CACHE_SLOTS),
        budget: Budget::new(MISSES_PER_MS, MISS_BURST),
        scratch: Vec::with_capacity(1024),
        pending: Pending::default(),
    });
}

/// Counts a signed answer, or a dropped query.
pub fn count(answered: bool) {
    LOCAL.with_borrow_mut(|l| {
        if answered {
            l.pending.answers += 1;
            if l.pending.total() >= FLUSH_EVERY {
                l.pending.flush();
            }
        } else {
            l.pending.dropped += 1;
            l.pending.flush();
        }
    });
}

/// Signing for one reply: the query had DO set.
pub struct Sign<'s> {
    pub presigned: &'s Presigned,
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
                l.pending.cached += 1;
                return Ok(Some(sig));
            }
            if let Some(sig) = self.presigned.get(ck).filter(|s| s.fresh(self.now)) {
                l.pending.presigned += 1;
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
                l.pending.made += 1;
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
            Rtype::DNSKEY => signing::dnskey_rdata(key),
            Rtype::CDNSKEY if key.is_sep() => signing::dnskey_rdata(key),
            Rtype::CDS if key.is_sep() => {
                let mut ds = ArrayVec::new();
                let _ = ds.try_extend_from_slice(&signing::ds_rdata(key, origin));
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
    use std::path::Path;

    use rand::SeedableRng;

    use super::*;
    use crate::model::dnssec::{Algorithm, FLAGS_KSK, ZoneSigning};
    use crate::model::signing::tests::test_key;
    use crate::responder::{Packet, Transport, respond};

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

    #[test]
    fn past_the_budget_a_query_that_needs_a_new_signature_gets_no_reply() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut snap = crate::config::load(&root.join("steerdns.yaml"), None).unwrap().snapshot;
        let keys = vec![test_key(Algorithm::Ed25519, FLAGS_KSK, 3)];
        snap.zones[0].dnssec = Some(ZoneSigning { keys, validity: 86400, inception_offset: 0 });
        // This thread may make three signatures, and never more.
        LOCAL.with_borrow_mut(|l| l.budget = Budget::new(0, 3));
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let mut out = Vec::new();
        let src: IpAddr = "127.0.0.1".parse().unwrap();
        let dropped = COUNTS.dropped.load(Ordering::Relaxed);
        let mut ask = |name: &str| {
            let q = query(name);
            let packet = Packet { bytes: &q, src, transport: Transport::Udp, now: 1_800_000_000 };
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
        assert!(COUNTS.dropped.load(Ordering::Relaxed) >= dropped + 2);
    }
}
