//! The DNS front end: wire parsing and writing, the shared responder, and the UDP and TCP
//! listeners that feed it.

pub mod name;
pub mod request;
pub mod responder;
pub mod response;
pub mod tcp;
pub mod udp;
