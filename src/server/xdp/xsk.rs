//! One AF_XDP socket with its own UMEM and four rings, through libc: the kernel writes
//! received frames into the UMEM and their places into the RX ring; frames to send go in
//! through the TX ring; the FILL and COMPLETION rings hand frames back and forth.
//!
//! Every frame is in exactly one place at a time (fill/RX, being answered, TX/completion),
//! and every ring holds all frames, so no ring can overflow and nothing is allocated after
//! `open`. A reply is written over the query's own frame.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// Bytes of one UMEM frame: a page, the chunk size every driver takes.
pub const FRAME_SIZE: usize = 4096;
/// Frames per socket; also the size of every ring.
const FRAMES: u32 = 2048;
/// Bytes of one socket's UMEM, locked in memory: they count against RLIMIT_MEMLOCK unless
/// the process has CAP_IPC_LOCK.
pub const UMEM_BYTES: usize = FRAMES as usize * FRAME_SIZE;

/// How the socket moves frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Copying {
    /// The driver DMAs straight into the UMEM.
    ZeroCopy,
    /// The kernel copies each frame: every driver, veth included, offers this.
    Copy,
}

/// Frames the kernel dropped before they reached the socket, as counted since it opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelDrops {
    /// No free frame to receive into: replies or queries held every frame (or the frame was
    /// larger than one).
    pub no_free_frame: u64,
    /// The RX ring was full: the worker fell behind.
    pub rx_ring_full: u64,
}

/// A mapped region, unmapped on drop.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by one socket, moved between threads whole.
unsafe impl Send for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` came from a successful mmap and are unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

fn mmap(len: usize, prot: i32, flags: i32, fd: i32, offset: u64) -> io::Result<Mapping> {
    // SAFETY: a fresh mapping; the kernel checks fd and offset.
    let p =
        unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, offset as libc::off_t) };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(Mapping { ptr: NonNull::new(p.cast()).ok_or_else(io::Error::last_os_error)?, len })
}

/// One ring shared with the kernel: a power-of-two array of `T` with free-running
/// producer and consumer indices.
struct Ring<T> {
    _map: Mapping,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    descs: *mut T,
}

// SAFETY: the ring's pointers all point into its own mapping, which moves with it.
unsafe impl<T> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    fn map(fd: i32, off: &libc::xdp_ring_offset, pgoff: u64) -> io::Result<Ring<T>> {
        let len = off.desc as usize + FRAMES as usize * size_of::<T>();
        let map = mmap(
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd,
            pgoff,
        )?;
        let at = |o: u64| map.ptr.as_ptr().wrapping_add(o as usize);
        Ok(Ring {
            producer: at(off.producer).cast(),
            consumer: at(off.consumer).cast(),
            flags: at(off.flags).cast(),
            descs: at(off.desc).cast(),
            _map: map,
        })
    }

    fn slot(&self, index: u32) -> *mut T {
        self.descs.wrapping_add((index & (FRAMES - 1)) as usize)
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: the kernel's index word inside the live mapping, only accessed atomically.
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as `producer`.
        unsafe { &*self.consumer }
    }

    /// Whether the kernel asks to be woken (`XDP_USE_NEED_WAKEUP`) to go on with this ring.
    fn needs_wakeup(&self) -> bool {
        // SAFETY: as `producer`.
        unsafe { &*self.flags }.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    /// Takes up to `out.len()` entries the kernel produced.
    fn take(&self, out: &mut [T]) -> usize {
        let cons = self.consumer().load(Ordering::Relaxed);
        let ready = self.producer().load(Ordering::Acquire).wrapping_sub(cons) as usize;
        let n = ready.min(out.len());
        for (i, o) in out[..n].iter_mut().enumerate() {
            // SAFETY: entries between consumer and producer are the kernel's finished ones.
            *o = unsafe { self.slot(cons.wrapping_add(i as u32)).read() };
        }
        self.consumer().store(cons.wrapping_add(n as u32), Ordering::Release);
        n
    }

    /// Entries given to the kernel that it has not taken yet.
    fn pending(&self) -> u32 {
        let prod = self.producer().load(Ordering::Relaxed);
        prod.wrapping_sub(self.consumer().load(Ordering::Acquire))
    }

    /// Gives `items` to the kernel. Never more than fits: every ring holds every frame.
    fn give(&self, items: &[T]) {
        let prod = self.producer().load(Ordering::Relaxed);
        let free = FRAMES - prod.wrapping_sub(self.consumer().load(Ordering::Acquire));
        let n = items.len().min(free as usize);
        for (i, item) in items[..n].iter().enumerate() {
            // SAFETY: slots between producer and consumer + size are ours to write.
            unsafe { self.slot(prod.wrapping_add(i as u32)).write(*item) };
        }
        self.producer().store(prod.wrapping_add(n as u32), Ordering::Release);
    }
}

/// An AF_XDP socket bound to one queue of one interface, with its UMEM.
pub struct Xsk {
    fd: OwnedFd,
    umem: Mapping,
    fill: Ring<u64>,
    completion: Ring<u64>,
    rx: Ring<libc::xdp_desc>,
    tx: Ring<libc::xdp_desc>,
    pub copying: Copying,
}

fn setsockopt<T>(fd: i32, name: i32, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a live value of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_XDP,
            name,
            std::ptr::from_ref(value).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Reads the `SOL_XDP` option `name` of socket `fd`.
///
/// # Safety
/// `T` must be a plain struct of integers (all-zero valid), the one the kernel fills for
/// `name`.
unsafe fn getsockopt<T>(fd: i32, name: i32) -> io::Result<T> {
    // SAFETY: all-zero is a valid `T`, as the caller promises.
    let mut value: T = unsafe { std::mem::zeroed() };
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is as large as `len` says.
    let rc =
        unsafe { libc::getsockopt(fd, libc::SOL_XDP, name, (&raw mut value).cast(), &mut len) };
    if rc == 0 { Ok(value) } else { Err(io::Error::last_os_error()) }
}

impl Xsk {
    /// Opens a socket on queue `queue` of interface `ifindex`: zero-copy if the driver
    /// offers it, else copy mode.
    pub fn open(ifindex: u32, queue: u32) -> io::Result<Xsk> {
        // SAFETY: plain socket creation.
        let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new fd owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let raw = fd.as_raw_fd();
        let umem = mmap(
            UMEM_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
            -1,
            0,
        )?;
        let reg = libc::xdp_umem_reg {
            addr: umem.ptr.as_ptr() as u64,
            len: umem.len as u64,
            chunk_size: FRAME_SIZE as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(raw, libc::XDP_UMEM_REG, &reg)?;
        for ring in [
            libc::XDP_UMEM_FILL_RING,
            libc::XDP_UMEM_COMPLETION_RING,
            libc::XDP_RX_RING,
            libc::XDP_TX_RING,
        ] {
            setsockopt(raw, ring, &(FRAMES as libc::c_int))?;
        }
        // SAFETY: a plain struct of integers.
        let off: libc::xdp_mmap_offsets = unsafe { getsockopt(raw, libc::XDP_MMAP_OFFSETS)? };
        let fill = Ring::map(raw, &off.fr, libc::XDP_UMEM_PGOFF_FILL_RING)?;
        let completion = Ring::map(raw, &off.cr, libc::XDP_UMEM_PGOFF_COMPLETION_RING)?;
        let rx = Ring::map(raw, &off.rx, libc::XDP_PGOFF_RX_RING as u64)?;
        let tx = Ring::map(raw, &off.tx, libc::XDP_PGOFF_TX_RING as u64)?;
        let bind = |flags: u16| {
            let sa = libc::sockaddr_xdp {
                sxdp_family: libc::AF_XDP as u16,
                sxdp_flags: flags | libc::XDP_USE_NEED_WAKEUP,
                sxdp_ifindex: ifindex,
                sxdp_queue_id: queue,
                sxdp_shared_umem_fd: 0,
            };
            // SAFETY: a valid sockaddr_xdp of the size passed.
            let rc = unsafe {
                libc::bind(
                    raw,
                    (&raw const sa).cast(),
                    size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
                )
            };
            if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
        };
        let copying = match bind(libc::XDP_ZEROCOPY) {
            Ok(()) => Copying::ZeroCopy,
            Err(_) => bind(libc::XDP_COPY).map(|()| Copying::Copy)?,
        };
        let xsk = Xsk { fd, umem, fill, completion, rx, tx, copying };
        // Every frame starts in the fill ring, ready for the kernel to receive into.
        let mut addrs = [0u64; 64];
        for chunk in (0..u64::from(FRAMES)).collect::<Vec<_>>().chunks(64) {
            let n = chunk.len();
            for (a, f) in addrs.iter_mut().zip(chunk) {
                *a = f * FRAME_SIZE as u64;
            }
            xsk.fill.give(&addrs[..n]);
        }
        Ok(xsk)
    }

    pub fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Takes received frames' descriptors, at most `out.len()`.
    pub fn receive(&self, out: &mut [libc::xdp_desc]) -> usize {
        self.rx.take(out)
    }

    /// The bytes of frame `addr`, from its start to the end of its chunk: the received
    /// frame is its first `len` bytes, and a reply may use the rest.
    pub fn frame(&mut self, addr: u64) -> &mut [u8] {
        let start = (addr as usize).min(self.umem.len);
        let end = (start / FRAME_SIZE + 1) * FRAME_SIZE;
        // SAFETY: [start, end) lies inside the UMEM (one chunk), and `&mut self` makes this
        // the only view of it; the kernel does not touch a frame between RX and TX/fill.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.umem.ptr.as_ptr().add(start),
                end.min(self.umem.len) - start,
            )
        }
    }

    /// Returns frames that got no reply to the kernel for receiving.
    pub fn recycle(&self, addrs: &[u64]) {
        self.fill.give(addrs);
    }

    /// Queues replies, then has the kernel send them.
    pub fn send(&self, descs: &[libc::xdp_desc]) {
        if !descs.is_empty() {
            self.tx.give(descs);
        }
        self.kick();
    }

    /// Whether replies wait in the TX ring for the kernel.
    pub fn sending(&self) -> bool {
        self.tx.pending() > 0
    }

    /// Has the kernel send what the TX ring holds. In copy mode each call sends only a
    /// few dozen frames (32 on current kernels) and nothing sends the rest until the next
    /// call, so a burst would strand frames in the ring until the fill ring ran dry: call
    /// until the ring is empty or the kernel takes nothing (device busy; the worker's next
    /// turn tries again). In zero-copy mode the driver sends on its own once woken.
    pub fn kick(&self) {
        if self.copying == Copying::ZeroCopy {
            if self.tx.pending() > 0 && self.tx.needs_wakeup() {
                self.wake_tx();
            }
            return;
        }
        let mut pending = self.tx.pending();
        while pending > 0 {
            self.wake_tx();
            let left = self.tx.pending();
            if left >= pending {
                return;
            }
            pending = left;
        }
    }

    fn wake_tx(&self) {
        // SAFETY: a zero-length send on our own socket only kicks transmission.
        unsafe {
            libc::sendto(self.fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT, std::ptr::null(), 0)
        };
    }

    /// Moves sent frames back to the fill ring; returns how many.
    pub fn reclaim(&self, scratch: &mut [u64]) -> usize {
        let n = self.completion.take(scratch);
        self.fill.give(&scratch[..n]);
        n
    }

    /// Waits up to `timeout_ms` for received frames (also wakes a kernel that needs it
    /// to refill). Interruptions count as no frames.
    pub fn wait(&self, timeout_ms: i32) {
        let mut p = libc::pollfd { fd: self.fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, timeout_ms) };
    }

    /// What the kernel dropped on its way to this socket since it was opened.
    pub fn drops(&self) -> io::Result<KernelDrops> {
        // SAFETY: a plain struct of integers.
        let stats: libc::xdp_statistics = unsafe { getsockopt(self.fd(), libc::XDP_STATISTICS)? };
        Ok(KernelDrops { no_free_frame: stats.rx_dropped, rx_ring_full: stats.rx_ring_full })
    }

    /// Whether the kernel waits for a wakeup to use the fill ring again.
    pub fn fill_needs_wakeup(&self) -> bool {
        self.fill.needs_wakeup()
    }
}
