//! Helpers for the measurement unit tests that encode and decode tables: times, client
//! addresses and two target regions.

use std::net::IpAddr;
use std::time::Duration;

use super::table::{MeasuredLatency, Row};

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The target regions, in column order.
pub const REGIONS: [&str; 2] = ["eu-west", "us-east"];

/// `REGIONS` as table columns: name and region index.
pub fn columns() -> Vec<(String, usize)> {
    REGIONS.iter().enumerate().map(|(i, r)| (r.to_string(), i)).collect()
}

/// Every row of `t`, owned, for comparing tables.
pub fn rows(t: &MeasuredLatency) -> Vec<Row> {
    t.rows().map(|(n, c, p)| (n, c.to_vec(), p)).collect()
}
