//! A real caching resolver (Unbound) in front of the example configuration as shipped
//! (`steerdns.yaml`, `profiles/`, `zones/`, `geo-data/` at the repository root, listening on
//! a free loopback port instead of 5353): a resolver's cache is what an authoritative
//! server really answers to, so every answer a client gets through it must be the answer
//! steerdns gives that client directly.
//!
//! - Each profile answers A and AAAA consistently: a name is a CNAME for every type or for
//!   none (a resolver answers any type from a cached CNAME), whichever type comes first.
//! - ECS answers are cached per scope: a client inside the scope of a cached answer gets
//!   what steerdns answers that client, one just outside it is asked anew, and clients of
//!   different networks get different answers through the resolver.
//! - A static CNAME to a profile name is answered with the whole chain.
//!
//! Without `unbound` (Debian package `unbound`) the resolver checks are skipped, with a
//! message; steerdns's own answers are still checked. The failures of a test are collected
//! and reported together, so one run shows every mismatch.

mod common;

use std::net::IpAddr;
use std::path::Path;

use common::*;

// ---------------------------------------------------------------------------------------
// The example configuration
// ---------------------------------------------------------------------------------------

fn repo(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        }
    }
}

/// The shipped `steerdns.yaml` with its `listen:` block changed to one free loopback port
/// and no admin API; every other line as shipped.
fn on_free_port(yaml: &str) -> String {
    let mut out = String::new();
    let mut in_listen = false;
    let mut dns = false;
    for line in yaml.lines() {
        if !line.starts_with(' ') && !line.is_empty() {
            in_listen = line.starts_with("listen:");
        }
        if in_listen && line.trim_start().starts_with("dns:") {
            out.push_str("  dns: [\"127.0.0.1:0\"]\n");
            dns = true;
        } else if !(in_listen && line.trim_start().starts_with("admin:")) {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(dns, "no listen.dns line in the example steerdns.yaml:\n{yaml}");
    out
}

/// Starts the example configuration on a free loopback port.
async fn start_example() -> Harness {
    let dir = tempfile::tempdir().expect("tempdir");
    for sub in ["profiles", "zones", "geo-data"] {
        copy_dir(&repo(sub), &dir.path().join(sub));
    }
    let yaml = std::fs::read_to_string(repo("steerdns.yaml")).unwrap();
    std::fs::write(dir.path().join("steerdns.yaml"), on_free_port(&yaml)).unwrap();
    Harness::in_dir(dir).await
}

/// One profile of `profiles/*.yaml`, as far as these tests need it.
#[derive(Debug)]
struct ExampleProfile {
    name: String,
    routing: String,
    sticky: bool,
    /// Some endpoint is another profile.
    nests: bool,
}

impl ExampleProfile {
    /// The same client always gets the same records (else only the record kinds are
    /// compared). A nested profile's answer is its child's, which may be random.
    fn deterministic(&self) -> bool {
        !self.nests
            && match self.routing.as_str() {
                "priority" | "geographic" | "performance" | "subnet" => true,
                "weighted" => self.sticky,
                _ => false,
            }
    }
}

/// Every profile document of the example's `profiles/` (top-level keys read line by line).
fn example_profiles() -> Vec<ExampleProfile> {
    let mut files: Vec<_> = std::fs::read_dir(repo("profiles"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let value = |line: &str, key: &str| {
        line.strip_prefix(key).map(|v| v.split('#').next().unwrap().trim().to_string())
    };
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let docs = text.split("\n---").map(|d| d.trim_start_matches("---"));
        for doc in docs {
            let mut p = ExampleProfile {
                name: String::new(),
                routing: String::new(),
                sticky: false,
                nests: false,
            };
            for line in doc.lines() {
                if let Some(v) = value(line, "name:") {
                    p.name = v;
                } else if let Some(v) = value(line, "routing:") {
                    p.routing = v;
                } else if let Some(v) = value(line, "sticky:") {
                    p.sticky = v == "true";
                }
                p.nests |= line.contains(" profile:");
            }
            if !p.name.is_empty() {
                out.push(p);
            }
        }
    }
    assert!(out.len() >= 10, "the example has a dozen profiles: {out:?}");
    out
}

fn absolute(name: &str) -> String {
    if name.ends_with('.') { name.to_lowercase() } else { fq(name) }
}

// ---------------------------------------------------------------------------------------
// Answers
// ---------------------------------------------------------------------------------------

fn type_name(t: u16) -> &'static str {
    match t {
        T_A => "A",
        T_AAAA => "AAAA",
        _ => "?",
    }
}

/// What an answer says about one name: RCODE and the records owned by the name ("A
/// 192.0.2.10", "CNAME cdn.example.net."), sorted.
#[derive(Clone, Debug, PartialEq, Eq)]
struct AtName {
    rcode: u16,
    records: Vec<String>,
}

impl AtName {
    fn of(r: &Reply, name: &str) -> AtName {
        let mut records: Vec<String> = r
            .answers
            .iter()
            .filter(|rr| rr.name.to_ascii().to_lowercase() == name.to_lowercase())
            .map(|rr| rdata_string(&rr.data))
            .collect();
        records.sort();
        AtName { rcode: r.rcode(), records }
    }

    fn cname(&self) -> Option<&str> {
        self.records.iter().find(|r| r.starts_with("CNAME ")).map(String::as_str)
    }

    /// The record types only ("A", "AAAA", "CNAME").
    fn kinds(&self) -> AtName {
        let mut records: Vec<String> =
            self.records.iter().map(|r| r.split(' ').next().unwrap().to_string()).collect();
        records.dedup();
        AtName { rcode: self.rcode, records }
    }

    fn same(&self, other: &AtName, exact: bool) -> bool {
        if exact { self == other } else { self.kinds() == other.kinds() }
    }
}

impl std::fmt::Display for AtName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rcode = match self.rcode {
            NOERROR => "NOERROR".to_string(),
            NXDOMAIN => "NXDOMAIN".to_string(),
            2 => "SERVFAIL".to_string(),
            REFUSED => "REFUSED".to_string(),
            n => format!("RCODE {n}"),
        };
        if self.records.is_empty() {
            write!(f, "{rcode} (no records)")
        } else {
            write!(f, "{rcode} [{}]", self.records.join(", "))
        }
    }
}

/// steerdns's own answer to `name`/`qtype` for the harness client (127.0.0.1), with the ECS
/// option when given.
async fn direct(h: &Harness, name: &str, qtype: u16, ecs: Option<(IpAddr, u8)>) -> AtName {
    let mut q = Q::new(name, qtype);
    if let Some((a, len)) = ecs {
        q = q.edns().ecs(a, len);
    }
    AtName::of(&h.udp(&q).await, name)
}

/// The resolver's answer and the ECS scope it reports.
async fn through(
    res: &Resolver,
    name: &str,
    qtype: u16,
    ecs: Option<(IpAddr, u8)>,
) -> (AtName, Option<u8>) {
    let mut q = Q::new(name, qtype).edns();
    if let Some((a, len)) = ecs {
        q = q.ecs(a, len);
    }
    let r = res.query(&q).await;
    (AtName::of(&r, name), r.ecs().map(|e| e.2))
}

/// Starts a fresh resolver in front of `h` (the test has checked that Unbound exists).
fn fresh_resolver(h: &Harness) -> Resolver {
    Resolver::start(h.addr, ORIGIN).expect("unbound was found a moment ago")
}

fn assert_no_failures(what: &str, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{what}: {} failure(s):\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
}

// ---------------------------------------------------------------------------------------
// 1. A and AAAA in either order
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_profile_answers_a_and_aaaa_alike_through_a_resolver_in_either_order() {
    let h = start_example().await;
    let profiles = example_profiles();
    let names: Vec<&str> = profiles.iter().map(|p| p.name.as_str()).collect();
    println!("profiles: {}", names.join(", "));
    let mut failures = Vec::new();

    // steerdns itself, without ECS, from the address the resolver queries it from.
    let mut answers = Vec::new();
    for p in &profiles {
        let name = absolute(&p.name);
        let a = direct(&h, &name, T_A, None).await;
        let aaaa = direct(&h, &name, T_AAAA, None).await;
        if a.cname() != aaaa.cname() {
            failures.push(format!(
                "{name} ({}): steerdns answers A with {a} but AAAA with {aaaa}: a name must \
                 be a CNAME for every type or for none",
                p.routing
            ));
        }
        answers.push((name, a, aaaa));
    }
    if !Resolver::available() {
        // Only steerdns's own answers were checked.
        h.stop().await;
        assert_no_failures("A and AAAA asked directly", &failures);
        return;
    }

    // Through a fresh resolver per order: the first type fills its cache.
    for (t1, t2) in [(T_AAAA, T_A), (T_A, T_AAAA)] {
        let res = fresh_resolver(&h);
        for (p, (name, a, aaaa)) in profiles.iter().zip(&answers) {
            let want = |t| if t == T_A { a } else { aaaa };
            let exact = p.deterministic();
            let how = if exact { "records" } else { "record kinds" };
            let order = format!("{} then {}", type_name(t1), type_name(t2));
            for (i, t) in [t1, t2].into_iter().enumerate() {
                let (got, _) = through(&res, name, t, None).await;
                if got.same(want(t), exact) {
                    continue;
                }
                let mut msg = format!(
                    "{name} ({}), {order}: the resolver answers {} with {got}, steerdns \
                     answers {} ({how} compared)",
                    p.routing,
                    type_name(t),
                    want(t),
                );
                if i == 1 && got.cname().is_some() && want(t).cname().is_none() {
                    msg.push_str(&format!(
                        ": the CNAME cached from the {} answer stands for every type",
                        type_name(t1)
                    ));
                }
                failures.push(msg);
            }
        }
        drop(res);
    }
    h.stop().await;
    assert_no_failures("A and AAAA through a resolver", &failures);
}

// ---------------------------------------------------------------------------------------
// 2. ECS answers cached per scope
// ---------------------------------------------------------------------------------------

/// The same address with the last bit of its first `scope` bits flipped: just outside
/// `addr/scope`.
fn outside(addr: IpAddr, scope: u8) -> IpAddr {
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let bit = u32::from(scope.min(max)) - 1;
    match addr {
        IpAddr::V4(a) => IpAddr::V4((u32::from(a) ^ (1 << (31 - bit))).into()),
        IpAddr::V6(a) => IpAddr::V6((u128::from(a) ^ (1 << (127 - bit))).into()),
    }
}

/// Queries `name` A through a fresh resolver with the ECS clients of `seq` in turn, and
/// right after the first, with a /32 (/128) client just outside the scope the resolver
/// reports for that first answer (the first answer must have a scope). Each answer must be
/// what steerdns answers that client directly, and the answers through the resolver must
/// not all be the same: a resolver that ignored ECS would pass every other check. Returns
/// the failures.
async fn ecs_sequence(h: &Harness, name: &str, seq: &[(IpAddr, u8)]) -> Vec<String> {
    let res = fresh_resolver(h);
    let mut failures = Vec::new();
    let mut answers: Vec<AtName> = Vec::new();
    let mut asked: Vec<String> = Vec::new();
    let mut clients: Vec<(IpAddr, u8, &str)> = seq.iter().map(|&(a, l)| (a, l, "")).collect();
    let mut i = 0;
    while i < clients.len() {
        let (addr, len, note) = clients[i];
        asked.push(format!("{addr}/{len}{note}"));
        let (got, got_scope) = through(&res, name, T_A, Some((addr, len))).await;
        let want = direct(h, name, T_A, Some((addr, len))).await;
        let scope = got_scope.map_or("no ECS".to_string(), |s| format!("scope {s}"));
        if !answers.contains(&got) {
            answers.push(got.clone());
        }
        if got != want {
            failures.push(format!(
                "{name} A, ECS {}: the last one gets {got} ({scope}) through the resolver, \
                 steerdns answers {want}",
                asked.join(", then "),
            ));
        }
        if i == 0 {
            let max = if addr.is_ipv4() { 32 } else { 128 };
            match got_scope {
                Some(s) if s > 0 => {
                    clients.insert(1, (outside(addr, s), max, " (outside the first's scope)"));
                }
                s => failures.push(format!(
                    "{name} A, ECS {addr}/{len}: the resolver reports scope {s:?}, so no client \
                     is outside it: steerdns's answer depends on the client's network"
                )),
            }
        }
        i += 1;
    }
    println!("{name}: asked through a fresh resolver with ECS {}", asked.join(", then "));
    if answers.len() < 2 {
        failures.push(format!(
            "{name} A, ECS {}: every client got {:?} through the resolver; the clients were \
             chosen for different answers",
            asked.join(", then "),
            answers
        ));
    }
    drop(res);
    failures
}

fn v4(s: &str, len: u8) -> (IpAddr, u8) {
    (ip(s), len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geographic_ecs_answers_are_cached_per_scope() {
    if !Resolver::available() {
        return;
    }
    let h = start_example().await;
    let geo = fq("geo");
    // The example's documented answers, so the comparisons below are not vacuous.
    assert_eq!(
        direct(&h, &geo, T_A, Some(v4("192.0.2.130", 32))).await.records,
        ["A 198.51.100.61"],
        "US-CA: us-west"
    );
    assert_eq!(
        direct(&h, &geo, T_A, Some(v4("192.0.2.0", 24))).await.records,
        ["A 192.0.2.61"],
        "192.0.2.0 is FR: eu-1"
    );
    let mut failures = Vec::new();
    failures.extend(ecs_sequence(&h, &geo, &[v4("192.0.2.0", 24), v4("192.0.2.130", 32)]).await);
    failures.extend(ecs_sequence(&h, &geo, &[v4("192.0.2.130", 32), v4("192.0.2.0", 24)]).await);
    h.stop().await;
    assert_no_failures("geographic ECS answers through a resolver", &failures);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn performance_ecs_answers_are_cached_per_scope() {
    if !Resolver::available() {
        return;
    }
    let h = start_example().await;
    let name = fq("fast");
    // Two clients of one /24 that steerdns answers differently.
    let mut pair = None;
    'search: for net in ["192.0.2", "198.51.100", "203.0.113", "100.64.1"] {
        let mut seen: Vec<(IpAddr, AtName)> = Vec::new();
        for host in [1, 63, 64, 127, 128, 130, 191, 192, 254] {
            let client = ip(&format!("{net}.{host}"));
            let a = direct(&h, &name, T_A, Some((client, 32))).await;
            if let Some((other, _)) = seen.iter().find(|(_, b)| *b != a) {
                pair = Some((ip(&format!("{net}.0")), *other, client));
                break 'search;
            }
            seen.push((client, a));
        }
    }
    // The example places 192.0.2.0/25 in FR and 192.0.2.128/25 in US-CA, and measures
    // 198.51.100.128/25 apart from the rest of its /24: such a pair exists.
    let (net, a, b) = pair.expect("a /24 of the example with two clients answered differently");
    println!("{name}: {a} and {b} get different answers");
    let mut failures = Vec::new();
    failures.extend(ecs_sequence(&h, &name, &[(net, 24), (a, 32), (b, 32)]).await);
    failures.extend(ecs_sequence(&h, &name, &[(a, 32), (b, 32), (net, 24)]).await);
    h.stop().await;
    assert_no_failures("performance ECS answers through a resolver", &failures);
}

// ---------------------------------------------------------------------------------------
// 3. A static CNAME to a profile
// ---------------------------------------------------------------------------------------

/// The answer section as "owner TYPE value", in order.
fn chain(r: &Reply) -> Vec<String> {
    r.answers
        .iter()
        .map(|rr| format!("{} {}", rr.name.to_ascii().to_lowercase(), rdata_string(&rr.data)))
        .collect()
}

/// `docs` CNAME `www` followed by steerdns's own answer for `www`.
async fn docs_chain(h: &Harness, qtype: u16) -> Vec<String> {
    let www = fq("www");
    let mut want = vec![format!("{} CNAME {www}", fq("docs"))];
    want.extend(chain(&h.udp(&Q::new(&www, qtype)).await));
    want
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_cname_to_a_profile_is_answered_with_the_chain() {
    let h = start_example().await;
    let www = fq("www");
    assert_eq!(
        chain(&h.udp(&Q::new(&www, T_A)).await),
        [format!("{www} A 192.0.2.10")],
        "www: priority 1"
    );
    let mut failures = Vec::new();
    for qtype in [T_A, T_AAAA] {
        let want = docs_chain(&h, qtype).await;
        let r = h.udp(&Q::new(&fq("docs"), qtype)).await;
        if r.rcode() != NOERROR || !r.aa() || chain(&r) != want {
            failures.push(format!(
                "docs {}: steerdns answers {:?} (rcode {}, AA {}), want {want:?}",
                type_name(qtype),
                chain(&r),
                r.rcode(),
                r.aa()
            ));
        }
    }
    h.stop().await;
    assert_no_failures("CNAME to a profile, asked directly", &failures);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_cname_to_a_profile_resolves_through_a_resolver() {
    if !Resolver::available() {
        return;
    }
    let h = start_example().await;
    let res = fresh_resolver(&h);
    let mut failures = Vec::new();
    for qtype in [T_A, T_AAAA] {
        let want = docs_chain(&h, qtype).await;
        let r = res.query(&Q::new(&fq("docs"), qtype).edns()).await;
        if r.rcode() != NOERROR || chain(&r) != want {
            failures.push(format!(
                "docs {} through the resolver: {:?} (rcode {}), want {want:?}",
                type_name(qtype),
                chain(&r),
                r.rcode()
            ));
        }
    }
    drop(res);
    h.stop().await;
    assert_no_failures("CNAME to a profile, through a resolver", &failures);
}
