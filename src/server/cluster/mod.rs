//! The cluster: several replicas sharing one truth in etcd (`cluster:`). `session` holds
//! the etcd client, this replica's lease and whether etcd is reachable; `etcd` the reads
//! and backoff the other parts share; `profiles` reads and follows the profiles held in
//! etcd; `nodes` registers this replica.

pub mod etcd;
pub mod nodes;
pub mod profiles;
pub mod session;

pub use session::Session;
