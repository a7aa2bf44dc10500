//! sockscale's HTTP/2 server stage (RFC 9113), with no I/O: see the README of the workspace.
//!
//! PLACEHOLDER: full documentation below is written once the API settles.

pub mod config;
mod conn;
pub mod frame;
pub mod hpack;
mod request;
mod stats;
#[cfg(test)]
mod tests;

pub use config::{Budget, Limits, LimitsError};
pub use conn::{Body, Closing, Connection, Event, Verdict};
pub use frame::ErrorCode;
pub use hpack::HeaderList;
pub use request::{Malformed, Request};
pub use stats::{Limit, Stats};
