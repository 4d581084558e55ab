//! Real user measurements (`docs/rum.md`): the round-trip times browsers measure to each
//! region, aggregated per client network and published as an immutable table for the
//! query path. Pure: no I/O, and time is passed in, so the same reports at the same times
//! always give the same table.
//!
//! `settings` is the validated `rum:` block, `aggregate` keeps the recent samples of each
//! network (bounded, evicting the least recently reported), and `table` is what a publish
//! step builds from it: sorted prefixes, looked up without allocating or locking.
//! `saved` is the state file that keeps the samples across restarts, `shared` what
//! replicas of a cluster exchange through etcd, both in the byte layout of `codec`.

pub mod aggregate;
pub mod codec;
pub mod saved;
pub mod settings;
pub mod shared;
pub mod table;
#[cfg(test)]
mod testkit;

pub use aggregate::{Aggregator, Point, Sample};
pub use settings::{Aggregation, RumSettings, RumTarget};
pub use table::{Measured, MeasuredLatency, MeasuredRow};
