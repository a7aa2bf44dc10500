//! The I/O models, one file each, behind one contract: [`IoModel`]. The files live with their
//! family's shared engine: `readiness/` (select, poll64, signal, epoll over the event loop),
//! `completion/` (uring, uring64 over the io_uring worker), `threads/` (blocking, threadpool
//! over the hub), `runtime/` (tokio).
//!
//! A model receives the bound port, the configuration, the protocol, the counters and the
//! shutdown signal ([`ModelCtx`]); it calls [`ModelCtx::ready`] once it is serving; and it
//! returns when a shutdown has drained. What a model decides is only *who waits for readiness
//! or completion, on which thread*: the path of a byte and every policy come from the shared
//! code (the readiness event loop in `readiness`, the buffer pool, the protocol crate).
//!
//! What each model is and can do — seed counterpart, threads, how it waits, the policies it
//! cannot honour, known limits — is data, in one table ([`crate::model::CAPABILITIES`]); a model
//! file holds only its module docs about who waits on which thread, and its run code.
//! [`engine`] is the only place that picks a model's file.

use crate::completion::{uring, uring64};
use crate::readiness::{epoll, poll64, select, signal};
use crate::runtime as tokio;
use crate::threads::{blocking, threadpool};

pub use crate::ctx::{IoModel, ModelCtx};
pub use crate::model::Model;

use crate::error::ServerError;

/// The file that implements `model`.
pub fn engine(model: Model) -> &'static dyn IoModel {
    match model {
        Model::Blocking => &blocking::BlockingModel,
        Model::Threadpool => &threadpool::ThreadpoolModel,
        Model::Select => &select::SelectModel,
        Model::Poll64 => &poll64::Poll64Model,
        Model::Signal => &signal::SignalModel,
        Model::Epoll => &epoll::EpollModel,
        Model::Uring => &uring::UringModel,
        Model::Uring64 => &uring64::Uring64Model,
        Model::Tokio => &tokio::TokioModel,
    }
}

impl Model {
    /// Why this model cannot run on this machine (io_uring disabled, say), or None.
    pub fn unavailable(self) -> Option<String> {
        engine(self).unavailable()
    }

    /// Serve with this model until a shutdown has drained.
    pub fn run(self, ctx: ModelCtx) -> Result<(), ServerError> {
        let engine = engine(self);
        if let Some(reason) = engine.unavailable() {
            return Err(ServerError::Unavailable { model: engine.model().name(), reason });
        }
        engine.run(ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_has_its_own_file() {
        for model in Model::ALL {
            assert_eq!(engine(model).model(), model);
        }
    }
}
