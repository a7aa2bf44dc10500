//! sockscale's load generator.
//!
//! Echo, HTTP and UDP load, closed or open loop, from one or several threads and processes,
//! with latency in HDR histograms and every echoed byte verified. The protocol sides
//! (`client`, `http`, `pattern`) are I/O-free; `event_loop` drives them over sockets, one event
//! loop per thread; `run` starts the threads and assembles the [`report::Report`].

pub mod backoff;
pub mod client;
pub mod config;
pub mod connection;
pub mod event_loop;
pub mod events;
pub mod figures;
pub mod h3;
pub mod hlog;
pub mod http;
pub mod limits;
pub mod page;
pub mod pattern;
pub mod quic_report;
pub mod rate;
pub mod report;
pub mod run;
pub mod segment;
pub mod slo;
pub mod source;
pub mod ws;
pub mod ws_h2;
mod ws_h2_probe;
pub mod ws_report;

pub use config::{
    AcceptedStatuses, Endpoint, HttpRequest, LoadConfig, LoadTls, Mode, Progress, WsRun, DEFAULT_QUIC_MAX_MTU,
};
pub use report::Report;
pub use run::{preflight, run, run_with, LoadError};
pub use segment::Segment;
