//! The I/O models, one file each, behind one contract: `pub fn run(ModelCtx) -> Result<(),
//! ServerError>`. The files live with their family's shared engine: `readiness/` (select,
//! poll64, signal, epoll over the event loop), `completion/` (uring, uring64 over the io_uring
//! worker), `threads/` (blocking, threadpool over the hub), `runtime/` (tokio).
//!
//! A model receives the bound port, the configuration, the protocol, the counters and the
//! shutdown signal ([`ModelCtx`]); it calls [`ModelCtx::ready`] once it is serving; and it
//! returns when a shutdown has drained. What a model decides is only *who waits for readiness
//! or completion, on which thread*: the path of a byte and every policy come from the shared
//! code (the family's engine, the lifecycle and policies, the buffer pool, the protocol crate).
//!
//! What each model is and can do — seed counterpart, family, threads, how it waits, the
//! policies it cannot honour, known limits — is data, in one table ([`crate::model::CAPABILITIES`]),
//! and whether it can run here follows from its family. [`runner`] is the only place that picks
//! a model's file. A new model is a row in that table, a file beside its family's engine, an
//! arm in [`runner`] (the compiler asks for it) and a name in the tests' `for_every_model!` (a test
//! asks for it).

use crate::completion::{uring, uring64};
use crate::readiness::{epoll, poll64, select, signal};
use crate::runtime as tokio;
use crate::threads::{blocking, threadpool};

pub use crate::ctx::ModelCtx;
pub use crate::model::{Family, Model};

use crate::error::ServerError;

/// A model's entry point: serve until a shutdown has drained.
pub type Run = fn(ModelCtx) -> Result<(), ServerError>;

/// The file that implements `model`.
pub fn runner(model: Model) -> Run {
    match model {
        Model::Blocking => blocking::run,
        Model::Threadpool => threadpool::run,
        Model::Select => select::run,
        Model::Poll64 => poll64::run,
        Model::Signal => signal::run,
        Model::Epoll => epoll::run,
        Model::Uring => uring::run,
        Model::Uring64 => uring64::run,
        Model::Tokio => tokio::run,
    }
}

impl Family {
    /// Why this family's engine cannot run on this machine (io_uring disabled, say), or None.
    pub fn unavailable(self) -> Option<String> {
        match self {
            Family::Completion => crate::completion::unavailable(),
            Family::Readiness | Family::Threads | Family::Runtime => None,
        }
    }
}

impl Model {
    /// Why this model cannot run on this machine (io_uring disabled, say), or None.
    pub fn unavailable(self) -> Option<String> {
        self.family().unavailable()
    }

    /// Serve with this model until a shutdown has drained.
    pub fn run(self, ctx: ModelCtx) -> Result<(), ServerError> {
        if let Some(reason) = self.unavailable() {
            return Err(ServerError::Unavailable { model: self.name(), reason });
        }
        runner(self)(ctx)
    }
}
