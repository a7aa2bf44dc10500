//! The I/O models, one file each, behind one contract: [`IoModel`].
//!
//! A model receives the bound port, the configuration, the protocol, the counters and the
//! shutdown signal ([`ModelCtx`]); it calls [`ModelCtx::ready`] once it is serving; and it
//! returns when a shutdown has drained. What a model decides is only *who waits for readiness
//! or completion, on which thread*: the path of a byte and every policy come from the shared
//! code (the readiness event loop in `evloop`, the buffer pool, the protocol crate).
//!
//! What each model is and can do — seed counterpart, threads, how it waits, the policies it
//! cannot honour, known limits — is data, in one table ([`crate::model::CAPABILITIES`]); a model
//! file holds only its module docs about who waits on which thread, and its run code.
//! [`engine`] is the only place that picks a model's file.

pub mod blocking;
pub mod epoll;
pub mod poll64;
pub mod select;
pub mod signal;
pub mod threadpool;
pub mod tokio;
pub mod uring;
pub mod uring64;

pub use crate::ctx::ModelCtx;
pub use crate::model::Model;

use crate::error::ServerError;

/// The contract every model file implements.
pub trait IoModel: Sync {
    /// Which model this is; its capabilities are `self.model().capabilities()`.
    fn model(&self) -> Model;

    /// Why this model cannot run on this machine (io_uring disabled, say), or None.
    fn unavailable(&self) -> Option<String> {
        None
    }

    /// Serve until a shutdown has drained.
    fn run(&self, ctx: ModelCtx) -> Result<(), ServerError>;
}

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
