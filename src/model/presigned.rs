//! Signatures made ahead of queries, off the query path: the answers of a signed zone are
//! a small, known set (its static RRsets, SOA, NS, key sets, and each endpoint's record
//! under each profile name, through nesting), so they are signed after a load and again
//! before they age, and the query path only looks them up. The table lives in the snapshot
//! and is replaced whole (an `ArcSwap`), never changed in place.

use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwapOption;

use super::signing::{self, Rrset, Signature};
use super::snapshot::Snapshot;
use super::{Method, Profile, Target};
use crate::FastMap;
use crate::wire::Rtype;

/// A complete set of pre-made signatures, by content key (`signing::content_key`).
#[derive(Debug, Default)]
pub struct Table {
    pub sigs: FastMap<u128, Signature>,
}

/// The snapshot's current table; empty until the first one is built.
#[derive(Default)]
pub struct Presigned(ArcSwapOption<Table>);

impl Presigned {
    /// The pre-made signature under `key`, if any (lock-free).
    #[inline]
    pub fn get(&self, key: u128) -> Option<Signature> {
        self.0.load().as_ref()?.sigs.get(&key).copied()
    }

    pub fn table(&self) -> Option<Arc<Table>> {
        self.0.load_full()
    }

    pub fn store(&self, table: Arc<Table>) {
        self.0.store(Some(table));
    }
}

impl fmt::Debug for Presigned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.load().as_ref().map_or(0, |t| t.sigs.len());
        write!(f, "Presigned({n} signatures)")
    }
}

/// One RRset the zone can answer with, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Known {
    pub zone: usize,
    pub owner: Vec<u8>,
    pub rtype: Rtype,
    pub ttl: u32,
    pub rdata: Vec<Vec<u8>>,
}

/// Every RRset the signed zones of `snap` answer with at `now` (Unix seconds), apart from
/// multivalue subsets and denials, which depend on the query.
pub fn known_rrsets(snap: &Snapshot, now: u64) -> Vec<Known> {
    let mut out = Vec::new();
    for (zi, zone) in snap.zones.iter().enumerate() {
        let Some(signing) = &zone.dnssec else { continue };
        let origin = zone.origin.as_bytes();
        let apex =
            |rtype, ttl, rdata| Known { zone: zi, owner: origin.to_vec(), rtype, ttl, rdata };
        out.push(apex(Rtype::SOA, zone.ttl, vec![zone.soa_rdata.to_vec()]));
        let keys = || signing::published(signing, now);
        out.push(apex(
            Rtype::DNSKEY,
            zone.ttl,
            keys().map(|k| k.dnskey_rdata().to_vec()).collect(),
        ));
        let sep = || keys().filter(|k| k.is_sep());
        out.push(apex(
            Rtype::CDNSKEY,
            zone.ttl,
            sep().map(|k| k.dnskey_rdata().to_vec()).collect(),
        ));
        out.push(apex(Rtype::CDS, zone.ttl, sep().map(|k| k.ds_rdata(origin).to_vec()).collect()));
        for (name, node) in zone.nodes.iter() {
            for set in &node.rrsets {
                out.push(Known {
                    zone: zi,
                    owner: name.as_bytes().to_vec(),
                    rtype: set.rtype,
                    ttl: set.ttl,
                    rdata: set.rdata.iter().map(|r| r.to_vec()).collect(),
                });
            }
        }
    }
    for p in snap.profiles.iter().filter(|p| p.enabled) {
        if snap.zones.get(p.zone).is_none_or(|z| z.dnssec.is_none()) {
            continue;
        }
        let mut leaves = Vec::new();
        leaves_of(&snap.profiles, p, &mut leaves, 0);
        leaves.sort();
        leaves.dedup();
        let known = |rtype, rdata| Known {
            zone: p.zone,
            owner: p.wire.as_bytes().to_vec(),
            rtype,
            ttl: p.ttl,
            rdata,
        };
        for (rtype, rdata) in &leaves {
            out.push(known(*rtype, vec![rdata.clone()]));
        }
        // Multivalue with every endpoint up: all addresses of a family at once.
        if p.method == Method::Multivalue {
            for family in [Rtype::A, Rtype::AAAA] {
                let all: Vec<Vec<u8>> =
                    leaves.iter().filter(|(t, _)| *t == family).map(|(_, r)| r.clone()).collect();
                if all.len() > 1 && all.len() <= usize::from(p.max_return) {
                    out.push(known(family, all));
                }
            }
        }
    }
    out
}

/// The records `p` can answer with, through nested children (enabled endpoints only).
fn leaves_of(
    profiles: &[Arc<Profile>],
    p: &Profile,
    out: &mut Vec<(Rtype, Vec<u8>)>,
    depth: usize,
) {
    if depth > 16 {
        return;
    }
    for ep in p.endpoints.iter().filter(|e| e.enabled) {
        match &ep.target {
            Target::V4(a) => out.push((Rtype::A, a.octets().to_vec())),
            Target::V6(a) => out.push((Rtype::AAAA, a.octets().to_vec())),
            Target::Host(n) => out.push((Rtype::CNAME, n.as_bytes().to_vec())),
            // Its addresses change as they are resolved: signed when answered.
            Target::Flat(_) => {}
            Target::Nested(n) => {
                if let Some(child) = profiles.get(n.child) {
                    leaves_of(profiles, child, out, depth + 1);
                }
            }
        }
    }
}

/// What building a table did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Built {
    pub signed: usize,
    pub reused: usize,
}

/// Signs `known` with every key that signs each RRset at `now`, on `threads` threads.
/// A signature of `previous` for the same content is reused while it will still be fresh
/// at `now + ahead` (when the next table is due).
pub fn build(
    snap: &Snapshot,
    known: &[Known],
    previous: Option<&Table>,
    now: u32,
    ahead: u32,
    threads: usize,
) -> (Table, Built) {
    let chunk = known.len().div_ceil(threads.max(1)).max(1);
    let parts: Vec<(Vec<(u128, Signature)>, Built)> = std::thread::scope(|s| {
        let handles: Vec<_> = known
            .chunks(chunk)
            .map(|part| s.spawn(move || sign_part(snap, part, previous, now, ahead)))
            .collect();
        handles.into_iter().map(|h| h.join().expect("a signing thread panicked")).collect()
    });
    let mut table = Table::default();
    let mut built = Built::default();
    for (sigs, b) in parts {
        table.sigs.extend(sigs);
        built.signed += b.signed;
        built.reused += b.reused;
    }
    (table, built)
}

fn sign_part(
    snap: &Snapshot,
    part: &[Known],
    previous: Option<&Table>,
    now: u32,
    ahead: u32,
) -> (Vec<(u128, Signature)>, Built) {
    let mut out = Vec::with_capacity(part.len());
    let mut built = Built::default();
    let mut scratch = signing::Scratch::new();
    for k in part {
        let zone = &snap.zones[k.zone];
        let Some(signing) = &zone.dnssec else { continue };
        if k.rdata.is_empty() {
            continue;
        }
        let origin = zone.origin.as_bytes();
        let set = Rrset {
            owner: &k.owner,
            rtype: k.rtype,
            ttl: k.ttl,
            rdata: k.rdata.iter().map(|r| &r[..]),
        };
        for key in
            signing.keys.iter().filter(|key| signing::signs(signing, key, k.rtype, now.into()))
        {
            let ck = signing::content_key(key, &set);
            let old = previous
                .and_then(|t| t.sigs.get(&ck))
                .filter(|s| s.fresh(now.saturating_add(ahead)));
            let sig = match old {
                Some(s) => {
                    built.reused += 1;
                    *s
                }
                None => match signing::sign(signing, key, origin, &set, now, &mut scratch) {
                    Some(s) => {
                        built.signed += 1;
                        s
                    }
                    None => continue,
                },
            };
            out.push((ck, sig));
        }
    }
    (out, built)
}
