//! The `bpf()` system calls the fast path needs, through libc: an XSKMAP, loading the XDP
//! program, attaching it with a BPF link, filling the map, and running the program on a
//! frame (for tests).
//!
//! The program is attached with a link (`BPF_LINK_CREATE`) rather than the netlink
//! attachment, so the kernel detaches it when the last fd of the link closes: when the
//! server stops, and also when the process is killed.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::bpf::insn::Insn;

const MAP_CREATE: libc::c_long = 0;
const MAP_UPDATE_ELEM: libc::c_long = 2;
const MAP_DELETE_ELEM: libc::c_long = 3;
const PROG_LOAD: libc::c_long = 5;
const PROG_TEST_RUN: libc::c_long = 10;
const LINK_CREATE: libc::c_long = 28;
const MAP_TYPE_XSKMAP: u32 = 17;
const PROG_TYPE_XDP: u32 = 6;
const ATTACH_XDP: u32 = 37;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
/// The verifier's log, kept when loading fails: enough for the program's few dozen
/// instructions.
const LOG_SIZE: usize = 64 << 10;

/// How the program runs on the interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// In the driver, before the kernel allocates anything for the frame.
    Driver,
    /// After the kernel's generic receive path ("skb mode"): any interface has it.
    Generic,
}

#[derive(Debug, thiserror::Error)]
pub enum SysError {
    #[error("the kernel refused the XDP program: {source}\n{log}")]
    Verifier { source: io::Error, log: String },
    #[error("{what}: {source}")]
    Call { what: &'static str, source: io::Error },
}

fn call(what: &'static str) -> impl FnOnce(io::Error) -> SysError {
    move |source| SysError::Call { what, source }
}

/// Runs `bpf(cmd, attr)`; the attribute structs below are `#[repr(C)]` prefixes of the
/// kernel's `union bpf_attr`, which accepts any size up to its own.
fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<i32> {
    // SAFETY: `attr` is a live, initialised attribute struct of the given size.
    let rc = unsafe {
        libc::syscall(libc::SYS_bpf, cmd, std::ptr::from_mut(attr).cast::<u8>(), size_of::<T>())
    };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(rc as i32) }
}

fn owned(fd: i32) -> OwnedFd {
    // SAFETY: a new fd the kernel just returned, owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// The kernel's fixed-size object names: at most 15 bytes and a NUL.
fn name(s: &str) -> [u8; 16] {
    let mut n = [0u8; 16];
    for (d, b) in n[..15].iter_mut().zip(s.bytes()) {
        *d = b;
    }
    n
}

#[repr(C)]
#[derive(Default)]
struct MapCreate {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// A map from receive queue index to AF_XDP socket, with `entries` queues.
pub fn xskmap(entries: u32) -> Result<OwnedFd, SysError> {
    let mut attr = MapCreate {
        map_type: MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries: entries.max(1),
        map_name: name("steerdns_xsks"),
        ..MapCreate::default()
    };
    bpf(MAP_CREATE, &mut attr).map(owned).map_err(call("creating the XSKMAP"))
}

#[repr(C)]
#[derive(Default)]
struct MapElem {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// Puts socket `xsk` at queue `queue` of the map.
pub fn set_socket(map: &OwnedFd, queue: u32, xsk: i32) -> Result<(), SysError> {
    let (key, value) = (queue, xsk as u32);
    let mut attr = MapElem {
        map_fd: map.as_raw_fd() as u32,
        key: &raw const key as u64,
        value: &raw const value as u64,
        ..MapElem::default()
    };
    bpf(MAP_UPDATE_ELEM, &mut attr).map(drop).map_err(call("adding a socket to the XSKMAP"))
}

/// Takes the socket of queue `queue` out of the map: its packets go to the kernel again.
pub fn clear_socket(map: &OwnedFd, queue: u32) -> Result<(), SysError> {
    let key = queue;
    let mut attr = MapElem {
        map_fd: map.as_raw_fd() as u32,
        key: &raw const key as u64,
        ..MapElem::default()
    };
    bpf(MAP_DELETE_ELEM, &mut attr).map(drop).map_err(call("removing a socket from the XSKMAP"))
}

#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// Loads `insns` as an XDP program; on refusal, the error carries the verifier's log.
pub fn load_xdp(insns: &[Insn]) -> Result<OwnedFd, SysError> {
    let license = c"Apache-2.0";
    let mut log = vec![0u8; LOG_SIZE];
    let mut attr = ProgLoad {
        prog_type: PROG_TYPE_XDP,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_name: name("steerdns_xdp"),
        expected_attach_type: ATTACH_XDP,
        ..ProgLoad::default()
    };
    if let Ok(fd) = bpf(PROG_LOAD, &mut attr) {
        return Ok(owned(fd));
    }
    // Again with the log on, only to explain the refusal.
    attr.log_level = 1;
    attr.log_size = LOG_SIZE as u32;
    attr.log_buf = log.as_mut_ptr() as u64;
    match bpf(PROG_LOAD, &mut attr) {
        Ok(fd) => Ok(owned(fd)),
        Err(source) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let log = String::from_utf8_lossy(&log[..end]).into_owned();
            Err(SysError::Verifier { source, log })
        }
    }
}

#[repr(C)]
#[derive(Default)]
struct LinkCreate {
    prog_fd: u32,
    ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// Attaches `prog` to interface `ifindex`, in the driver if it can, else generically. The
/// program stays attached while the returned link is open. Fails with `EBUSY` when another
/// program is attached there: that one is left alone.
pub fn attach(prog: &OwnedFd, ifindex: u32) -> Result<(OwnedFd, Mode), SysError> {
    let link = |flags| {
        let mut attr = LinkCreate {
            prog_fd: prog.as_raw_fd() as u32,
            ifindex,
            attach_type: ATTACH_XDP,
            flags,
        };
        bpf(LINK_CREATE, &mut attr).map(owned)
    };
    match link(XDP_FLAGS_DRV_MODE) {
        Ok(fd) => Ok((fd, Mode::Driver)),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            Err(SysError::Call { what: "attaching the XDP program", source: e })
        }
        Err(_) => link(XDP_FLAGS_SKB_MODE)
            .map(|fd| (fd, Mode::Generic))
            .map_err(call("attaching the XDP program")),
    }
}

#[repr(C)]
#[derive(Default)]
struct TestRun {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
}

/// Runs `prog` once on `frame` in the kernel and returns its verdict.
pub fn test_run(prog: &OwnedFd, frame: &[u8]) -> Result<u32, SysError> {
    let mut out = vec![0u8; frame.len() + 512];
    let mut attr = TestRun {
        prog_fd: prog.as_raw_fd() as u32,
        data_size_in: frame.len() as u32,
        data_size_out: out.len() as u32,
        data_in: frame.as_ptr() as u64,
        data_out: out.as_mut_ptr() as u64,
        repeat: 1,
        ..TestRun::default()
    };
    bpf(PROG_TEST_RUN, &mut attr).map_err(call("running the XDP program"))?;
    Ok(attr.retval)
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;
    use crate::bpf::filter::{Action, Filter};
    use crate::frame::tests::query_frame;

    /// Loads the program into the kernel (the verifier must accept it) and runs it on
    /// frames. Needs CAP_BPF: without it the test says so and passes, unless
    /// STEERDNS_REQUIRE_TOOLS=1 asks for every test to run.
    #[test]
    fn kernel_verifies_and_runs_the_filter() {
        let filter = Filter {
            v4: vec!["198.18.0.1".parse().unwrap(), "198.18.0.3".parse().unwrap()],
            v6: vec!["2001:db8::1".parse().unwrap()],
            port: 53,
            // A match shows as a drop: the map has no sockets.
            unbound: Action::Drop,
        };
        let map = match xskmap(4) {
            Ok(m) => m,
            Err(e) if std::env::var("STEERDNS_REQUIRE_TOOLS").as_deref() != Ok("1") => {
                eprintln!("skipping: cannot create BPF maps here ({e})");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let prog = load_xdp(&filter.program(map.as_raw_fd()).unwrap()).unwrap();
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        let matched = Action::Drop as u32;
        let pass = Action::Pass as u32;
        let v4 = query_frame(a("198.18.0.2:4000"), a("198.18.0.1:53"), b"q");
        let v6 = query_frame(a("[2001:db8::2]:4000"), a("[2001:db8::1]:53"), b"q");
        let edit = |f: &[u8], at: usize, b: u8| {
            let mut f = f.to_vec();
            f[at] = b;
            f
        };
        let cases: Vec<(&str, Vec<u8>, u32)> = vec![
            ("ipv4 to a taken address", v4.clone(), matched),
            (
                "second ipv4 address",
                query_frame(a("198.18.0.2:4000"), a("198.18.0.3:53"), b"q"),
                matched,
            ),
            ("ipv6 to a taken address", v6.clone(), matched),
            ("other ipv4 address", query_frame(a("1.2.3.4:1"), a("198.18.0.9:53"), b""), pass),
            ("other ipv6 address", query_frame(a("[::2]:1"), a("[2001:db8::9]:53"), b""), pass),
            ("other port", query_frame(a("198.18.0.2:1"), a("198.18.0.1:54"), b""), pass),
            ("other ipv6 port", query_frame(a("[::2]:1"), a("[2001:db8::1]:5353"), b""), pass),
            ("arp", edit(&v4, 13, 0x06), pass),
            ("tcp", edit(&v4, 23, 6), pass),
            ("ipv4 options", edit(&v4, 14, 0x46), pass),
            ("fragment", edit(&v4, 21, 0x10), pass),
            ("more fragments", edit(&v4, 20, 0x20), pass),
            ("ipv6 fragment header", edit(&v6, 20, 44), pass),
            ("cut udp header", v4[..14 + 20 + 4].to_vec(), pass),
            // The kernel runs no program on a frame shorter than an Ethernet header.
            ("ethernet header alone", v4[..14].to_vec(), pass),
            ("cut ipv6 header", v6[..14 + 39].to_vec(), pass),
        ];
        for (what, frame, want) in cases {
            assert_eq!(test_run(&prog, &frame).unwrap(), want, "{what}");
        }
        // One family alone: the other's frames pass.
        let v4_only = Filter { v6: vec![], ..filter.clone() };
        let prog = load_xdp(&v4_only.program(map.as_raw_fd()).unwrap()).unwrap();
        assert_eq!(test_run(&prog, &v4).unwrap(), matched);
        assert_eq!(test_run(&prog, &v6).unwrap(), pass);
        let v6_only = Filter { v4: vec![], ..filter };
        let prog = load_xdp(&v6_only.program(map.as_raw_fd()).unwrap()).unwrap();
        assert_eq!(test_run(&prog, &v4).unwrap(), pass);
        assert_eq!(test_run(&prog, &v6).unwrap(), matched);
    }
}
