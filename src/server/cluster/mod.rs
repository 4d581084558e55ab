//! The cluster: several replicas sharing one truth in etcd (`cluster:`). `session` holds
//! the etcd client, this replica's lease and whether etcd is reachable; `etcd` the reads
//! and backoff the other parts share; `follow` mirrors a key range (snapshot, then changes)
//! for the parts that follow etcd; `profiles` reads and follows the profiles held in
//! etcd; `applied` how far this replica applied a prefix it follows; `nodes` registers
//! this replica; `health` the health views agreed across replicas; `overrides` shares
//! drains and weights (`override_record`: how they are kept in etcd); `pushed` shares
//! pushed health (`pushed_record`: how it is kept in etcd); `mirror` keeps what a replica
//! read of either prefix and hands it to the part that applies it; `leader` chooses one
//! replica to lead a role (the load control step, the merge of real user measurements);
//! `load` shares the load shares its leader computes; `rum` shares real user measurements.

pub mod applied;
pub mod etcd;
pub mod follow;
pub mod health;
pub mod leader;
pub mod load;
pub mod mirror;
pub mod nodes;
pub mod override_record;
pub mod overrides;
pub mod profiles;
pub mod pushed;
pub mod pushed_record;
pub mod rum;
pub mod session;

pub use session::Session;
