//! The DNS front end: the shared responder, and the UDP and TCP listeners that feed it.

pub mod responder;
pub mod tcp;
pub mod udp;
