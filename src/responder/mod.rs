//! The one function both transports call: query bytes + client address + snapshot →
//! response bytes (what goes on the wire: `docs/wire.md`). UDP and TCP differ only in the
//! size limit they pass, so their behaviour cannot diverge; `explain` runs it too.

pub mod explain;

use std::net::{IpAddr, Ipv4Addr};

use rand::Rng;

use crate::model::health::HealthView;
use crate::model::snapshot::Snapshot;
use crate::model::zone::{Node, Zone};
use crate::model::{Outcome, Target};
use crate::routing::{self, Asked, Client, Ctx, Decision, Trace};
use crate::wire::cookie::{ReplyCookie, Verdict};
use crate::wire::name::NameText;
use crate::wire::request::{self, Ecs, Parsed, Request};
use crate::wire::response::{EDNS_PAYLOAD, EcsEcho, Header, Opt, Owner, Section, Writer};
use crate::wire::{self, Rcode, Rtype};

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
            // The cookie of the reply: every reply to a query with a COOKIE option has one,
            // a truncated one too.
            let cookie = req.edns.and_then(|e| e.cookie).and_then(|at| at.read(packet.bytes));
            let cookie = cookie.map(|c| snap.cookies.reply(&c, packet.src, packet.now));
            outcome.cookie = cookie.map(|(_, v)| v);
            let reply = Reply { req: &req, cookie: cookie.as_ref().map(|(c, _)| c) };
            let scope = answer(snap, ctx, &reply, packet.src, rng, out, &mut outcome);
            if out.len() > usize::from(limit) {
                truncate(&reply, scope, out);
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
        let Some(edns) = self.req.edns else { return };
        w.opt(&Opt {
            ext_rcode,
            dnssec_ok: edns.dnssec_ok,
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

/// Writes the full answer; returns the ECS scope used (for a truncated rewrite).
fn answer<R: Rng + ?Sized>(
    snap: &Snapshot,
    ctx: Ctx<'_, dyn HealthView + '_>,
    reply: &Reply<'_>,
    src: IpAddr,
    rng: &mut R,
    out: &mut Vec<u8>,
    outcome: &mut Outcome,
) -> u8 {
    let req = reply.req;
    let simple = |out: &mut Vec<u8>, rcode: Rcode, ext: u8| {
        let mut w = Writer::new(out, reply.header(rcode, false), Some(req.question));
        reply.finish(&mut w, ext, 0);
        0
    };
    if let Some(e) = req.edns
        && e.version > 0
    {
        return simple(out, Rcode::NOERROR, Rcode::BADVERS.extended_bits());
    }
    if req.qclass != 1 || matches!(req.qtype, Rtype::AXFR | Rtype::IXFR) {
        return simple(out, Rcode::REFUSED, 0);
    }
    if req.qtype == Rtype::OPT {
        return simple(out, Rcode::FORMERR, 0);
    }
    let Some((zi, zone, origin_at)) = snap.find_zone(req.qname) else {
        ctx.note(|| "the name is outside every zone: REFUSED".to_string());
        return simple(out, Rcode::REFUSED, 0);
    };
    outcome.zone = Some(zi);
    let client = client_of(req, src);
    let mut chain = Chain { snap, ctx, client: &client, rng, outcome };
    let apex = Owner::At(QNAME_AT + origin_at);
    let Some(node) = zone.node(req.qname) else {
        ctx.note(|| format!("no such name in zone {}: NXDOMAIN", zone.origin));
        return negative(reply, zone, apex, Rcode::NXDOMAIN, out);
    };
    if let Some(pid) = node.profile {
        chain.outcome.profile = Some(pid);
        let profile = &snap.profiles[pid];
        if !profile.enabled {
            ctx.note(|| format!("profile {} is disabled: NXDOMAIN", profile.name));
            return negative(reply, zone, apex, Rcode::NXDOMAIN, out);
        }
        if req.qtype == Rtype::ANY {
            ctx.note(|| "ANY: one synthesized HINFO record (RFC 8482)".to_string());
            return rfc8482(reply, zone, out);
        }
        let mut w = Writer::new(out, reply.header(Rcode::NOERROR, true), Some(req.question));
        let scope = match chain.profile_records(&mut w, Owner::At(QNAME_AT), pid, req.qtype) {
            Link::To(target, scope) => scope.max(chain.follow(&mut w, target, req.qtype)),
            Link::End(scope) => scope,
            Link::NoData(scope) => {
                negative_soa(&mut w, apex, zone);
                scope
            }
        };
        reply.finish(&mut w, 0, scope);
        return scope;
    }
    ctx.note(|| "not a profile: static zone data".to_string());
    static_answer(reply, zone, node, origin_at == 0, apex, &mut chain, out)
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
}

/// The longest CNAME chain followed inside one answer; past it the resolver goes on.
const MAX_CHAIN: usize = 8;

impl<'a, R: Rng + ?Sized> Chain<'a, '_, R> {
    /// Routes profile `pid` for the chain's client and writes its answer records at `owner`
    /// (with the ECS scope the decision depended on).
    #[inline]
    fn profile_records(
        &mut self,
        w: &mut Writer<'_>,
        owner: Owner<'_>,
        pid: usize,
        qtype: Rtype,
    ) -> Link<'a> {
        let profile = &self.snap.profiles[pid];
        let asked = match qtype {
            Rtype::A => Asked::A,
            Rtype::AAAA => Asked::Aaaa,
            _ => Asked::Other,
        };
        match routing::route_name(self.ctx, pid, asked, self.client, self.rng) {
            Decision::Answer { endpoints, scope } => {
                for ep in &endpoints {
                    endpoint_record(w, owner, &ep.target, profile.ttl);
                    if let Some(slot) = ep.health_slot {
                        // A long chain may hand out more endpoints than are counted.
                        let _ = self.outcome.endpoints.try_push(slot);
                    }
                }
                match endpoints.first().map(|ep| &ep.target) {
                    Some(Target::Host(name)) if qtype != Rtype::CNAME => {
                        Link::To(name.as_bytes(), scope)
                    }
                    _ => Link::End(scope),
                }
            }
            Decision::NoData { scope } => Link::NoData(scope),
        }
    }

    /// Follows a CNAME chain through the names this server answers for (RFC 1034 §4.3.2,
    /// step 3a), adding each target's records: static records as they are, a profile routed
    /// for the same client. A target outside every zone, absent or disabled ends the chain
    /// (the resolver goes on from there); a target without the type ends it with its zone's
    /// SOA. Returns the narrowest ECS scope the chain depended on.
    fn follow(&mut self, w: &mut Writer<'_>, first: &'a [u8], qtype: Rtype) -> u8 {
        let mut target = first;
        let mut scope = 0;
        for _ in 0..MAX_CHAIN {
            let Some((_, zone, origin_at)) = self.snap.find_zone(target) else { break };
            let Some(node) = zone.node(target) else { break };
            let owner = Owner::Wire(target);
            let link = match node.profile {
                Some(pid) if !self.snap.profiles[pid].enabled => break,
                Some(pid) => self.profile_records(w, owner, pid, qtype),
                None => static_records(w, owner, node, qtype),
            };
            self.ctx.note(|| format!("followed the CNAME to {}", NameText(target)));
            match link {
                Link::To(next, s) => {
                    scope = scope.max(s);
                    target = next;
                }
                Link::End(s) => return scope.max(s),
                Link::NoData(s) => {
                    let soa = Owner::Wire(&target[origin_at..]);
                    negative_soa(w, soa, zone);
                    return scope.max(s);
                }
            }
        }
        scope
    }
}

/// The records of `qtype` (or the CNAME) of a static name at `owner`.
#[inline]
fn static_records<'a>(
    w: &mut Writer<'_>,
    owner: Owner<'_>,
    node: &'a Node,
    qtype: Rtype,
) -> Link<'a> {
    let Some(set) = node.rrset(qtype).or_else(|| node.rrset(Rtype::CNAME)) else {
        return Link::NoData(0);
    };
    for rd in &set.rdata {
        w.record(Section::Answer, owner, set.rtype, set.ttl, rd);
    }
    match set.rtype {
        Rtype::CNAME if qtype != Rtype::CNAME => Link::To(&set.rdata[0], 0),
        _ => Link::End(0),
    }
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
    }
}

/// The zone's SOA in the authority section, with the negative-caching TTL (RFC 2308).
#[inline]
fn negative_soa(w: &mut Writer<'_>, apex: Owner<'_>, zone: &Zone) {
    w.record(Section::Authority, apex, Rtype::SOA, zone.negative_ttl(), &zone.soa_rdata);
}

/// NXDOMAIN or NODATA: SOA in authority with the negative TTL.
fn negative(
    reply: &Reply<'_>,
    zone: &Zone,
    apex: Owner<'_>,
    rcode: Rcode,
    out: &mut Vec<u8>,
) -> u8 {
    let mut w = Writer::new(out, reply.header(rcode, true), Some(reply.req.question));
    negative_soa(&mut w, apex, zone);
    reply.finish(&mut w, 0, 0);
    0
}

/// RFC 8482: answer ANY with one synthesized HINFO record instead of everything.
fn rfc8482(reply: &Reply<'_>, zone: &Zone, out: &mut Vec<u8>) -> u8 {
    let mut w = Writer::new(out, reply.header(Rcode::NOERROR, true), Some(reply.req.question));
    w.record(Section::Answer, Owner::At(QNAME_AT), Rtype::HINFO, zone.ttl, b"\x07RFC8482\x00");
    reply.finish(&mut w, 0, 0);
    0
}

fn static_answer<'a, R: Rng + ?Sized>(
    reply: &Reply<'_>,
    zone: &Zone,
    node: &'a Node,
    is_apex: bool,
    apex: Owner<'_>,
    chain: &mut Chain<'a, '_, R>,
    out: &mut Vec<u8>,
) -> u8 {
    let qtype = reply.req.qtype;
    if qtype == Rtype::ANY {
        return rfc8482(reply, zone, out);
    }
    let mut w = Writer::new(out, reply.header(Rcode::NOERROR, true), Some(reply.req.question));
    let owner = Owner::At(QNAME_AT);
    let scope = if is_apex && qtype == Rtype::SOA {
        w.record(Section::Answer, owner, Rtype::SOA, zone.ttl, &zone.soa_rdata);
        0
    } else {
        match static_records(&mut w, owner, node, qtype) {
            Link::To(target, _) => chain.follow(&mut w, target, qtype),
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
                negative_soa(&mut w, apex, zone);
                0
            }
        }
    };
    reply.finish(&mut w, 0, scope);
    scope
}

/// Addresses of in-zone name servers, in the additional section.
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
fn truncate(reply: &Reply<'_>, scope: u8, out: &mut Vec<u8>) {
    let rcode = Rcode::from_parts(out[3], 0);
    let aa = out[2] & 0x04 != 0;
    let mut w = Writer::new(out, reply.header(rcode, aa), Some(reply.req.question));
    w.set_truncated();
    reply.finish(&mut w, 0, scope);
}
