//! The one function both transports call: query bytes + client address + snapshot →
//! response bytes (what goes on the wire: `docs/wire.md`). UDP and TCP differ only in the
//! size limit they pass, so their behaviour cannot diverge; `explain` runs it too.

pub mod explain;
pub mod signed;

use std::net::{IpAddr, Ipv4Addr};

use arrayvec::ArrayVec;
use rand::Rng;

use crate::geo::rum::MeasuredLatency;
use crate::model::flat::{self, Family, Freshness, Lookup, MAX_FLAT_ADDRESSES};
use crate::model::health::HealthView;
use crate::model::signing::{self, Rrset};
use crate::model::snapshot::Snapshot;
use crate::model::zone::{Node, Zone};
use crate::model::{MAX_ANSWERS, Outcome, Target};
use crate::routing::{self, Asked, Client, Ctx, Decision, Trace};
use crate::wire::cookie::{ReplyCookie, Verdict};
use crate::wire::name::NameText;
use crate::wire::request::{self, Ecs, Parsed, Request};
use crate::wire::response::{EDNS_PAYLOAD, EcsEcho, Header, Opt, Owner, Section, Writer};
use crate::wire::{self, Rcode, Rtype};
use signed::{OverBudget, Sign};

/// Offset of the question name in every message.
const QNAME_AT: usize = 12;

/// How the query arrived; decides the largest response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

/// A query as it arrived.
#[derive(Clone, Copy, Debug)]
pub struct Packet<'q> {
    pub bytes: &'q [u8],
    /// The source address (the client, unless the query carries ECS).
    pub src: IpAddr,
    pub transport: Transport,
    /// When it arrived, in Unix seconds: for DNS cookies' timestamps.
    pub now: u32,
    /// The published real user measurements, loaded once per batch next to the snapshot;
    /// `None` when `rum:` is off.
    pub measured: Option<&'q MeasuredLatency>,
}

/// Answers `packet` into `out`. `None` when the packet gets no reply. With `trace`, each
/// step of the decision is noted there (for `explain`); the wire passes `None`, and then
/// nothing is formatted.
pub fn respond<R: Rng + ?Sized>(
    snap: &Snapshot,
    health: &dyn HealthView,
    packet: Packet<'_>,
    rng: &mut R,
    out: &mut Vec<u8>,
    trace: Option<&Trace>,
) -> Option<Outcome> {
    let mut name = request::NameBuf::new();
    match request::parse(packet.bytes, &mut name) {
        Parsed::Drop => None,
        Parsed::Error { id, opcode, rd, rcode, question, opt } => {
            let h = Header { id, opcode, aa: false, rd, cd: false, rcode };
            let mut w = Writer::new(out, h, question);
            if opt {
                w.opt(&Opt::default());
            }
            Some(Outcome { rcode, ..Outcome::default() })
        }
        Parsed::CookieOnly { id, rd, edns } => {
            let (cookie, verdict) =
                snap.cookies.reply(&edns.cookie?.read(packet.bytes)?, packet.src, packet.now);
            // RFC 7873 §5.4: a client cookie alone gets NOERROR and a server cookie; a server
            // cookie we cannot validate gets BADCOOKIE and a fresh one.
            let rcode = if edns.version > 0 {
                Rcode::BADVERS
            } else if verdict == Verdict::Invalid {
                Rcode::BADCOOKIE
            } else {
                Rcode::NOERROR
            };
            let h = Header { id, opcode: 0, aa: false, rd, cd: false, rcode };
            let mut w = Writer::new(out, h, None);
            w.opt(&Opt {
                ext_rcode: rcode.extended_bits(),
                dnssec_ok: edns.dnssec_ok,
                compact_ok: false,
                ecs: None,
                cookie: Some(&cookie),
            });
            Some(Outcome { rcode, cookie: Some(verdict), ..Outcome::default() })
        }
        Parsed::Query(req) => {
            let limit = match packet.transport {
                Transport::Udp => req.edns.map_or(512, |e| e.payload.clamp(512, EDNS_PAYLOAD)),
                Transport::Tcp => u16::MAX,
            };
            let mut outcome = Outcome {
                qtype: req.qtype,
                ecs: req.edns.is_some_and(|e| e.ecs.is_some()),
                ..Outcome::default()
            };
            let mut ctx = Ctx::new(&snap.profiles, health, &snap.world);
            ctx.trace = trace;
            ctx.measured = packet.measured;
            ctx.load = snap.load_table();
            ctx.flat = Some(&snap.flat);
            // The cookie of the reply: every reply to a query with a COOKIE option has one,
            // a truncated one too.
            let cookie = req.edns.and_then(|e| e.cookie).and_then(|at| at.read(packet.bytes));
            let cookie = cookie.map(|c| snap.cookies.reply(&c, packet.src, packet.now));
            outcome.cookie = cookie.map(|(_, v)| v);
            let reply = Reply { req: &req, cookie: cookie.as_ref().map(|(c, _)| c) };
            let sign = req.edns.filter(|e| e.dnssec_ok).map(|_| Sign {
                presigned: &snap.signatures,
                counts: &snap.sign_counts,
                now: packet.now,
            });
            let now = u64::from(packet.now);
            let written =
                answer(snap, ctx, &reply, packet.src, now, sign.as_ref(), rng, out, &mut outcome);
            let Ok(written) = written else {
                ctx.note(|| "over the signing budget: no reply".to_string());
                signed::count(&snap.sign_counts, false);
                return None;
            };
            if written.signed {
                signed::count(&snap.sign_counts, true);
            }
            if out.len() > usize::from(limit) {
                truncate(&reply, written, out);
            }
            outcome.rcode = Rcode::from_parts(out[3], 0);
            if req.edns.is_some_and(|e| e.version > 0) {
                outcome.rcode = Rcode::BADVERS;
            }
            Some(outcome)
        }
    }
}

/// Rewrites `out`, the reply to `packet` that the rate limiter holds back, as the short reply
/// it lets through instead; returns that reply's RCODE. A query with a client cookie but no
/// valid server cookie gets BADCOOKIE and a fresh server cookie (RFC 7873 §5.2.3): a real
/// resolver retries with it, and a valid server cookie is never limited. Any other gets the
/// header and question with TC set, so a real resolver retries over TCP.
pub fn slip(snap: &Snapshot, packet: Packet<'_>, out: &mut Vec<u8>) -> Rcode {
    let mut name = request::NameBuf::new();
    match request::parse(packet.bytes, &mut name) {
        // Already as short as a reply gets.
        Parsed::CookieOnly { .. } => Rcode::from_parts(out[3], 0),
        Parsed::Query(req)
            if let Some(cookie) =
                req.edns.and_then(|e| e.cookie).and_then(|at| at.read(packet.bytes)) =>
        {
            let (cookie, _) = snap.cookies.reply(&cookie, packet.src, packet.now);
            let reply = Reply { req: &req, cookie: Some(&cookie) };
            let mut w = Writer::new(out, reply.header(Rcode::BADCOOKIE, false), Some(req.question));
            reply.finish(&mut w, Rcode::BADCOOKIE.extended_bits(), 0);
            Rcode::BADCOOKIE
        }
        _ => {
            wire::response::cut_to_question(out);
            Rcode::from_parts(out[3], 0)
        }
    }
}

/// What the reply's header and OPT record need to know once the answer is written.
struct Reply<'q> {
    req: &'q Request<'q>,
    cookie: Option<&'q ReplyCookie>,
}

impl Reply<'_> {
    fn header(&self, rcode: Rcode, aa: bool) -> Header {
        Header { id: self.req.id, opcode: 0, aa, rd: self.req.rd, cd: self.req.cd, rcode }
    }

    /// Adds the OPT (only when the query had one), with ECS echoed at `scope`.
    #[inline]
    fn finish(&self, w: &mut Writer<'_>, ext_rcode: u8, scope: u8) {
        self.finish_with(w, ext_rcode, scope, false);
    }

    /// `finish`, with the CO flag echoed when the reply is a compact NXDOMAIN.
    #[inline]
    fn finish_with(&self, w: &mut Writer<'_>, ext_rcode: u8, scope: u8, compact_ok: bool) {
        let Some(edns) = self.req.edns else { return };
        w.opt(&Opt {
            ext_rcode,
            dnssec_ok: edns.dnssec_ok,
            compact_ok,
            ecs: edns.ecs.map(|e| ecs_echo(e, scope)),
            cookie: self.cookie.map(|c| &c[..]),
        });
    }
}

fn ecs_echo(e: Ecs, scope: u8) -> EcsEcho {
    let mut addr = [0u8; 16];
    match e.addr {
        IpAddr::V4(a) => addr[..4].copy_from_slice(&a.octets()),
        IpAddr::V6(a) => addr.copy_from_slice(&a.octets()),
    }
    // RFC 7871 §7.2.1: a /0 query gets a /0 scope.
    let scope = if e.source == 0 { 0 } else { scope };
    EcsEcho { family: e.family, source: e.source, scope, addr }
}

/// What a written answer needs remembered for a truncated rewrite and for counting.
#[derive(Clone, Copy, Debug, Default)]
struct Written {
    /// The ECS scope used.
    scope: u8,
    /// The answer carries signatures.
    signed: bool,
    /// A compact NXDOMAIN: CO is echoed.
    compact: bool,
}

/// Writes the full answer. `sign` is set when the query has DO: then the answers of
/// signed zones carry RRSIGs and their denials are compact.
#[allow(clippy::too_many_arguments)]
fn answer<R: Rng + ?Sized>(
    snap: &Snapshot,
    ctx: Ctx<'_, dyn HealthView + '_>,
    reply: &Reply<'_>,
    src: IpAddr,
    now: u64,
    sign: Option<&Sign<'_>>,
    rng: &mut R,
    out: &mut Vec<u8>,
    outcome: &mut Outcome,
) -> Result<Written, OverBudget> {
    let req = reply.req;
    let simple = |out: &mut Vec<u8>, rcode: Rcode, ext: u8| {
        let mut w = Writer::new(out, reply.header(rcode, false), Some(req.question));
        reply.finish(&mut w, ext, 0);
        Ok(Written::default())
    };
    if let Some(e) = req.edns
        && e.version > 0
    {
        return simple(out, Rcode::NOERROR, Rcode::BADVERS.extended_bits());
    }
    if req.qclass != 1 || matches!(req.qtype, Rtype::AXFR | Rtype::IXFR) {
        return simple(out, Rcode::REFUSED, 0);
    }
    // Meta-types: OPT, and NXNAME, which only compact denial's NSEC bitmaps hold (RFC 9824).
    if matches!(req.qtype, Rtype::OPT | Rtype::NXNAME) {
        return simple(out, Rcode::FORMERR, 0);
    }
    let Some((zi, zone, origin_at)) = snap.find_zone(req.qname) else {
        ctx.note(|| "the name is outside every zone: REFUSED".to_string());
        return simple(out, Rcode::REFUSED, 0);
    };
    outcome.zone = Some(zi);
    let signed = sign.is_some() && zone.dnssec.is_some();
    if signed {
        ctx.note(|| "DO is set and the zone is signed: signed answer".to_string());
    }
    let client = client_of(req, src);
    let mut chain = Chain { snap, ctx, client: &client, rng, outcome, sign, now };
    let apex = Owner::At(QNAME_AT + origin_at);
    let Some(node) = zone.node(req.qname) else {
        ctx.note(|| format!("no such name in zone {}: NXDOMAIN", zone.origin));
        return nxdomain(reply, zone, apex, sign, out);
    };
    if origin_at == 0 && zone.dnssec.is_some() && signing::is_key_set(req.qtype) {
        ctx.note(|| format!("the zone's {} RRset", req.qtype));
        let mut w = Writer::new(out, reply.header(Rcode::NOERROR, true), Some(req.question));
        let owner = Owner::At(QNAME_AT);
        if !signed::key_set(&mut w, owner, zone, req.qtype, now, sign)? {
            let types = signed::node_types(zone, node, true, now);
            nodata(&mut w, apex, zone, sign, owner, req.qname, &types)?;
        }
        reply.finish(&mut w, 0, 0);
        return Ok(Written { signed, ..Written::default() });
    }
    // A profile at the apex answers A and AAAA; the apex's own records answer the rest.
    let at_apex = origin_at == 0;
    if let Some(pid) = node.profile
        && (!at_apex || snap.profiles[pid].enabled && matches!(req.qtype, Rtype::A | Rtype::AAAA))
    {
        chain.outcome.profile = Some(pid);
        let profile = &snap.profiles[pid];
        if !profile.enabled {
            ctx.note(|| format!("profile {} is disabled: NXDOMAIN", profile.name));
            return nxdomain(reply, zone, apex, sign, out);
        }
        if req.qtype == Rtype::ANY {
            ctx.note(|| "ANY: one synthesized HINFO record (RFC 8482)".to_string());
            return rfc8482(reply, zone, sign, out);
        }
        let mut w = Writer::new(out, reply.header(Rcode::NOERROR, true), Some(req.question));
        let owner = Owner::At(QNAME_AT);
        let scope = match chain.profile_records(&mut w, owner, req.qname, pid, req.qtype)? {
            Link::To(target, scope) => scope.max(chain.follow(&mut w, target, req.qtype)?),
            Link::End(scope) => scope,
            Link::NoData(scope) => {
                let mut types: ArrayVec<Rtype, 24> =
                    signed::profile_types(profile, req.qtype).into_iter().collect();
                if at_apex {
                    types.extend(signed::node_types(zone, node, true, now));
                }
                nodata(&mut w, apex, zone, sign, owner, req.qname, &types)?;
                scope
            }
        };
        reply.finish(&mut w, 0, scope);
        return Ok(Written { scope, signed, compact: false });
    }
    ctx.note(|| "not a profile: static zone data".to_string());
    let scope = static_answer(reply, zone, node, origin_at == 0, apex, &mut chain, out)?;
    Ok(Written { scope, signed, compact: false })
}

/// Where writing one name's records leaves a CNAME chain.
enum Link<'a> {
    /// A CNAME to this name was written: follow it.
    To(&'a [u8], u8),
    /// Records were written and the chain ends here.
    End(u8),
    /// The name has nothing of the asked type.
    NoData(u8),
}

/// What routing a profile name needs, whether it is the query name or a CNAME target: the
/// same client, randomness and counters for every name of a chain.
struct Chain<'a, 'q, R: ?Sized> {
    snap: &'a Snapshot,
    ctx: Ctx<'a, dyn HealthView + 'a>,
    client: &'q Client,
    rng: &'q mut R,
    outcome: &'q mut Outcome,
    sign: Option<&'q Sign<'q>>,
    /// The query's arrival (Unix seconds): which keys are published and active.
    now: u64,
}

/// The longest CNAME chain followed inside one answer; past it the resolver goes on.
const MAX_CHAIN: usize = 8;

impl<'a, R: Rng + ?Sized> Chain<'a, '_, R> {
    /// Routes profile `pid` for the chain's client and writes its answer records at `owner`
    /// (the name `name`), with their RRSIGs when signing, and the ECS scope the decision
    /// depended on.
    #[inline]
    fn profile_records(
        &mut self,
        w: &mut Writer<'_>,
        owner: Owner<'_>,
        name: &[u8],
        pid: usize,
        qtype: Rtype,
    ) -> Result<Link<'a>, OverBudget> {
        let profile = &self.snap.profiles[pid];
        let asked = match qtype {
            Rtype::A => Asked::A,
            Rtype::AAAA => Asked::Aaaa,
            _ => Asked::Other,
        };
        Ok(match routing::route_name(self.ctx, pid, asked, self.client, self.rng) {
            // Flattened: one endpoint (methods returning several take addresses only).
            Decision::Answer { ref endpoints, scope }
                if let [ep] = endpoints.as_slice()
                    && let Target::Flat(host) = &ep.target =>
            {
                if let Some(slot) = ep.health_slot {
                    let _ = self.outcome.endpoints.try_push(slot);
                }
                let family = match qtype {
                    Rtype::A => Family::V4,
                    Rtype::AAAA => Family::V6,
                    _ => return Ok(Link::NoData(scope)),
                };
                let Some(slot) = ep.flat_slot.and_then(|s| self.snap.flat.slots.get(s)) else {
                    return Ok(Link::NoData(scope));
                };
                let lookup = slot.lookup(family);
                let Some(lookup) = &*lookup else {
                    self.ctx
                        .note(|| format!("{host} has no {} lookup yet: NODATA", family.as_str()));
                    return Ok(Link::NoData(scope));
                };
                let freshness = lookup.freshness(self.now, profile.ttl, self.snap.flat.rules);
                if self.ctx.trace.is_some() {
                    self.ctx.note(|| {
                        flat::describe(&ep.name, host, family, lookup, self.now, freshness)
                    });
                } else if let Freshness::Stale { .. } = freshness {
                    slot.stale_answers.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                match freshness.ttl() {
                    Some(ttl) if !lookup.addresses.is_empty() => {
                        let zone = &self.snap.zones[profile.zone];
                        flat_records(
                            w,
                            owner,
                            name,
                            zone,
                            lookup,
                            family,
                            ttl,
                            profile.ttl,
                            self.sign,
                        )?;
                        Link::End(scope)
                    }
                    _ => Link::NoData(scope),
                }
            }
            Decision::Answer { endpoints, scope } => {
                for ep in &endpoints {
                    endpoint_record(w, owner, &ep.target, profile.ttl);
                    if let Some(slot) = ep.health_slot {
                        // A long chain may hand out more endpoints than are counted.
                        let _ = self.outcome.endpoints.try_push(slot);
                    }
                }
                if let Some(sign) = self.sign {
                    let zone = &self.snap.zones[profile.zone];
                    sign_endpoints(sign, w, owner, name, zone, &endpoints, profile.ttl)?;
                }
                match endpoints.first().map(|ep| &ep.target) {
                    Some(Target::Host(name)) if qtype != Rtype::CNAME => {
                        Link::To(name.as_bytes(), scope)
                    }
                    _ => Link::End(scope),
                }
            }
            Decision::NoData { scope } => Link::NoData(scope),
        })
    }

    /// Follows a CNAME chain through the names this server answers for (RFC 1034 §4.3.2,
    /// step 3a), adding each target's records: static records as they are, a profile routed
    /// for the same client. A target outside every zone, absent or disabled ends the chain
    /// (the resolver goes on from there); a target without the type ends it with its zone's
    /// SOA. Returns the narrowest ECS scope the chain depended on.
    fn follow(
        &mut self,
        w: &mut Writer<'_>,
        first: &'a [u8],
        qtype: Rtype,
    ) -> Result<u8, OverBudget> {
        let mut target = first;
        let mut scope = 0;
        for _ in 0..MAX_CHAIN {
            let Some((_, zone, origin_at)) = self.snap.find_zone(target) else { break };
            let Some(node) = zone.node(target) else { break };
            let owner = Owner::Wire(target);
            let link = match node.profile {
                Some(pid) if !self.snap.profiles[pid].enabled => break,
                Some(pid) => self.profile_records(w, owner, target, pid, qtype)?,
                None => static_records(w, owner, target, zone, node, qtype, self.sign)?,
            };
            self.ctx.note(|| format!("followed the CNAME to {}", NameText(target)));
            match link {
                Link::To(next, s) => {
                    scope = scope.max(s);
                    target = next;
                }
                Link::End(s) => return Ok(scope.max(s)),
                Link::NoData(s) => {
                    let soa = Owner::Wire(&target[origin_at..]);
                    let types: ArrayVec<Rtype, 22> = match node.profile {
                        Some(pid) => signed::profile_types(&self.snap.profiles[pid], qtype)
                            .into_iter()
                            .collect(),
                        None => signed::node_types(zone, node, origin_at == 0, self.now),
                    };
                    nodata(w, soa, zone, self.sign, owner, target, &types)?;
                    return Ok(scope.max(s));
                }
            }
        }
        Ok(scope)
    }
}

/// The addresses of a flattened name's lookup at `owner` (the name `name`) with `ttl`, and
/// their RRSIGs when signing. The signatures name the profile's TTL as the original one,
/// so that one signature serves the whole countdown (RFC 4034 §3.1.4 allows the TTL
/// written to be lower).
#[allow(clippy::too_many_arguments)]
fn flat_records(
    w: &mut Writer<'_>,
    owner: Owner<'_>,
    name: &[u8],
    zone: &Zone,
    lookup: &Lookup,
    family: Family,
    ttl: u32,
    original_ttl: u32,
    sign: Option<&Sign<'_>>,
) -> Result<(), OverBudget> {
    let mut rdata: ArrayVec<[u8; 16], MAX_FLAT_ADDRESSES> = ArrayVec::new();
    let len = match family {
        Family::V4 => 4,
        Family::V6 => 16,
    };
    for addr in &lookup.addresses {
        let mut bytes = [0u8; 16];
        match (addr, family) {
            (IpAddr::V4(a), Family::V4) => bytes[..4].copy_from_slice(&a.octets()),
            (IpAddr::V6(a), Family::V6) => bytes.copy_from_slice(&a.octets()),
            _ => continue,
        }
        rdata.push(bytes);
    }
    let rtype = match family {
        Family::V4 => Rtype::A,
        Family::V6 => Rtype::AAAA,
    };
    for rd in &rdata {
        w.record(Section::Answer, owner, rtype, ttl, &rd[..len]);
    }
    if let Some(sign) = sign {
        let set =
            Rrset { owner: name, rtype, ttl: original_ttl, rdata: rdata.iter().map(|r| &r[..len]) };
        sign.rrsigs(w, Section::Answer, owner, zone, set, ttl)?;
    }
    Ok(())
}

/// The RRSIGs of the endpoint records just written at `owner`: one RRset per type.
fn sign_endpoints(
    sign: &Sign<'_>,
    w: &mut Writer<'_>,
    owner: Owner<'_>,
    name: &[u8],
    zone: &Zone,
    endpoints: &[&crate::model::Endpoint],
    ttl: u32,
) -> Result<(), OverBudget> {
    let mut v4: ArrayVec<[u8; 4], MAX_ANSWERS> = ArrayVec::new();
    let mut v6: ArrayVec<[u8; 16], MAX_ANSWERS> = ArrayVec::new();
    for ep in endpoints {
        match &ep.target {
            Target::V4(a) => v4.push(a.octets()),
            Target::V6(a) => v6.push(a.octets()),
            Target::Host(host) => {
                let rdata = std::iter::once(host.as_bytes());
                let set = Rrset { owner: name, rtype: Rtype::CNAME, ttl, rdata };
                sign.rrsigs(w, Section::Answer, owner, zone, set, ttl)?;
            }
            Target::Nested(_) | Target::Flat(_) => {}
        }
    }
    if !v4.is_empty() {
        let set = Rrset { owner: name, rtype: Rtype::A, ttl, rdata: v4.iter().map(|a| &a[..]) };
        sign.rrsigs(w, Section::Answer, owner, zone, set, ttl)?;
    }
    if !v6.is_empty() {
        let set = Rrset { owner: name, rtype: Rtype::AAAA, ttl, rdata: v6.iter().map(|a| &a[..]) };
        sign.rrsigs(w, Section::Answer, owner, zone, set, ttl)?;
    }
    Ok(())
}

/// The records of `qtype` (or the CNAME) of a static name at `owner` (the name `name`),
/// with their RRSIGs when signing.
#[inline]
fn static_records<'a>(
    w: &mut Writer<'_>,
    owner: Owner<'_>,
    name: &[u8],
    zone: &Zone,
    node: &'a Node,
    qtype: Rtype,
    sign: Option<&Sign<'_>>,
) -> Result<Link<'a>, OverBudget> {
    let Some(set) = node.rrset(qtype).or_else(|| node.rrset(Rtype::CNAME)) else {
        return Ok(Link::NoData(0));
    };
    for rd in &set.rdata {
        w.record(Section::Answer, owner, set.rtype, set.ttl, rd);
    }
    if let Some(sign) = sign {
        let rdata = set.rdata.iter().map(|r| &r[..]);
        let signed = Rrset { owner: name, rtype: set.rtype, ttl: set.ttl, rdata };
        sign.rrsigs(w, Section::Answer, owner, zone, signed, set.ttl)?;
    }
    Ok(match set.rtype {
        Rtype::CNAME if qtype != Rtype::CNAME => Link::To(&set.rdata[0], 0),
        _ => Link::End(0),
    })
}

/// The client for routing: the ECS subnet if the query has one, else the source address.
fn client_of(req: &Request<'_>, src: IpAddr) -> Client {
    match req.edns.and_then(|e| e.ecs) {
        Some(e) if e.source > 0 => Client::new(e.addr, e.source),
        Some(_) => Client::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        None => Client::from_addr(src),
    }
}

#[inline]
fn endpoint_record(w: &mut Writer<'_>, owner: Owner<'_>, target: &Target, ttl: u32) {
    match target {
        Target::V4(a) => w.record(Section::Answer, owner, Rtype::A, ttl, &a.octets()),
        Target::V6(a) => w.record(Section::Answer, owner, Rtype::AAAA, ttl, &a.octets()),
        Target::Host(n) => w.record(Section::Answer, owner, Rtype::CNAME, ttl, n.as_bytes()),
        Target::Nested(_) => unreachable!("routing resolves nested endpoints"),
        // Written by `flat_records`, with the addresses resolved for it.
        Target::Flat(_) => {}
    }
}

/// The zone's SOA in the authority section, with the negative-caching TTL (RFC 2308).
#[inline]
fn negative_soa(w: &mut Writer<'_>, apex: Owner<'_>, zone: &Zone) {
    w.record(Section::Authority, apex, Rtype::SOA, zone.negative_ttl(), &zone.soa_rdata);
}

/// The authority section of a negative answer: the SOA, and when signing its RRSIGs and
/// the compact denial NSEC at `name` (written at `owner`) with the types it has.
fn nodata(
    w: &mut Writer<'_>,
    apex: Owner<'_>,
    zone: &Zone,
    sign: Option<&Sign<'_>>,
    owner: Owner<'_>,
    name: &[u8],
    types: &[Rtype],
) -> Result<(), OverBudget> {
    negative_soa(w, apex, zone);
    let Some(sign) = sign.filter(|_| zone.dnssec.is_some()) else { return Ok(()) };
    let rdata = std::iter::once(&zone.soa_rdata[..]);
    let soa = Rrset { owner: zone.origin.as_bytes(), rtype: Rtype::SOA, ttl: zone.ttl, rdata };
    sign.rrsigs(w, Section::Authority, apex, zone, soa, zone.negative_ttl())?;
    sign.nsec(w, owner, name, zone, types)
}

/// A name that does not exist: NXDOMAIN with the SOA, or when signing compact denial
/// (RFC 9824): NOERROR with an NSEC whose bitmap says NXNAME, NXDOMAIN only when the
/// query has the CO flag.
fn nxdomain(
    reply: &Reply<'_>,
    zone: &Zone,
    apex: Owner<'_>,
    sign: Option<&Sign<'_>>,
    out: &mut Vec<u8>,
) -> Result<Written, OverBudget> {
    let req = reply.req;
    let signed = sign.is_some() && zone.dnssec.is_some();
    let compact = signed && req.edns.is_some_and(|e| e.compact_ok);
    let rcode = if signed && !compact { Rcode::NOERROR } else { Rcode::NXDOMAIN };
    let mut w = Writer::new(out, reply.header(rcode, true), Some(req.question));
    nodata(&mut w, apex, zone, sign, Owner::At(QNAME_AT), req.qname, &[Rtype::NXNAME])?;
    reply.finish_with(&mut w, 0, 0, compact);
    Ok(Written { scope: 0, signed, compact })
}

/// RFC 8482: answer ANY with one synthesized HINFO record instead of everything.
fn rfc8482(
    reply: &Reply<'_>,
    zone: &Zone,
    sign: Option<&Sign<'_>>,
    out: &mut Vec<u8>,
) -> Result<Written, OverBudget> {
    const HINFO: &[u8] = b"\x07RFC8482\x00";
    let mut w = Writer::new(out, reply.header(Rcode::NOERROR, true), Some(reply.req.question));
    let owner = Owner::At(QNAME_AT);
    w.record(Section::Answer, owner, Rtype::HINFO, zone.ttl, HINFO);
    if let Some(sign) = sign {
        let set = Rrset {
            owner: reply.req.qname,
            rtype: Rtype::HINFO,
            ttl: zone.ttl,
            rdata: std::iter::once(HINFO),
        };
        sign.rrsigs(&mut w, Section::Answer, owner, zone, set, zone.ttl)?;
    }
    reply.finish(&mut w, 0, 0);
    Ok(Written { signed: sign.is_some() && zone.dnssec.is_some(), ..Written::default() })
}

fn static_answer<'a, R: Rng + ?Sized>(
    reply: &Reply<'_>,
    zone: &Zone,
    node: &'a Node,
    is_apex: bool,
    apex: Owner<'_>,
    chain: &mut Chain<'a, '_, R>,
    out: &mut Vec<u8>,
) -> Result<u8, OverBudget> {
    let req = reply.req;
    let qtype = req.qtype;
    let sign = chain.sign;
    if qtype == Rtype::ANY {
        return rfc8482(reply, zone, sign, out).map(|w| w.scope);
    }
    let mut w = Writer::new(out, reply.header(Rcode::NOERROR, true), Some(req.question));
    let owner = Owner::At(QNAME_AT);
    let scope = if is_apex && qtype == Rtype::SOA {
        w.record(Section::Answer, owner, Rtype::SOA, zone.ttl, &zone.soa_rdata);
        if let Some(sign) = sign {
            let rdata = std::iter::once(&zone.soa_rdata[..]);
            let set = Rrset { owner: req.qname, rtype: Rtype::SOA, ttl: zone.ttl, rdata };
            sign.rrsigs(&mut w, Section::Answer, owner, zone, set, zone.ttl)?;
        }
        0
    } else {
        match static_records(&mut w, owner, req.qname, zone, node, qtype, sign)? {
            Link::To(target, _) => chain.follow(&mut w, target, qtype)?,
            Link::End(_) => {
                if qtype == Rtype::NS
                    && is_apex
                    && let Some(set) = node.rrset(Rtype::NS)
                {
                    glue(&mut w, zone, &set.rdata);
                }
                0
            }
            Link::NoData(_) => {
                let mut types: ArrayVec<Rtype, 24> =
                    signed::node_types(zone, node, is_apex, chain.now).into_iter().collect();
                // A profile at the apex: its address types exist too.
                if let Some(pid) = node.profile {
                    types.extend(signed::profile_types(&chain.snap.profiles[pid], qtype));
                }
                nodata(&mut w, apex, zone, sign, owner, req.qname, &types)?;
                0
            }
        }
    };
    reply.finish(&mut w, 0, scope);
    Ok(scope)
}

/// Addresses of in-zone name servers, in the additional section (never signed: glue).
fn glue(w: &mut Writer<'_>, zone: &Zone, ns_names: &[Box<[u8]>]) {
    for ns in ns_names {
        let Some(node) = zone.node(ns) else { continue };
        for rtype in [Rtype::A, Rtype::AAAA] {
            if let Some(set) = node.rrset(rtype) {
                for rd in &set.rdata {
                    w.record(Section::Additional, Owner::Wire(ns), rtype, set.ttl, rd);
                }
            }
        }
    }
}

/// Rewrites an oversized UDP answer as header + question (+ OPT) with TC set.
fn truncate(reply: &Reply<'_>, written: Written, out: &mut Vec<u8>) {
    let rcode = Rcode::from_parts(out[3], 0);
    let aa = out[2] & 0x04 != 0;
    let mut w = Writer::new(out, reply.header(rcode, aa), Some(reply.req.question));
    w.set_truncated();
    reply.finish_with(&mut w, 0, written.scope, written.compact);
}
