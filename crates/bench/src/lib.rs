//! `sockscale bench`, `report` and `plan`: the seeds' Table 6-3, reproduced on the machine it
//! runs on.
//!
//! The harness starts `sockscale serve` for each model as its own process, drives it with
//! `sockscale load` processes, watches it through /proc, and writes raw JSON first; the
//! markdown table, the CSVs, the charts and the HTML page are all drawn from that JSON.

pub mod caddy;
pub mod harness;
pub mod interference;
pub mod machine;
pub mod nginx;
pub mod plan;
pub mod profile;
pub mod report;
pub mod results;
pub mod run;
pub mod sampler;
pub mod seed;
pub mod tables;
pub mod verdict;

pub use profile::Profile;
pub use results::Results;
