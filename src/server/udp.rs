//! The UDP front end: one SO_REUSEPORT socket and one OS thread per core, each receiving
//! and sending in batches with `recvmmsg`/`sendmmsg`.
//!
//! There is no task or channel per query and no lock: a worker loads the current snapshot
//! once per batch, answers every packet of the batch into its own reusable buffers, and
//! sends the replies in one system call. A short receive timeout lets it notice shutdown.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use arrayvec::ArrayVec;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use socket2::{Domain, Protocol, Socket, Type};
use tokio_util::sync::CancellationToken;

use crate::model::Tally;
use crate::model::snapshot::Snapshot;
use crate::responder::{Packet, Transport, respond, slip};
use crate::wire::cookie::unix_now;

use super::dnstap::{Exchange, Time, UdpLog, UdpTap};
use super::rrl::{Limiter, Verdict};
use super::rum::Rum;

/// Packets taken per system call.
const BATCH: usize = 32;
/// Largest query read; larger datagrams are cut and then fail to parse.
const MAX_QUERY: usize = 4096;
/// How often an idle worker checks for shutdown.
const POLL: Duration = Duration::from_millis(200);

/// Binds `count` sockets sharing `addr` (SO_REUSEPORT) so the kernel spreads packets,
/// each with a receive buffer of `receive_buffer` bytes.
pub fn bind(addr: SocketAddr, count: usize, receive_buffer: usize) -> io::Result<Bound> {
    let bound = (0..count.max(1))
        .map(|_| {
            let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
            if addr.is_ipv6() {
                s.set_only_v6(true)?;
            }
            s.set_reuse_port(true)?;
            let buffer = set_receive_buffer(&s, receive_buffer)?;
            let _ = never_fragment(&s, addr);
            s.set_read_timeout(Some(POLL))?;
            s.bind(&addr.into())?;
            Ok((s.into(), buffer))
        })
        .collect::<io::Result<Vec<(UdpSocket, ReceiveBuffer)>>>()?;
    // At least one socket: `count.max(1)`.
    let receive_buffer = bound[0].1;
    Ok(Bound { sockets: bound.into_iter().map(|(s, _)| s).collect(), receive_buffer })
}

/// The sockets `bind` made for one address.
pub struct Bound {
    pub sockets: Vec<UdpSocket>,
    /// What the first socket's receive buffer came out as (all are set alike).
    pub receive_buffer: ReceiveBuffer,
}

/// What a socket's receive buffer came out as, against what was asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiveBuffer {
    pub asked: usize,
    /// What the kernel allots, halved: Linux doubles the size asked for its own
    /// bookkeeping, and reports the doubled value.
    pub got: usize,
}

impl ReceiveBuffer {
    /// `net.core.rmem_max` cut the buffer short of what was asked.
    pub fn capped(&self) -> bool {
        self.got < self.asked
    }
}

/// The buffer absorbs bursts that arrive while the socket's thread is busy or descheduled:
/// too small, and a burst is dropped even when the thread keeps up on average.
fn set_receive_buffer(s: &Socket, bytes: usize) -> io::Result<ReceiveBuffer> {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    let len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid socket and a pointer to an int of the given length.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&raw const value).cast(),
            len,
        )
    };
    // Without CAP_NET_ADMIN: SO_RCVBUF, which `net.core.rmem_max` caps.
    if rc != 0 {
        s.set_recv_buffer_size(bytes)?;
    }
    Ok(ReceiveBuffer { asked: bytes, got: s.recv_buffer_size()? / 2 })
}

/// Replies leave with DF set and are never fragmented here, as RFC 9715 asks of DNS
/// responders; they fit any path anyway (at most 1232 bytes of DNS, see `responder`).
/// `PROBE` also ignores path-MTU updates, which spoofed ICMP could lower. And with DF set
/// the kernel skips computing an IP ID for every reply.
fn never_fragment(s: &Socket, addr: SocketAddr) -> io::Result<()> {
    let (level, name, value) = match addr {
        SocketAddr::V4(_) => (libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_PROBE),
        SocketAddr::V6(_) => {
            (libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, libc::IPV6_PMTUDISC_PROBE)
        }
    };
    let len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid socket and a pointer to an int of the given length.
    let rc =
        unsafe { libc::setsockopt(s.as_raw_fd(), level, name, (&raw const value).cast(), len) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Serves one socket until `cancel` fires. Blocking: run it on its own thread.
/// While the query log is on, a sample of the exchanges goes to its writer.
pub fn serve(
    sock: UdpSocket,
    shared: Arc<ArcSwap<Snapshot>>,
    rum: Option<Arc<Rum>>,
    limiter: Arc<Limiter>,
    mut log: UdpLog,
    cancel: CancellationToken,
) {
    let mut worker = Worker::new();
    let mut rng = SmallRng::from_os_rng();
    let mut tally = Tally::default();
    let server = sock.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    while !cancel.is_cancelled() {
        let n = match worker.receive(&sock) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                // An idle worker lets go of a replaced query log's ring too.
                let _ = log.current();
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "udp receive failed");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let snap = shared.load();
        // Once per batch, like the snapshot: a lock-free load that does not allocate.
        let measured = rum.as_ref().map(|r| r.published().load());
        let now = unix_now();
        let mut tap = log.current();
        let mut replies = 0;
        for i in 0..n {
            let Some(src) = worker.source(i) else {
                continue;
            };
            if let Some(tap) = &tap
                && tap.sampled(&mut rng)
            {
                worker.mark(i);
            }
            let len = worker.len(i);
            let (query, out) = (&worker.rx[i][..len], &mut worker.tx[replies]);
            let packet = Packet {
                bytes: query,
                src: src.ip(),
                transport: Transport::Udp,
                now,
                measured: measured.as_deref().map(|m| &**m),
            };
            if answer(&snap, packet, &limiter, &mut rng, &mut tally, out) {
                worker.reply_to[replies] = i;
                replies += 1;
            }
        }
        tally.flush(&snap.counters);
        if let Err(e) = worker.send(&sock, replies) {
            tracing::debug!(error = %e, "udp send failed");
        }
        if let Some(tap) = &mut tap {
            worker.log(tap, server, replies);
        }
    }
}

/// Answers one datagram into `out`, rate limits the answer and counts it: `true` when
/// `out` holds a reply to send. The UDP sockets and the AF_XDP path both answer through
/// this, so they follow the same rules.
#[inline]
pub fn answer(
    snap: &Snapshot,
    packet: Packet<'_>,
    limiter: &Limiter,
    rng: &mut SmallRng,
    tally: &mut Tally,
    out: &mut Vec<u8>,
) -> bool {
    let Some(mut outcome) = respond(snap, &*snap.health, packet, rng, out, None) else {
        return false;
    };
    // Only what is sent is counted: a dropped answer shows in the limiter's counts alone,
    // a slipped one hands out no endpoint.
    if let Some(limit) = &snap.rate_limit
        && !outcome.proven_source()
        && limit.exempt.lookup(packet.src).value.is_none()
    {
        match limiter.check(limit, packet.src, packet.now) {
            Verdict::Answer => {}
            Verdict::Slip => {
                outcome.rcode = slip(snap, packet, out);
                outcome.endpoints.clear();
            }
            Verdict::Drop => return false,
        }
    }
    tally.add(&snap.counters, &outcome);
    true
}

/// Reusable buffers of one worker.
struct Worker {
    rx: Vec<Box<[u8; MAX_QUERY]>>,
    tx: Vec<Vec<u8>>,
    /// For each reply, the datagram it answers: the reply goes to that one's source,
    /// whose address is sent back as the kernel gave it.
    reply_to: [usize; BATCH],
    headers: Box<Headers>,
    /// The datagrams of this batch picked for the query log, in order, and when the first
    /// of them was picked (the query time of them all).
    marked: ArrayVec<usize, BATCH>,
    marked_at: Time,
}

/// The `recvmmsg`/`sendmmsg` headers, set up once: a batch only resets the address
/// lengths the kernel overwrote, instead of zeroing the headers and converting addresses
/// for every call. Boxed, because the headers point into it.
struct Headers {
    addrs: [libc::sockaddr_storage; BATCH],
    rx_iov: [libc::iovec; BATCH],
    rx: [libc::mmsghdr; BATCH],
    tx_iov: [libc::iovec; BATCH],
    tx: [libc::mmsghdr; BATCH],
}

impl Worker {
    fn new() -> Worker {
        let mut rx: Vec<Box<[u8; MAX_QUERY]>> =
            (0..BATCH).map(|_| Box::new([0u8; MAX_QUERY])).collect();
        // SAFETY: all five arrays are plain old data; all-zero is a valid value of each.
        let mut headers: Box<Headers> = Box::new(unsafe { zeroed() });
        let h = &raw mut *headers;
        for (i, buf) in rx.iter_mut().enumerate() {
            // SAFETY: `h` points at the boxed headers, which never move; each pointer
            // stored here targets the same box or a boxed receive buffer.
            unsafe {
                (*h).rx_iov[i] =
                    libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: MAX_QUERY };
                (*h).rx[i].msg_hdr.msg_iov = &raw mut (*h).rx_iov[i];
                (*h).rx[i].msg_hdr.msg_iovlen = 1;
                (*h).rx[i].msg_hdr.msg_name = (&raw mut (*h).addrs[i]).cast();
                (*h).tx[i].msg_hdr.msg_iov = &raw mut (*h).tx_iov[i];
                (*h).tx[i].msg_hdr.msg_iovlen = 1;
            }
        }
        Worker {
            rx,
            tx: (0..BATCH).map(|_| Vec::with_capacity(1500)).collect(),
            reply_to: [0; BATCH],
            headers,
            marked: ArrayVec::new(),
            marked_at: Time::default(),
        }
    }

    /// Picks datagram `i` of this batch for the query log.
    fn mark(&mut self, i: usize) {
        if self.marked.is_empty() {
            self.marked_at = Time::now();
        }
        self.marked.push(i);
    }

    /// Hands the picked datagrams of the batch just sent, with their replies (the first
    /// `replies` buffers), to the query log. Both lists are in datagram order, so one pass
    /// pairs each query with its reply, if it got one.
    fn log(&mut self, tap: &mut UdpTap, server: SocketAddr, replies: usize) {
        if self.marked.is_empty() {
            return;
        }
        let sent = Time::now();
        let mut r = 0;
        for &i in &self.marked {
            while r < replies && self.reply_to[r] < i {
                r += 1;
            }
            let Some(client) = self.source(i) else { continue };
            let answered = r < replies && self.reply_to[r] == i;
            tap.offer(&Exchange {
                transport: Transport::Udp,
                client,
                server,
                query: &self.rx[i][..self.len(i)],
                query_time: self.marked_at,
                response: answered.then(|| (&self.tx[r][..], sent)),
            });
        }
        self.marked.clear();
        tap.flush();
    }

    /// Waits for at least one datagram, then takes whatever else is queued (up to BATCH).
    fn receive(&mut self, sock: &UdpSocket) -> io::Result<usize> {
        let h = &mut *self.headers;
        for m in &mut h.rx {
            m.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        }
        // SAFETY: the headers point at BATCH live buffers and addresses (see `new`).
        let n = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                h.rx.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// The length of datagram `i` of the batch just received.
    fn len(&self, i: usize) -> usize {
        (self.headers.rx[i].msg_len as usize).min(MAX_QUERY)
    }

    fn source(&self, i: usize) -> Option<SocketAddr> {
        sockaddr_to_std(&self.headers.addrs[i])
    }

    /// Sends the first `count` replies, retrying after partial sends.
    fn send(&mut self, sock: &UdpSocket, count: usize) -> io::Result<()> {
        let h = &raw mut *self.headers;
        let mut sent = 0;
        while sent < count {
            let todo = count - sent;
            for k in 0..todo {
                let (i, q) = (sent + k, self.reply_to[sent + k]);
                // SAFETY: `h` points at the boxed headers (see `new`); the source address
                // and its length are those `receive` got for datagram `q` of this batch.
                unsafe {
                    (*h).tx_iov[k] = libc::iovec {
                        iov_base: self.tx[i].as_mut_ptr().cast(),
                        iov_len: self.tx[i].len(),
                    };
                    (*h).tx[k].msg_hdr.msg_name = (&raw mut (*h).addrs[q]).cast();
                    (*h).tx[k].msg_hdr.msg_namelen = (*h).rx[q].msg_hdr.msg_namelen;
                }
            }
            // SAFETY: the first `todo` headers point at live replies and addresses.
            let n = unsafe {
                libc::sendmmsg(sock.as_raw_fd(), (&raw mut (*h).tx).cast(), todo as u32, 0)
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                // Skip the datagram that failed (e.g. an unreachable address) and go on.
                sent += 1;
                if sent >= count {
                    return Err(e);
                }
                continue;
            }
            sent += (n as usize).max(1);
        }
        Ok(())
    }
}

fn sockaddr_to_std(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says this storage holds a sockaddr_in.
            let a: &libc::sockaddr_in = unsafe { &*(s as *const _ as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(a.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6.
            let a: &libc::sockaddr_in6 = unsafe { &*(s as *const _ as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// The address a client should use: the bound address, unspecified IPs as loopback.
pub fn local_addr(sock: &UdpSocket) -> io::Result<SocketAddr> {
    let a = sock.local_addr()?;
    Ok(match a.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), a.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), a.port())
        }
        _ => a,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mtu_discover(sock: &UdpSocket, level: libc::c_int, name: libc::c_int) -> libc::c_int {
        let (mut value, mut len) = (0 as libc::c_int, size_of::<libc::c_int>() as libc::socklen_t);
        // SAFETY: a valid socket, and an int with its length for the kernel to fill.
        let rc = unsafe {
            libc::getsockopt(sock.as_raw_fd(), level, name, (&raw mut value).cast(), &mut len)
        };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        value
    }

    #[test]
    fn replies_are_sent_unfragmented_on_both_families() {
        let v4 = bind("127.0.0.1:0".parse().unwrap(), 1, 1 << 20).unwrap().sockets;
        let v4 = mtu_discover(&v4[0], libc::IPPROTO_IP, libc::IP_MTU_DISCOVER);
        assert_eq!(v4, libc::IP_PMTUDISC_PROBE);
        let Ok(Bound { sockets: v6, .. }) = bind("[::1]:0".parse().unwrap(), 1, 1 << 20) else {
            return; // no IPv6 loopback on this machine
        };
        let v6 = mtu_discover(&v6[0], libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER);
        assert_eq!(v6, libc::IPV6_PMTUDISC_PROBE);
    }
}
