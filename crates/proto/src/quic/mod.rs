//! QUIC (RFC 9000/9001) as a datagram [`Endpoint`](crate::udp::Endpoint): quinn-proto's own
//! I/O-free `Endpoint` and `Connection`s, driven here once for every model, with an application
//! stage per connection on top (HTTP/3, [`h3`]).
//!
//! quinn-proto does the transport (handshake with rustls inside, loss recovery, congestion
//! control, flow control, anti-amplification, Retry tokens, connection-ID issuance, key updates,
//! stateless resets). What it leaves to its driver is here, in [`QuicEndpoint`]: the order of
//! its calls (each connection's endpoint events are passed back through the endpoint, or no new
//! connection IDs are ever issued and drained handles never freed), one timer per connection
//! kept in a heap, every `Incoming` accepted, refused, retried or ignored by the admission
//! policy ([`Admission`]), and the counts ([`QuicTotals`]). The socket layer only moves
//! datagrams.

mod config;
mod endpoint;
pub mod h3;
pub mod resumption;
mod totals;

#[cfg(test)]
mod h3_tests;
#[cfg(test)]
mod tests;

pub use config::{transport, QuicConfigError, QuicKeys, QuicSetup, QuicTuning, RetryMode, ServerCids};
pub use endpoint::{Admission, Apps, QuicEndpoint};
pub use quinn_proto;
pub use resumption::Handshake;
pub use totals::{HandshakeFailure, LostReason, QuicCounts, QuicTotals};
