//! Load feedback: reading each endpoint's load (`feed`, with Prometheus expositions read
//! by `exposition`), the control loop that turns loads into effective shares every
//! `load.interval`, and where those shares go (`docs/load.md`).

pub mod exposition;
pub mod feed;
