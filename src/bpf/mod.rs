//! eBPF bytecode built in Rust: the instruction encoder (`insn`) and the XDP program that
//! steers DNS queries to AF_XDP sockets (`filter`). Pure: loading is the server's job.

pub mod filter;
pub mod insn;
