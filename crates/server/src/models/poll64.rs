//! `--model poll64`: groups of at most 64 connections, one poll(2) thread per group (WSAEventSelect).
//!
//! NOT BUILT YET: this model is being written; until then it reports itself unavailable.

use crate::models::{ModelCtx, Policy};
use crate::ServerError;

pub const FIXED_THREADS: bool = false;
pub const SERVES_UDP: bool = true;

pub fn limitation(_policy: Policy) -> Option<&'static str> {
    None
}

pub fn unavailable() -> Option<String> {
    Some("this model is not built yet".into())
}

pub fn run(_ctx: ModelCtx) -> Result<(), ServerError> {
    Err(ServerError::Unavailable { model: "poll64", reason: "this model is not built yet".into() })
}
