//! `--model uring64`: a ring and a thread per group of 64 connections (overlapped I/O with events).
//!
//! NOT BUILT YET: this model is being written; until then it reports itself unavailable.

use crate::models::{ModelCtx, Policy};
use crate::ServerError;

pub const FIXED_THREADS: bool = false;
pub const SERVES_UDP: bool = false;

pub fn limitation(_policy: Policy) -> Option<&'static str> {
    None
}

pub fn unavailable() -> Option<String> {
    Some("this model is not built yet".into())
}

pub fn run(_ctx: ModelCtx) -> Result<(), ServerError> {
    Err(ServerError::Unavailable { model: "uring64", reason: "this model is not built yet".into() })
}
