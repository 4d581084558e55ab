//! The AF_XDP fast path of `listen.xdp`: an XDP program steers UDP queries for the taken
//! addresses and port into one AF_XDP socket per receive queue, each served by its own
//! thread with the same answer function as the UDP sockets; everything else goes to the
//! kernel. TCP stays on the sockets of `listen.dns`.

pub mod sys;
pub mod worker;
pub mod xsk;

use std::ffi::CString;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::thread::JoinHandle;

use tokio_util::sync::CancellationToken;

use crate::bpf::filter::{Action, Filter};
use crate::model::snapshot::XdpListen;
use sys::{Mode, SysError};
use worker::Shared;
use xsk::{Copying, Xsk};

use super::dnstap::UdpLog;

#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    #[error("listen.xdp needs CAP_NET_ADMIN, CAP_BPF (or CAP_SYS_ADMIN) and CAP_NET_RAW: {0}")]
    Privilege(SysError),
    #[error("listen.xdp: no interface {0:?}")]
    NoInterface(String),
    #[error("listen.xdp: {0}")]
    Sys(#[from] SysError),
    #[error("listen.xdp: AF_XDP socket on {interface} queue {queue}: {source}")]
    Socket { interface: String, queue: u32, source: io::Error },
    #[error(
        "listen.xdp: AF_XDP socket on {interface} queue {queue}: its {} MiB of packet memory exceed the locked-memory limit (raise RLIMIT_MEMLOCK, e.g. LimitMEMLOCK=infinity under systemd, or grant CAP_IPC_LOCK)",
        xsk::UMEM_BYTES >> 20
    )]
    LockedMemory { interface: String, queue: u32 },
    #[error("listen.xdp: starting a worker thread: {0}")]
    Thread(io::Error),
}

/// The running fast path. The program stays attached while this lives: dropping it
/// (after the workers stopped) closes the link, and the kernel detaches the program.
pub struct Running {
    pub mode: Mode,
    pub copying: Copying,
    pub queues: Vec<u32>,
    _link: OwnedFd,
    _map: OwnedFd,
    _prog: OwnedFd,
}

/// What came of starting the fast path.
pub enum Started {
    Running(Running, Vec<JoinHandle<()>>),
    /// The interface takes no XDP program (or another one is attached): sockets serve.
    Fallback(XdpError),
}

fn is_privilege(e: &SysError) -> bool {
    matches!(e, SysError::Call { source, .. } | SysError::Verifier { source, .. }
        if matches!(source.raw_os_error(), Some(libc::EPERM | libc::EACCES)))
}

/// The interface's receive queues, from sysfs (`rx-N` entries); 1 when unreadable.
fn rx_queues(interface: &str) -> Vec<u32> {
    let dir = format!("/sys/class/net/{interface}/queues");
    let n = std::fs::read_dir(dir).map_or(0, |d| {
        d.filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
            .count()
    });
    (0..n.max(1) as u32).collect()
}

/// Loads and attaches the program, opens one socket per queue and starts their workers.
pub fn start(
    config: &XdpListen,
    shared: impl Fn() -> (Shared, UdpLog),
    cancel: &CancellationToken,
) -> Result<Started, XdpError> {
    let name = CString::new(config.interface.as_str())
        .map_err(|_| XdpError::NoInterface(config.interface.clone()))?;
    // SAFETY: a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        return Err(XdpError::NoInterface(config.interface.clone()));
    }
    let queues = config.queues.clone().unwrap_or_else(|| rx_queues(&config.interface));
    let entries = queues.iter().max().map_or(1, |q| q + 1);
    let privileged = |e: SysError| {
        if is_privilege(&e) { XdpError::Privilege(e) } else { XdpError::Sys(e) }
    };
    let map = sys::xskmap(entries).map_err(privileged)?;
    let filter = Filter {
        v4: config
            .addresses
            .iter()
            .filter_map(|a| match a {
                IpAddr::V4(v4) => Some(*v4),
                IpAddr::V6(_) => None,
            })
            .collect(),
        v6: config
            .addresses
            .iter()
            .filter_map(|a| match a {
                IpAddr::V6(v6) => Some(*v6),
                IpAddr::V4(_) => None,
            })
            .collect(),
        port: config.port,
        unbound: Action::Pass,
    };
    let program = filter.program(map.as_raw_fd()).map_err(|e| {
        XdpError::Sys(SysError::Call { what: "assembling", source: io::Error::other(e) })
    })?;
    let prog = sys::load_xdp(&program).map_err(privileged)?;
    // The program first: an interface that takes none (or has another program) leaves the
    // sockets serving before any AF_XDP socket claims a queue. Until a queue's socket is in
    // the map, the program passes that queue's packets to the kernel.
    let (link, mode) = match sys::attach(&prog, ifindex) {
        Ok(attached) => attached,
        Err(e) if is_privilege(&e) => return Err(XdpError::Privilege(e)),
        Err(e) => return Ok(Started::Fallback(XdpError::Sys(e))),
    };
    let mut sockets = Vec::with_capacity(queues.len());
    for &queue in &queues {
        let xsk = Xsk::open(ifindex, queue).map_err(|source| {
            let interface = config.interface.clone();
            match source.raw_os_error() {
                Some(libc::EPERM | libc::EACCES) => {
                    XdpError::Privilege(SysError::Call { what: "opening an AF_XDP socket", source })
                }
                // Registering the UMEM fails so when it would pass the process's limit.
                Some(libc::ENOBUFS) => XdpError::LockedMemory { interface, queue },
                _ => XdpError::Socket { interface, queue, source },
            }
        })?;
        sys::set_socket(&map, queue, xsk.fd())?;
        sockets.push(xsk);
    }
    let copying = sockets.first().map_or(Copying::Copy, |s| s.copying);
    let mut threads = Vec::with_capacity(sockets.len());
    for (xsk, &queue) in sockets.into_iter().zip(&queues) {
        let (shared, log) = shared();
        let cancel = cancel.clone();
        let t = std::thread::Builder::new()
            .name(format!("xdp-{}-{queue}", config.interface))
            .spawn(move || worker::serve(xsk, shared, log, cancel))
            .map_err(XdpError::Thread)?;
        threads.push(t);
    }
    let running = Running { mode, copying, queues, _link: link, _map: map, _prog: prog };
    Ok(Started::Running(running, threads))
}
