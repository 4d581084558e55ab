//! `listen.xdp`: which interface, queues, addresses and port the AF_XDP fast path takes.

use std::net::IpAddr;

use super::check;
use super::raw::RawXdp;
use crate::diag::Sink;
use crate::model::snapshot::XdpListen;

/// The longest interface name Linux takes (IFNAMSIZ less the NUL).
const MAX_IFNAME: usize = 15;
/// Receive queues beyond any NIC's.
const MAX_XDP_QUEUE: i64 = 1023;

/// `listen.xdp`; `None` after any error (each one reported).
pub fn listen(sink: &mut Sink<'_>, x: &RawXdp) -> Option<XdpListen> {
    let errors = sink.errors.len();
    let name = &x.interface;
    if name.value.is_empty() || name.value.len() > MAX_IFNAME || name.value.contains(['/', ' ']) {
        sink.on(name, format!("listen.xdp.interface {:?} is not an interface name", name.value));
    }
    let queues = x.queues.as_ref().map(|list| {
        if list.value.is_empty() {
            sink.on(list, "listen.xdp.queues needs at least one queue (leave it out for all)");
        }
        let mut out: Vec<u32> = Vec::new();
        for q in &list.value {
            let Some(n) = check::int_in(sink, q, 0, MAX_XDP_QUEUE, "listen.xdp.queues") else {
                continue;
            };
            if out.contains(&n) {
                sink.on(q, format!("listen.xdp.queues lists queue {n} twice"));
            }
            out.push(n);
        }
        out
    });
    if x.addresses.value.is_empty() {
        sink.on(&x.addresses, "listen.xdp.addresses needs at least one IP address");
    }
    let mut addresses = Vec::new();
    for a in &x.addresses.value {
        match a.value.parse::<IpAddr>() {
            Ok(ip) if ip.is_unspecified() || ip.is_multicast() => sink
                .on(a, format!("listen.xdp.addresses: {ip} is not an address queries are sent to")),
            Ok(ip) if addresses.contains(&ip) => {
                sink.on(a, format!("listen.xdp.addresses lists {ip} twice"))
            }
            Ok(ip) => addresses.push(ip),
            Err(_) => {
                sink.on(a, format!("listen.xdp.addresses: {:?} is not an IP address", a.value))
            }
        }
    }
    let port = match &x.port {
        None => Some(53),
        Some(p) => check::int_in(sink, p, 1, 65535, "listen.xdp.port"),
    };
    if sink.errors.len() != errors {
        return None;
    }
    Some(XdpListen { interface: name.value.clone(), queues, addresses, port: port? })
}
