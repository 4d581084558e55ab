//! The AF_XDP fast path of `listen.xdp`: an XDP program steers UDP queries for the taken
//! addresses and port into one AF_XDP socket per receive queue, each served by its own
//! thread with the same responder as the UDP sockets; everything else goes to the kernel.

pub mod sys;
