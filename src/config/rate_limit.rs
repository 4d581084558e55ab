//! `rate_limit:`: response rate limiting of UDP answers. Off unless configured: the
//! clients of an authoritative server are mostly a few large resolvers, which per-network
//! limits hurt first, so an operator turns it on knowing their traffic (or under attack).

use super::check::int_or;
use super::raw::{Loc, RawRateLimit};
use crate::diag::{Pos, Sink};
use crate::model::snapshot::RateLimit;
use crate::netrange::{Range, RangeMap};

pub fn build(sink: &mut Sink<'_>, raw: Option<&Loc<RawRateLimit>>) -> Option<RateLimit> {
    let raw = &raw?.value;
    let rate = int_or(sink, raw.rate.as_ref(), 1, 1_000_000, "rate_limit.rate", 100u32);
    // Tokens are 24 bits in the limiter's table.
    let burst = int_or(sink, raw.burst.as_ref(), 1, 16_000_000, "rate_limit.burst", rate).max(rate);
    let slip = int_or(sink, raw.slip.as_ref(), 0, 100, "rate_limit.slip", 2u32);
    let ipv4_prefix = int_or(sink, raw.ipv4_prefix.as_ref(), 8, 32, "rate_limit.ipv4_prefix", 24u8);
    let ipv6_prefix =
        int_or(sink, raw.ipv6_prefix.as_ref(), 16, 128, "rate_limit.ipv6_prefix", 56u8);
    let mut ranges = Vec::new();
    let mut positions = std::collections::HashMap::new();
    for net in &raw.exempt {
        match Range::parse(&net.value) {
            Ok(r) => {
                ranges.push((r, ()));
                positions.insert(r, Pos::of(net));
            }
            Err(e) => sink.on(net, format!("rate_limit.exempt: {e}")),
        }
    }
    // Each overlap is reported at the later network, as subnet routing reports its ranges.
    let exempt = RangeMap::new(ranges).unwrap_or_else(|overlaps| {
        for (a, b) in overlaps {
            sink.at(positions[&b], format!("rate_limit.exempt: {b} overlaps {a}"));
        }
        RangeMap::default()
    });
    Some(RateLimit { rate, burst, slip, ipv4_prefix, ipv6_prefix, exempt })
}
