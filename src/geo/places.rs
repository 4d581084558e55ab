//! The geo database compiled for geographic routing: a binary trie per address family whose
//! leaves hold only what the region hierarchy looks at — the country and subdivision, a
//! `Place` — with sibling networks of the same place merged.
//!
//! Geographic answers depend on the place alone, so a client needs no more address bits
//! than the merged network's length: the lookup walks fewer, hotter nodes than the full
//! database tree, touches no per-record data, and reports that shorter length as the ECS
//! scope, which lets resolvers cache one answer for a whole country block (gdnsd compiles
//! its maps the same way). The full record (coordinates, continent) stays in `GeoDb`.

use std::collections::HashMap;
use std::net::IpAddr;

use super::Code;

/// Where a network is, as far as geographic routing cares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Place {
    pub country: Option<Code>,
    pub subdivision: Option<Code>,
}

/// A place's index in one database's `Places`: 0 is "no data", the rest are dense.
pub type PlaceId = u32;

/// A child link: a node index, or `LEAF | place id`.
const LEAF: u32 = 1 << 31;

/// Place id 0: no data for the network.
const NO_DATA: u32 = 0;

/// One family's trie. `root` is a link like any child, so an empty database is one leaf.
#[derive(Debug)]
struct Trie {
    root: u32,
    nodes: Vec<[u32; 2]>,
    /// Where the walk stands after the first `JUMP_BITS` bits: one load instead of sixteen
    /// dependent ones, which on a large database are cache misses. An entry is the node at
    /// depth `JUMP_BITS`, or the leaf met earlier as `LEAF | depth << 24 | place`.
    jump: Vec<u32>,
}

/// Bits resolved by the jump table (2^16 four-byte entries, 256 KiB per family).
const JUMP_BITS: u8 = 16;

/// Place ids that fit beside a depth in a jump entry.
const JUMP_MAX_PLACE: u32 = (1 << 24) - 1;

/// One trie per address family, looked up by any address.
#[derive(Debug)]
struct Tries {
    v4: Trie,
    v6: Trie,
}

impl Tries {
    /// The leaf id of `ip` and how many leading bits decided it.
    fn lookup(&self, ip: IpAddr) -> (u32, u8) {
        match ip.to_canonical() {
            IpAddr::V4(a) => self.v4.lookup(u128::from(a.to_bits()) << 96),
            IpAddr::V6(a) => self.v6.lookup(a.to_bits()),
        }
    }

    fn nodes(&self) -> usize {
        self.v4.nodes.len() + self.v6.nodes.len()
    }
}

/// Both families' tries and the places their leaves name.
#[derive(Debug)]
pub struct Places {
    tries: Tries,
    /// Index 0 is "no data" (never returned as a place).
    places: Vec<Place>,
}

/// Collects networks into uncompressed tries; `finish` merges and compacts them.
pub struct PlacesBuilder {
    v4: Trie,
    v6: Trie,
    places: Vec<Place>,
    ids: HashMap<Place, u32>,
}

impl Default for PlacesBuilder {
    fn default() -> Self {
        let empty = || Trie { root: LEAF | NO_DATA, nodes: Vec::new(), jump: Vec::new() };
        PlacesBuilder {
            v4: empty(),
            v6: empty(),
            places: vec![Place::default()],
            ids: HashMap::new(),
        }
    }
}

impl PlacesBuilder {
    /// Records that the network `addr/len` is at `place` (`None`: no data). Networks must
    /// not overlap, as the leaves of a MaxMind tree never do.
    pub fn insert(&mut self, addr: IpAddr, len: u8, place: Option<Place>) {
        let id = match place {
            None => NO_DATA,
            Some(p) => *self.ids.entry(p).or_insert_with(|| {
                self.places.push(p);
                (self.places.len() - 1) as u32
            }),
        };
        match addr {
            IpAddr::V4(a) => self.v4.insert(u128::from(a.to_bits()) << 96, len.min(32), id),
            IpAddr::V6(a) => self.v6.insert(a.to_bits(), len.min(128), id),
        }
    }

    pub fn finish(self) -> Places {
        let tries = Tries { v4: self.v4.compact(), v6: self.v6.compact() };
        Places { tries, places: self.places }
    }
}

impl Places {
    /// The place of `ip` (`None`: no data) and how many leading bits decided it.
    pub fn lookup(&self, ip: IpAddr) -> (Option<Place>, u8) {
        let (id, len) = self.lookup_id(ip);
        (self.get(id), len)
    }

    /// `lookup` as a place id: ids are dense, so callers can keep per-place data in a
    /// vector (`ids()`) and skip the place itself.
    pub fn lookup_id(&self, ip: IpAddr) -> (PlaceId, u8) {
        self.tries.lookup(ip)
    }

    /// The place an id names (`None` for the "no data" id).
    pub fn get(&self, id: PlaceId) -> Option<Place> {
        (id != NO_DATA).then(|| self.places[id as usize])
    }

    /// The place of every id `lookup_id` can return, in id order.
    pub fn all(&self) -> impl Iterator<Item = Option<Place>> + '_ {
        (0..self.places.len() as PlaceId).map(|id| self.get(id))
    }

    /// Distinct places and trie nodes after merging, for logs and tests.
    pub fn size(&self) -> (usize, usize) {
        (self.places.len() - 1, self.tries.nodes())
    }
}

/// The place trie relabelled by what one mapping answers for each place (`Places::classify`):
/// networks whose places get the same answer merge, as gdnsd compiles each of its maps, so
/// the walk is shorter and the block (the ECS scope) is as wide as the answer allows.
#[derive(Debug)]
pub struct Classes(Tries);

impl Classes {
    /// The class of `ip` and how many leading bits decided it.
    pub fn lookup(&self, ip: IpAddr) -> (u32, u8) {
        self.0.lookup(ip)
    }

    /// Trie nodes of both families, for logs and tests.
    pub fn nodes(&self) -> usize {
        self.0.nodes()
    }
}

impl Places {
    /// Relabels every place `p` as `class_of[p]` (indexed by place id, "no data" included)
    /// and merges what became equal. Classes must fit a jump entry (below 2^24).
    pub fn classify(&self, class_of: &[u32]) -> Classes {
        let t = &self.tries;
        Classes(Tries { v4: t.v4.relabel(class_of), v6: t.v6.relabel(class_of) })
    }
}

impl Trie {
    fn relabel(&self, class_of: &[u32]) -> Trie {
        let map = |l: u32| if l & LEAF != 0 { LEAF | class_of[(l & !LEAF) as usize] } else { l };
        let nodes = self.nodes.iter().map(|&[a, b]| [map(a), map(b)]).collect();
        Trie { root: map(self.root), nodes, jump: Vec::new() }.compact()
    }

    /// `bits` is the address left-aligned in 128 bits.
    fn insert(&mut self, bits: u128, len: u8, id: u32) {
        let mut at = None; // the root link
        for depth in 0..len {
            let mut link = self.get(at);
            if link & LEAF != 0 {
                // Split the leaf: both halves keep its place until overwritten below.
                self.nodes.push([link, link]);
                link = (self.nodes.len() - 1) as u32;
                self.set(at, link);
            }
            at = Some((link as usize, ((bits >> (127 - depth)) & 1) as usize));
        }
        self.set(at, LEAF | id);
    }

    /// The link at `at`: `None` is the root, else (node, side).
    fn get(&self, at: Option<(usize, usize)>) -> u32 {
        at.map_or(self.root, |(n, side)| self.nodes[n][side])
    }

    fn set(&mut self, at: Option<(usize, usize)>, link: u32) {
        match at {
            None => self.root = link,
            Some((n, side)) => self.nodes[n][side] = link,
        }
    }

    fn lookup(&self, bits: u128) -> (u32, u8) {
        let (mut link, mut depth) = match self.jump.get((bits >> (128 - JUMP_BITS)) as usize) {
            Some(&e) if e & LEAF != 0 => (LEAF | (e & JUMP_MAX_PLACE), ((e & !LEAF) >> 24) as u8),
            Some(&node) => (node, JUMP_BITS),
            None => (self.root, 0),
        };
        while link & LEAF == 0 {
            let bit = (bits >> (127 - depth)) & 1;
            link = self.nodes[link as usize][bit as usize];
            depth += 1;
        }
        (link & !LEAF, depth)
    }

    /// Merges siblings of one place bottom-up and drops unreachable nodes.
    fn compact(self) -> Trie {
        let mut nodes = Vec::new();
        let root = self.rebuild(self.root, &mut nodes);
        let mut trie = Trie { root, nodes, jump: Vec::new() };
        // A database that is one leaf needs no table; one with more places than an entry
        // holds walks from the root.
        if root & LEAF == 0 && places_fit(&trie.nodes) {
            trie.jump = (0..1u32 << JUMP_BITS).map(|i| trie.jump_entry(i)).collect();
        }
        trie
    }

    fn jump_entry(&self, prefix: u32) -> u32 {
        match self.walk(prefix, JUMP_BITS) {
            (leaf, depth) if leaf & LEAF != 0 => leaf | u32::from(depth) << 24,
            (node, _) => node,
        }
    }

    /// The link after following the top `bits` bits of `prefix`, stopping at a leaf.
    fn walk(&self, prefix: u32, bits: u8) -> (u32, u8) {
        let mut link = self.root;
        let mut depth = 0;
        while depth < bits && link & LEAF == 0 {
            let bit = (prefix >> (bits - 1 - depth)) & 1;
            link = self.nodes[link as usize][bit as usize];
            depth += 1;
        }
        (link, depth)
    }

    fn rebuild(&self, link: u32, out: &mut Vec<[u32; 2]>) -> u32 {
        if link & LEAF != 0 {
            return link;
        }
        let [l, r] = self.nodes[link as usize];
        let (l, r) = (self.rebuild(l, out), self.rebuild(r, out));
        if l == r && l & LEAF != 0 {
            return l;
        }
        out.push([l, r]);
        (out.len() - 1) as u32
    }
}

fn places_fit(nodes: &[[u32; 2]]) -> bool {
    nodes.iter().flatten().all(|&l| l & LEAF == 0 || l & !LEAF <= JUMP_MAX_PLACE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(country: &str, sub: &str) -> Option<Place> {
        Some(Place { country: Code::new(country), subdivision: Code::new(sub) })
    }

    fn net(s: &str) -> (IpAddr, u8) {
        let n: ipnet::IpNet = s.parse().unwrap();
        (n.addr(), n.prefix_len())
    }

    fn build(nets: &[(&str, Option<Place>)]) -> Places {
        let mut b = PlacesBuilder::default();
        for (n, p) in nets {
            let (addr, len) = net(n);
            b.insert(addr, len, *p);
        }
        b.finish()
    }

    #[test]
    fn lookups_find_the_merged_network() {
        let fr = place("FR", "IDF");
        let us = place("US", "CA");
        let p = build(&[
            ("10.0.0.0/9", fr),
            ("10.128.0.0/10", fr),
            ("10.192.0.0/10", fr),
            ("192.0.2.0/25", fr),
            ("192.0.2.128/25", us),
            ("2001:db8::/33", us),
            ("2001:db8:8000::/33", us),
        ]);
        let cases: &[(&str, Option<Place>, u8)] = &[
            // Three FR networks covering 10/8 merge into 10/8.
            ("10.1.2.3", fr, 8),
            ("10.200.0.1", fr, 8),
            ("192.0.2.1", fr, 25),
            ("192.0.2.200", us, 25),
            // An IPv4-mapped address is the IPv4 client.
            ("::ffff:192.0.2.200", us, 25),
            ("2001:db8:ffff::1", us, 32),
            // Outside every network: the empty block around it.
            ("11.0.0.1", None, 8),
            ("192.0.3.1", None, 24),
        ];
        for (addr, want, len) in cases {
            assert_eq!(p.lookup(addr.parse().unwrap()), (*want, *len), "{addr}");
        }
        assert_eq!(p.size().0, 2);
    }

    #[test]
    fn an_empty_database_is_one_leaf_for_every_address() {
        let p = build(&[]);
        assert_eq!(p.lookup("192.0.2.1".parse().unwrap()), (None, 0));
        assert_eq!(p.lookup("2001:db8::1".parse().unwrap()), (None, 0));
        assert_eq!(p.size(), (0, 0));
    }

    #[test]
    fn classify_merges_places_with_one_answer() {
        let (fr, de, us) = (place("FR", ""), place("DE", ""), place("US", "CA"));
        let p = build(&[
            ("192.0.2.0/26", fr),
            ("192.0.2.64/26", de),
            ("192.0.2.128/25", us),
            ("198.51.100.0/24", None),
        ]);
        // Place ids in insertion order: FR 1, DE 2, US 3; 0 is "no data".
        let classes = p.classify(&[0, 7, 7, 9]);
        let cases: &[(&str, u32, u8)] = &[
            ("192.0.2.1", 7, 25), // FR and DE answer alike: one /25
            ("192.0.2.100", 7, 25),
            ("192.0.2.200", 9, 25),
            ("198.51.100.1", 0, 6), // no data anywhere in 196.0.0.0/6
        ];
        for (addr, class, len) in cases {
            assert_eq!(classes.lookup(addr.parse().unwrap()), (*class, *len), "{addr}");
        }
        assert!(classes.nodes() < p.size().1, "relabelling merged nodes");
    }

    #[test]
    fn networks_without_data_merge_like_places() {
        // Both /25 halves carry no data: the /24 is one "no data" block, not two.
        let p = build(&[
            ("192.0.2.0/25", None),
            ("192.0.2.128/25", None),
            ("198.51.100.0/24", place("DE", "")),
        ]);
        assert_eq!(p.lookup("192.0.2.1".parse().unwrap()).0, None);
        assert_eq!(p.lookup("198.51.100.1".parse().unwrap()), (place("DE", ""), 24));
        assert_eq!(p.lookup("198.51.101.1".parse().unwrap()), (None, 24));
    }
}
