//! The functional core: given a profile, a query and a health view, decide the answer.
//!
//! Everything here is pure — no I/O, no clock, no tokio. The DNS responder, `explain` and
//! the tests all call `route`, so the wire can never disagree with what an operator is told.
//! Randomness comes in as an `Rng` so tests can seed it.

pub mod dial;
mod multivalue;
mod priority;
pub mod status;
pub mod weighted;

use std::cell::RefCell;
use std::net::IpAddr;

use arrayvec::ArrayVec;
use rand::Rng;
use smallvec::SmallVec;

use crate::health::{HealthView, Status};
use crate::model::{Endpoint, Method, Profile, ProfileId, Target, Want};

/// Most records one routing decision returns (multivalue's `max_return` is at most 10).
pub const MAX_ANSWERS: usize = 10;

/// The client a decision is made for: the ECS address when the query has one, else the
/// source address. `prefix` is how many leading bits of `addr` are known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Client {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Client {
    pub fn from_addr(addr: IpAddr) -> Client {
        let prefix = if addr.is_ipv4() { 32 } else { 128 };
        Client { addr, prefix }
    }
}

/// The parts of the world a decision reads.
pub struct Ctx<'a, H: HealthView + ?Sized> {
    pub profiles: &'a [Profile],
    pub health: &'a H,
    /// Where `explain` collects the decision trace; `None` on the query path, where
    /// nothing is formatted.
    pub trace: Option<&'a RefCell<Vec<String>>>,
}

impl<'a, H: HealthView + ?Sized> Ctx<'a, H> {
    pub fn new(profiles: &'a [Profile], health: &'a H) -> Self {
        Ctx { profiles, health, trace: None }
    }

    /// Records one line of the decision trace (only when tracing).
    pub fn note(&self, line: impl FnOnce() -> String) {
        if let Some(t) = self.trace {
            t.borrow_mut().push(line());
        }
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

pub type Candidates = SmallVec<[Candidate; 16]>;

/// Routes a query for `want` at `profile` (which must be enabled) for `client`.
pub fn route<'a, H, R>(
    ctx: Ctx<'a, H>,
    profile: ProfileId,
    want: Want,
    client: Client,
    rng: &mut R,
) -> Decision<'a>
where
    H: HealthView + ?Sized,
    R: Rng + ?Sized,
{
    route_at(ctx, &ctx.profiles[profile], want, client, rng)
}

fn route_at<'a, H, R>(
    ctx: Ctx<'a, H>,
    profile: &'a Profile,
    want: Want,
    client: Client,
    rng: &mut R,
) -> Decision<'a>
where
    H: HealthView + ?Sized,
    R: Rng + ?Sized,
{
    let eligible = eligible(ctx, profile, want);
    if eligible.is_empty() {
        return Decision::NoData { scope: 0 };
    }
    let (picked, scope) = match profile.method {
        Method::Priority => (priority::pick(profile, &eligible), 0),
        Method::Weighted => weighted::pick(profile, &eligible, client, rng),
        Method::Multivalue => {
            return Decision::Answer {
                endpoints: multivalue::pick(profile, &eligible, rng),
                scope: 0,
            };
        }
    };
    resolve(ctx, &profile.endpoints[picked], want, client, scope, rng)
}

/// Turns a picked endpoint into the answer: itself, or its child profile's answer.
fn resolve<'a, H, R>(
    ctx: Ctx<'a, H>,
    endpoint: &'a Endpoint,
    want: Want,
    client: Client,
    scope: u8,
    rng: &mut R,
) -> Decision<'a>
where
    H: HealthView + ?Sized,
    R: Rng + ?Sized,
{
    match &endpoint.target {
        Target::Nested(n) => match route_at(ctx, &ctx.profiles[n.child], want, client, rng) {
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
    let all: Candidates = profile
        .endpoints
        .iter()
        .enumerate()
        .filter(|(_, ep)| ep.enabled && ep.can_answer(want, ctx.profiles))
        .map(|(index, ep)| Candidate { index, status: status::endpoint_status(ctx, ep) })
        .collect();
    let serving: Candidates = all.iter().copied().filter(|c| c.status.is_serving()).collect();
    if !serving.is_empty() || !profile.fail_open {
        return serving;
    }
    all.into_iter().filter(|c| c.status == Status::Degraded).collect()
}

#[cfg(test)]
pub(crate) mod testkit;
