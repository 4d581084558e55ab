//! steerdns: an authoritative DNS traffic manager.
//!
//! Modules import only from the layers below their own, never sideways up or in a cycle:
//!
//! 1. `wire` (DNS wire format), `diag` (errors located at FILE:LINE:COL), `netrange`,
//!    `hash`, `bpf` (the XDP program as bytecode), `frame` (the Ethernet, IP and UDP
//!    headers around a query on the AF_XDP path) — no imports from the crate.
//! 2. `geo` (where a client is), then `model` (the immutable snapshot: profiles, zones,
//!    statuses, counters).
//! 3. `routing` — pure decisions over a snapshot.
//! 4. `responder` (query bytes in, reply bytes out; `explain` runs it too) and `config`
//!    (files in, a snapshot out; it reads files and spawns threads, so it is not pure).
//! 5. `probe` — the health prober, writing statuses into the snapshot's health table.
//! 6. `server` (sockets, reloads, file watching, the admin API) and `commands` (what the
//!    CLI subcommands do) — the shell, which only moves data in and out of the core.
//!
//! `main.rs` parses the command line and maps errors to exit codes. `docs/architecture.md`
//! follows a query, a probe result and a reload through these modules.

pub mod bpf;
pub mod commands;
pub mod config;
pub mod diag;
pub mod frame;
pub mod geo;
pub mod hash;
pub mod model;
pub mod netrange;
pub mod probe;
pub mod responder;
pub mod routing;
pub mod server;
pub mod wire;

/// The hash map of everything looked up per query: keys are short names and codes from the
/// configuration, so a fast non-cryptographic hash with a per-process random seed.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
