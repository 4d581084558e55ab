//! The immutable model the query path reads: profiles and their endpoints, zones and their
//! records, endpoint statuses, and the snapshot that bundles one configuration with its
//! health table and query counters. Built by `config`, read by `routing` and the responder,
//! never changed after a load (statuses and counters are atomics). `events` is the one part
//! outside the snapshot: the recent status changes and operator actions.

pub mod cluster;
pub mod counters;
pub mod dnssec;
pub mod events;
pub mod external;
pub mod flat;
pub mod health;
pub mod health_file;
pub mod load;
pub mod monitor_rule;
pub mod notify;
pub mod presigned;
pub mod probe_params;
pub mod profile;
pub mod reply_pattern;
pub mod sigcache;
pub mod sign_counts;
pub mod signing;
pub mod snapshot;
pub mod vantage;
pub mod zone;

pub use counters::{Outcome, QueryCounters, Tally};
pub use external::{ExternalMonitor, MissingData};
pub use health::{HealthTable, HealthView, Status};
pub use load::{LoadTable, Share};
pub use monitor_rule::MonitorRule;
pub use profile::*;
pub use snapshot::{AdminLimits, AdminTls, AdminToken, Listen, Snapshot, TcpLimits, TokenRole};
pub use zone::Zone;
