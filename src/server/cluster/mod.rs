//! The cluster: several replicas sharing one truth in etcd (`cluster:`). `session` holds
//! the etcd client, this replica's lease and whether etcd is reachable; `etcd` the reads
//! and backoff the other parts share; `health` the health views agreed across replicas.

pub mod etcd;
pub mod health;
pub mod session;

pub use session::Session;
