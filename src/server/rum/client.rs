//! Which address a report is from: the TCP peer, unless the peer is a trusted proxy, in
//! which case `X-Forwarded-For` is read from the right (the hop nearest to us), skipping
//! trusted proxies; the first address not trusted is the client. A header that does not
//! parse leaves the last address believed.

use std::net::IpAddr;

use ipnet::IpNet;

/// The client of a request from `peer` carrying the `X-Forwarded-For` values `forwarded`
/// (every header of that name, in order).
pub fn client_address<'a>(
    peer: IpAddr,
    forwarded: impl Iterator<Item = &'a str>,
    trusted: &[IpNet],
) -> IpAddr {
    let peer = canonical(peer);
    let is_trusted = |a: IpAddr| trusted.iter().any(|n| n.contains(&a));
    if !is_trusted(peer) {
        return peer;
    }
    let hops: Vec<&str> = forwarded.flat_map(|h| h.split(',')).collect();
    let mut client = peer;
    for hop in hops.iter().rev() {
        let Ok(addr) = hop.trim().parse::<IpAddr>() else { break };
        client = canonical(addr);
        if !is_trusted(client) {
            break;
        }
    }
    client
}

fn canonical(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(a, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_addresses_count_only_from_trusted_proxies() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()];
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let cases: &[(&str, &[&str], &str)] = &[
            // Untrusted peer: the header is ignored.
            ("192.0.2.1", &["198.51.100.7"], "192.0.2.1"),
            ("::ffff:192.0.2.1", &["198.51.100.7"], "192.0.2.1"),
            // Trusted peer: the nearest untrusted hop.
            ("10.1.1.1", &["198.51.100.7"], "198.51.100.7"),
            ("10.1.1.1", &["203.0.113.5, 198.51.100.7, 10.2.2.2"], "198.51.100.7"),
            ("::1", &["203.0.113.5", "198.51.100.7"], "198.51.100.7"),
            ("10.1.1.1", &["2001:db8::7"], "2001:db8::7"),
            // No header, or a bad hop: the last address believed.
            ("10.1.1.1", &[], "10.1.1.1"),
            ("10.1.1.1", &["198.51.100.7, junk"], "10.1.1.1"),
            ("10.1.1.1", &["junk, 10.3.3.3"], "10.3.3.3"),
        ];
        for (peer, headers, want) in cases {
            let got = client_address(ip(peer), headers.iter().copied(), &trusted);
            assert_eq!(got, ip(want), "{peer} {headers:?}");
        }
    }
}
