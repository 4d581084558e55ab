//! steerdns: an authoritative DNS traffic manager.
//!
//! The crate is split into a functional core — `config` (YAML to an immutable `Snapshot`),
//! `routing` (pure decisions), `dns::request`/`response`/`responder` (bytes in, bytes out) —
//! and an imperative shell — `dns::udp`, `dns::tcp` and `server` — that only moves data in
//! and out of it. `main.rs` is a thin CLI over `commands`.

pub mod commands;
pub mod config;
pub mod diag;
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
