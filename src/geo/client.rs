//! The client of one query as routing sees it: an address, how many of its bits are known,
//! and its location, looked up at most once per query, lazily, and only when the profile's
//! method needs it.

use std::cell::OnceCell;
use std::fmt;
use std::net::IpAddr;

use super::world::World;
use super::{AsnHit, Chain, Location, Place, PlaceId};

/// A client's place and how many address bits decided it.
#[derive(Clone, Copy, Debug)]
pub(super) enum PlaceHit {
    /// Looked up in the database: `id` indexes the world's per-place tables.
    Found { id: PlaceId, len: u8 },
    /// Given with the client's location (`Client::at`), or no database to look in.
    Known { place: Option<Place>, len: u8 },
}

/// A client's location and how many address bits decided it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Located {
    pub location: Option<Location>,
    pub prefix: u8,
}

/// The client of one query: the ECS address when the query has one, else the source
/// address; `prefix` is how many leading bits of `addr` are known.
#[derive(Clone, Debug)]
pub struct Client {
    pub addr: IpAddr,
    pub prefix: u8,
    located: OnceCell<Located>,
    place: OnceCell<PlaceHit>,
    asn: OnceCell<AsnHit>,
    /// The location was given (`at`), not looked up: per-database tables do not apply.
    given: bool,
}

impl Client {
    pub fn new(addr: IpAddr, prefix: u8) -> Client {
        Client {
            addr,
            prefix,
            located: OnceCell::new(),
            place: OnceCell::new(),
            asn: OnceCell::new(),
            given: false,
        }
    }

    /// A full-length client address (no ECS).
    pub fn from_addr(addr: IpAddr) -> Client {
        let prefix = if addr.is_ipv4() { 32 } else { 128 };
        Client::new(addr, prefix)
    }

    /// A client whose location is given rather than looked up (tests, `explain`).
    pub fn at(addr: IpAddr, located: Located) -> Client {
        let mut c = Client::from_addr(addr);
        c.given = true;
        let _ = c.located.set(located);
        let place = located.location.map(|l| l.place());
        let _ = c.place.set(PlaceHit::Known { place, len: located.prefix });
        c
    }

    /// The client's location, looked up on first use, and the prefix length of the network
    /// that decided it. That prefix may be longer than the client's own (an ECS /24 whose
    /// first /25 is in one country): it is the block the answer holds for, and a resolver
    /// that gets it as the ECS scope asks again for clients outside it.
    pub fn located(&self, world: &World) -> Located {
        *self.located.get_or_init(|| world.locate(self.addr))
    }

    /// The region ids to try for the client's place (looked up on first use), most
    /// specific first, and how many address bits decided the place (which may be more
    /// than the client sent, as with `located`).
    pub fn region_chain(&self, world: &World) -> (Chain, u8) {
        match self.place_hit(world) {
            PlaceHit::Found { id, len } => (world.chain(id), len),
            PlaceHit::Known { place, len } => (world.regions.place_chain(place), len),
        }
    }

    /// The address to look up in tables compiled from the geo database; `None` when the
    /// client's location was given instead.
    pub fn looked_up_addr(&self) -> Option<IpAddr> {
        (!self.given).then_some(self.addr)
    }

    /// The client's ASN (ASN database, looked up on first use) and the prefix length of
    /// the network that decided it, which may be longer than the client's own prefix, as
    /// with `located`.
    pub fn asn(&self, world: &World) -> AsnHit {
        *self.asn.get_or_init(|| world.asn_of(self.addr))
    }

    fn place_hit(&self, world: &World) -> PlaceHit {
        *self.place.get_or_init(|| world.place(self.addr))
    }
}

/// For traces: "client location: continent EU, country FR, subdivision - (network /25)".
impl fmt::Display for Located {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = |c: Option<super::Code>| c.map_or("-".to_string(), |c| c.to_string());
        match &self.location {
            Some(loc) => write!(
                f,
                "client location: continent {}, country {}, subdivision {} (network /{})",
                code(loc.continent),
                code(loc.country),
                code(loc.subdivision),
                self.prefix
            ),
            None => write!(f, "client location: unknown (network /{})", self.prefix),
        }
    }
}
