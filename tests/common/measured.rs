//! Real user measurements for the example configuration's `fast` profile, shared by the
//! allocation test and the instruction-count example (which includes this file by path:
//! an example cannot import the test harness).

use std::time::Duration;

use steerdns::geo::rum::{Aggregation, Aggregator, MeasuredLatency};
use steerdns::model::Snapshot;

/// A measured-latency table for `fast`'s clients: 198.51.100.130 and .131 share a /24
/// with us-east fastest (so the measured row, not the latency table, decides), a
/// neighbour /24 is answered by the /16 aggregate, and 203.0.113.7 has a row of its own.
pub fn measured_table(snap: &Snapshot) -> MeasuredLatency {
    let latency = snap.world.latency.as_ref().expect("the example has a latency table");
    let columns: Vec<(String, usize)> = ["eu-west", "us-east", "cn-shanghai"]
        .iter()
        .map(|r| (r.to_string(), latency.region(r).expect("region in the table")))
        .collect();
    let params = Aggregation { min_samples: 1, ..Aggregation::default() };
    let mut a = Aggregator::new(params, columns.len());
    for (i, addr) in ["198.51.100.130", "198.51.100.131", "203.0.113.7"].iter().enumerate() {
        let at = Duration::from_secs(i as u64 + 1);
        a.record(addr.parse().unwrap(), &[(0, 40.0), (1, 25.0), (2, 90.0)], at);
    }
    a.publish(Duration::from_secs(10), columns, None)
}
