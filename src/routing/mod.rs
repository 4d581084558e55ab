//! The functional core: given a profile, a query and a health view, decide the answer.
//!
//! Everything here is pure — no I/O, no clock, no tokio. The DNS responder, `explain` and
//! the tests all call `route`, so the wire can never disagree with what an operator is told.
//! Randomness comes in as an `Rng` so tests can seed it. One file per routing method; each
//! returns a `Pick`, and this module resolves nested endpoints and assembles the `Decision`.

mod asn;
pub mod dial;
mod geographic;
mod geoproximity;
mod groups;
pub mod load;
mod multivalue;
mod name;
mod performance;
mod priority;
mod same_az;
mod scratch;
pub mod status;
mod subnet;
pub mod weighted;

use std::cell::RefCell;
use std::sync::Arc;

use arrayvec::ArrayVec;
use rand::Rng;

use crate::geo::World;
use crate::geo::rum::MeasuredLatency;
use crate::model::flat::{Family, FlatTable};
use crate::model::health::{HealthTable, HealthView, Status};
use crate::model::load::{EndpointLoad, LoadTable};
use crate::model::{Endpoint, Profile, ProfileId, Rules, Snapshot, Target, Want};

pub use crate::geo::Client;
pub use crate::model::MAX_ANSWERS;
pub use name::{Asked, route_name};
pub use scratch::{Pooled, Scratch};

/// The parts of the world a decision reads.
pub struct Ctx<'a, H: HealthView + ?Sized> {
    pub profiles: &'a [Arc<Profile>],
    pub health: &'a H,
    pub world: &'a World,
    /// Where `explain` collects the decision trace; `None` on the query path, where
    /// nothing is formatted.
    pub trace: Option<&'a Trace>,
    /// The published real user measurements, when `rum:` is on: `routing: performance`
    /// ranks regions by them first.
    pub measured: Option<&'a MeasuredLatency>,
    /// The endpoints' load shares, when any endpoint has a load feed (`load`); `None`
    /// costs the query path one branch.
    pub load: Option<&'a LoadTable>,
    /// The addresses of flattened host names; `None`: a flattened endpoint answers as if
    /// resolved (tests of the methods alone).
    pub flat: Option<&'a FlatTable>,
}

impl<'a, H: HealthView + ?Sized> Ctx<'a, H> {
    pub fn new(profiles: &'a [Arc<Profile>], health: &'a H, world: &'a World) -> Self {
        Ctx { profiles, health, world, trace: None, measured: None, load: None, flat: None }
    }

    /// Whether `ep` can answer `want`: by what it is, and for a flattened host name by
    /// whether the background resolver holds addresses of that family to serve (fresh, or
    /// stale within the bound). One atomic load; no clock.
    #[inline]
    pub fn can_answer(&self, ep: &Endpoint, want: Want) -> bool {
        ep.can_answer(want, self.profiles) && self.flat_serves(ep, want)
    }

    /// For a flattened endpoint: whether it has addresses to serve for `want`; true for
    /// every other endpoint.
    #[inline]
    pub fn flat_serves(&self, ep: &Endpoint, want: Want) -> bool {
        let (Target::Flat(_), Some(slot), Some(table)) = (&ep.target, ep.flat_slot, self.flat)
        else {
            return true;
        };
        let Some(slot) = table.slots.get(slot) else { return false };
        match want {
            Want::A | Want::V4Address => slot.usable(Family::V4),
            Want::Aaaa | Want::V6Address => slot.usable(Family::V6),
            Want::Cname => false,
            Want::Any => slot.any_usable(),
        }
    }

    /// Records one line of the decision trace (only when tracing).
    pub fn note(&self, line: impl FnOnce() -> String) {
        if let Some(t) = self.trace {
            t.lines.borrow_mut().push(line());
        }
    }
}

/// The steps of one decision, in words, as `explain` shows them.
#[derive(Default)]
pub struct Trace {
    lines: RefCell<Vec<String>>,
    loads: Option<LoadLookup>,
}

/// What the control loop last computed for an endpoint, by profile name (absolute, as
/// `Profile::name`) and endpoint name.
pub type LoadLookup = Box<dyn Fn(&str, &str) -> Option<EndpointLoad>>;

impl Trace {
    /// A trace that also shows each loaded endpoint's load, utilisation and target.
    pub fn with_loads(loads: LoadLookup) -> Trace {
        Trace { lines: RefCell::default(), loads: Some(loads) }
    }

    pub fn into_lines(self) -> Vec<String> {
        self.lines.into_inner()
    }

    fn load_of(&self, profile: &str, endpoint: &str) -> Option<EndpointLoad> {
        self.loads.as_ref().and_then(|f| f(profile, endpoint))
    }
}

impl std::fmt::Debug for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trace").field("lines", &self.lines).finish_non_exhaustive()
    }
}

impl<'a> Ctx<'a, HealthTable> {
    /// The snapshot's own profiles, live health and world.
    pub fn of(snap: &'a Snapshot) -> Self {
        let mut ctx = Ctx::new(&snap.profiles, &*snap.health, &snap.world);
        ctx.load = snap.load_table();
        ctx.flat = Some(&snap.flat);
        ctx
    }
}

impl<H: HealthView + ?Sized> Clone for Ctx<'_, H> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<H: HealthView + ?Sized> Copy for Ctx<'_, H> {}

/// The outcome of routing one query. NODATA is an expected outcome, not an error.
#[derive(Debug)]
pub enum Decision<'a> {
    /// Leaf endpoints (addresses or one host name) to answer with.
    Answer {
        endpoints: ArrayVec<&'a Endpoint, MAX_ANSWERS>,
        /// ECS scope prefix length the choice depended on.
        scope: u8,
    },
    /// No endpoint can answer: NOERROR with no records.
    NoData { scope: u8 },
}

/// An eligible endpoint: its index in the profile and its current status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub index: usize,
    pub status: Status,
}

/// A list of candidates in the thread's scratch space (any length, no allocation).
pub type Candidates = Scratch<Candidate>;

/// What a method chose, before nested endpoints are resolved. `scope` is the ECS scope
/// prefix length the choice depended on.
#[derive(Debug)]
pub enum Pick<'a> {
    /// One endpoint, by index in the profile.
    One { index: usize, scope: u8 },
    /// Several leaf endpoints (multivalue).
    Many(ArrayVec<&'a Endpoint, MAX_ANSWERS>),
    /// Nothing to answer with.
    NoData { scope: u8 },
}

/// One query as routing sees it.
#[derive(Clone, Copy, Debug)]
pub struct Query<'c> {
    pub want: Want,
    pub client: &'c Client,
}

/// Routes `q` at `profile` (which must be enabled).
pub fn route<'a, H, R>(
    ctx: Ctx<'a, H>,
    profile: ProfileId,
    q: Query<'_>,
    rng: &mut R,
) -> Decision<'a>
where
    H: HealthView + ?Sized,
    R: Rng + ?Sized,
{
    route_at(ctx, &ctx.profiles[profile], q, rng)
}

fn route_at<'a, H, R>(
    ctx: Ctx<'a, H>,
    profile: &'a Profile,
    q: Query<'_>,
    rng: &mut R,
) -> Decision<'a>
where
    H: HealthView + ?Sized,
    R: Rng + ?Sized,
{
    ctx.note(|| format!("profile {} (routing: {})", profile.name, profile.method.as_str()));
    if ctx.trace.is_some() {
        note_overrides(ctx, profile);
    }
    let pick = match &profile.rules {
        Rules::Plain => plain(ctx, profile, q, rng),
        Rules::Geographic { by_region, fallback_on_degraded, compiled, by_asn } => {
            let rules = geographic::Mapping { by_region, compiled, by_asn };
            geographic::pick(ctx, profile, rules, *fallback_on_degraded, q, rng)
        }
        Rules::Subnet { ranges, fallback, fallback_on_degraded } => {
            subnet::pick(ctx, profile, ranges, *fallback, *fallback_on_degraded, q, rng)
        }
        Rules::Performance { region } => performance::pick(ctx, profile, region, q, rng),
        Rules::Groups { groups } => groups::pick(ctx, profile, groups, q, rng),
        Rules::SameAz { az, safety_threshold } => {
            same_az::pick(ctx, profile, az, *safety_threshold, q, rng)
        }
        Rules::Asn { asns } => asn::pick(ctx, profile, asns, q),
        Rules::Geoproximity { sites } => geoproximity::pick(ctx, profile, sites, q),
    };
    match pick {
        Pick::One { index, scope } => resolve(ctx, &profile.endpoints[index], q, scope, rng),
        Pick::Many(endpoints) => Decision::Answer { endpoints, scope: 0 },
        Pick::NoData { scope } => {
            ctx.note(|| "no endpoint can answer: NODATA".to_string());
            Decision::NoData { scope }
        }
    }
}

/// Says which endpoints an operator drained or weighed at run time: they route as
/// configured otherwise, so a trace without this line would not explain the answer.
fn note_overrides<H: HealthView + ?Sized>(ctx: Ctx<'_, H>, profile: &Profile) {
    for ep in &profile.endpoints {
        if ep.drained {
            ctx.note(|| format!("endpoint {} is drained: it takes no answers", ep.name));
        }
        if let Some(w) = ep.weight_override {
            let was = ep.configured_weight;
            ctx.note(|| {
                format!("endpoint {} has weight {w} set at run time (configured {was})", ep.name)
            });
        }
        if let Some(b) = ep.bias_override {
            let was = ep.configured_bias;
            ctx.note(|| {
                format!("endpoint {} has bias {b} set at run time (configured {was})", ep.name)
            });
        }
    }
}

/// priority, weighted and multivalue: a choice among the eligible endpoints.
fn plain<'a, H, R>(ctx: Ctx<'a, H>, profile: &'a Profile, q: Query<'_>, rng: &mut R) -> Pick<'a>
where
    H: HealthView + ?Sized,
    R: Rng + ?Sized,
{
    let mut eligible = eligible(ctx, profile, q.want);
    if eligible.is_empty() {
        return Pick::NoData { scope: 0 };
    }
    match profile.method {
        crate::model::Method::Weighted => {
            let (i, scope) = weighted::pick(ctx, profile, &eligible, q.client, rng);
            return Pick::One { index: i, scope };
        }
        _ => load::thin(ctx, profile, &mut eligible, rng),
    }
    match profile.method {
        crate::model::Method::Multivalue => Pick::Many(multivalue::pick(profile, &eligible, rng)),
        _ => Pick::One { index: priority::pick(profile, &eligible), scope: 0 },
    }
}

/// Turns a picked endpoint into the answer: itself, or its child profile's answer.
fn resolve<'a, H, R>(
    ctx: Ctx<'a, H>,
    endpoint: &'a Endpoint,
    q: Query<'_>,
    scope: u8,
    rng: &mut R,
) -> Decision<'a>
where
    H: HealthView + ?Sized,
    R: Rng + ?Sized,
{
    ctx.note(|| format!("picked endpoint {}", endpoint.name));
    match &endpoint.target {
        Target::Nested(n) => match route_at(ctx, &ctx.profiles[n.child], q, rng) {
            Decision::Answer { endpoints, scope: s } => {
                Decision::Answer { endpoints, scope: scope.max(s) }
            }
            Decision::NoData { scope: s } => Decision::NoData { scope: scope.max(s) },
        },
        _ => {
            let mut endpoints = ArrayVec::new();
            endpoints.push(endpoint);
            Decision::Answer { endpoints, scope }
        }
    }
}

/// The endpoints that may be picked for `want`: the serving ones, or with fail-open and
/// none serving, the degraded ones. Disabled and stopped endpoints never qualify.
pub fn eligible<H: HealthView + ?Sized>(
    ctx: Ctx<'_, H>,
    profile: &Profile,
    want: Want,
) -> Candidates {
    // One list, filled by push and filtered in place, is the only one returned.
    let mut list = Candidates::take();
    for (index, ep) in profile.endpoints.iter().enumerate() {
        if ep.enabled && ep.can_answer(want, ctx.profiles) {
            if !ctx.flat_serves(ep, want) {
                ctx.note(|| {
                    format!(
                        "endpoint {} has no {} addresses to serve yet or any more: skipped",
                        ep.name,
                        asked(want)
                    )
                });
                continue;
            }
            list.push(Candidate { index, status: status::endpoint_status(ctx, ep) });
        }
    }
    ctx.note(|| {
        let names: Vec<String> = list
            .iter()
            .map(|c| format!("{} ({})", profile.endpoints[c.index].name, c.status))
            .collect();
        format!(
            "candidates for {}: {}",
            asked(want),
            if names.is_empty() { "none".into() } else { names.join(", ") }
        )
    });
    if list.is_empty() || list.iter().any(|c| c.status.is_serving()) || !profile.fail_open {
        list.retain(|c| c.status.is_serving());
        return list;
    }
    ctx.note(|| "no endpoint is serving; fail_open: degraded endpoints serve".to_string());
    list.retain(|c| c.status == Status::Degraded);
    list
}

/// What a query asks of the endpoints, as the trace shows it: record types as DNS writes
/// them.
fn asked(want: Want) -> &'static str {
    match want {
        Want::A => "A",
        Want::Aaaa => "AAAA",
        Want::Cname => "CNAME",
        Want::Any => "any type (host names and addresses)",
        Want::V4Address => "A (addresses only)",
        Want::V6Address => "AAAA (addresses only)",
    }
}

#[cfg(test)]
pub(crate) mod testkit;
