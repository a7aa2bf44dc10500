//! `--model select`: one thread waiting in select(2) (the seeds' non-blocking select server).
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
    Err(ServerError::Unavailable { model: "select", reason: "this model is not built yet".into() })
}
