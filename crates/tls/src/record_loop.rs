//! The record loop both sides share: rustls's unbuffered API driven over the caller's buffers.
//! A [`RecordLoop`] is fed received ciphertext (decrypted in place) and plaintext to send, and
//! appends plaintext and records to the caller's buffers; between calls it keeps only a record
//! that arrived in part, and plaintext given before the handshake allowed it.

use std::ops::DerefMut;
use std::time::{Duration, Instant};

use rustls::unbuffered::{
    ConnectionState, EncodeError, EncryptError, InsufficientSizeError, UnbufferedConnectionCommon, UnbufferedStatus,
    WriteTraffic,
};
use rustls::HandshakeKind;

use crate::outcomes::{Failure, FailureReason, Negotiated, Received};

/// The first byte of a TLS record that carries a handshake message: a peer whose first byte is
/// anything else is not speaking TLS (plain HTTP on a TLS port, say).
const HANDSHAKE_RECORD: u8 = 0x16;

/// A TLS record carrying an alert, an alert's fatal level, and the descriptions renamed (RFC
/// 8446 §6).
const ALERT_RECORD: u8 = 0x15;
const FATAL: u8 = 2;
const HANDSHAKE_FAILURE: u8 = 40;
const PROTOCOL_VERSION: u8 = 70;
/// TLS 1.2's version number (a hello's legacy version below it is TLS 1.1 or older).
const TLS12: u16 = 0x0303;

/// Rounds of rustls's state machine per call, at most (a handshake flight takes a handful).
const MAX_ROUNDS: usize = 10_000;

/// A rustls unbuffered connection of either side: how its records are processed.
pub(crate) trait Records: DerefMut<Target = UnbufferedConnectionCommon<Self::Data>> {
    type Data;
    fn process<'c, 'i>(&'c mut self, incoming: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, Self::Data>;
}

impl Records for rustls::server::UnbufferedServerConnection {
    type Data = rustls::server::ServerConnectionData;
    fn process<'c, 'i>(&'c mut self, incoming: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, Self::Data> {
        self.process_tls_records(incoming)
    }
}

impl Records for rustls::client::UnbufferedClientConnection {
    type Data = rustls::client::ClientConnectionData;
    fn process<'c, 'i>(&'c mut self, incoming: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, Self::Data> {
        self.process_tls_records(incoming)
    }
}

/// One TLS session's record loop (see the module).
pub(crate) struct RecordLoop<C> {
    conn: C,
    /// A record received in part, kept until the rest arrives; empty (and unallocated) when the
    /// connection is idle between whole records.
    partial: Vec<u8>,
    /// When the record kept in `partial` began arriving: a peer that stops half-way through a
    /// record is held to a deadline from here, as one that stops half-way through a request.
    partial_since: Option<Instant>,
    /// Plaintext given before the handshake allowed it to be sent.
    waiting: Vec<u8>,
    /// When the session was opened.
    opened: Instant,
    /// When the first ciphertext byte arrived.
    began: Option<Instant>,
    /// The peer's first byte did not begin a TLS handshake record.
    not_tls: bool,
    /// The legacy version of the peer's first hello, if its first record began with one
    /// (0: unknown): what tells a TLS 1.0 or 1.1 client (see [`RecordLoop::take_alert`]).
    hello_version: u16,
    handshaking: bool,
    /// The peer's close_notify was seen.
    peer_closed: bool,
    /// The session failed: nothing more is read or sent (the reason only: an idle session's
    /// every byte counts, and the detail was returned when it failed).
    failed: Option<FailureReason>,
}

impl<C: Records> RecordLoop<C> {
    pub(crate) fn new(conn: C, now: Instant) -> Self {
        RecordLoop {
            conn,
            partial: Vec::new(),
            partial_since: None,
            waiting: Vec::new(),
            opened: now,
            began: None,
            not_tls: false,
            hello_version: 0,
            handshaking: true,
            peer_closed: false,
            failed: None,
        }
    }

    /// Take `ciphertext` as received at `now` (it is decrypted in place, so it is the caller's
    /// receive buffer), appending what it decrypts to `plaintext` and the records to send to
    /// `out`. On a failure, send what was appended to `out` (the fatal alert), then close.
    pub(crate) fn receive(
        &mut self,
        ciphertext: &mut [u8],
        now: Instant,
        plaintext: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> Result<Received, Failure> {
        if let Some(reason) = self.failed {
            return Err(Failure { reason, detail: "the session had failed".to_owned() });
        }
        if let (None, Some(&first)) = (self.began, ciphertext.first()) {
            self.began = Some(now);
            self.not_tls = first != HANDSHAKE_RECORD;
            self.hello_version = hello_version(ciphertext);
        }
        let before = plaintext.len();
        let was_handshaking = self.handshaking;
        let result = if self.partial.is_empty() {
            // The common case: whole records, decrypted where they lie.
            let left = self.process(ciphertext, plaintext, out);
            left.map(|left| {
                if left > 0 {
                    self.partial.extend_from_slice(&ciphertext[ciphertext.len() - left..]);
                }
            })
        } else {
            let mut joined = std::mem::take(&mut self.partial);
            joined.extend_from_slice(ciphertext);
            let left = self.process(&mut joined, plaintext, out);
            left.map(|left| {
                joined.drain(..joined.len() - left);
                if !joined.is_empty() {
                    joined.shrink_to_fit();
                    self.partial = joined;
                }
            })
        };
        if let Err(failure) = result {
            self.failed = Some(failure.reason);
            return Err(failure);
        }
        if self.partial.is_empty() {
            self.partial_since = None;
        } else {
            self.partial_since.get_or_insert(now);
        }
        let handshake_done = if was_handshaking && !self.handshaking {
            self.began.map(|began| now.saturating_duration_since(began))
        } else {
            None
        };
        Ok(Received { plaintext: plaintext.len() - before, handshake_done, closed: self.peer_closed })
    }

    /// Run rustls over `buf` until it needs more input or has nothing to do; returns how many
    /// bytes at the end of `buf` are a record not yet whole.
    fn process(&mut self, buf: &mut [u8], plaintext: &mut Vec<u8>, out: &mut Vec<u8>) -> Result<usize, Failure> {
        let mut offset = 0;
        // Each round consumes input or produces output; the bound only turns a rustls state
        // that repeats forever into a failure instead of a hang.
        for _ in 0..MAX_ROUNDS {
            let UnbufferedStatus { mut discard, state } = self.conn.process(&mut buf[offset..]);
            let state = match state {
                Ok(state) => state,
                Err(e) => {
                    let failure = classify(&e, self.not_tls);
                    // A peer that is not speaking TLS is owed nothing but the close.
                    if !self.not_tls {
                        self.take_alert(&e, out);
                    }
                    return Err(failure);
                }
            };
            let more = match state {
                ConnectionState::ReadTraffic(mut traffic) => {
                    while let Some(record) = traffic.next_record() {
                        let record = record.map_err(|e| classify(&e, false))?;
                        discard += record.discard;
                        plaintext.extend_from_slice(record.payload);
                    }
                    true
                }
                // Early (0-RTT) data is never accepted: the server's configuration allows none.
                ConnectionState::ReadEarlyData(_) => {
                    return Err(Failure { reason: FailureReason::Protocol, detail: "unexpected early data".to_owned() })
                }
                ConnectionState::EncodeTlsData(mut encode) => {
                    append(out, |room| {
                        encode.encode(room).map_err(|e| match e {
                            EncodeError::InsufficientSize(InsufficientSizeError { required_size }) => {
                                Some(required_size)
                            }
                            EncodeError::AlreadyEncoded => None,
                        })
                    });
                    true
                }
                ConnectionState::TransmitTlsData(transmit) => {
                    // The records are in `out` already: the caller sends them.
                    transmit.done();
                    true
                }
                ConnectionState::PeerClosed => {
                    self.peer_closed = true;
                    true
                }
                ConnectionState::BlockedHandshake | ConnectionState::Closed => false,
                ConnectionState::WriteTraffic(mut write) => {
                    self.handshaking = false;
                    if !self.waiting.is_empty() {
                        let waiting = std::mem::take(&mut self.waiting);
                        encrypt(&mut write, &waiting, out)?;
                    }
                    false
                }
                _ => false,
            };
            offset += discard;
            if !more {
                return Ok(buf.len() - offset);
            }
        }
        Err(stuck())
    }

    /// After rustls failed, append the fatal alert it queued (RFC 8446 §6.2: protocol_version,
    /// handshake_failure, no_application_protocol, bad_record_mac...) to `out`, behind whatever
    /// the failing step queued before it (a ServerHello ahead of an ALPN refusal), so the peer
    /// learns why instead of seeing a bare close. rustls queues the alert in its outgoing queue
    /// when it fails, and `process_tls_records` pops that queue (as `EncodeTlsData`) before it
    /// deframes anything; so it is called, with no input, only while the queue holds something
    /// (`wants_write`): the deframer, which may still point into the input that failed, is
    /// never reached.
    ///
    /// One alert is renamed: rustls refuses a TLS 1.0 or 1.1 ClientHello for the
    /// signature_algorithms extension such a client never sends (a TLS 1.2 addition), with
    /// handshake_failure; the version is the reason, so the alert says protocol_version, as
    /// nginx's and OpenSSL's do (and `openssl s_client -tls1_1` prints it).
    fn take_alert(&mut self, error: &rustls::Error, out: &mut Vec<u8>) {
        let start = out.len();
        for _ in 0..MAX_ROUNDS {
            if !self.conn.wants_write() {
                break;
            }
            let Ok(ConnectionState::EncodeTlsData(mut encode)) = self.conn.process(&mut []).state else {
                break;
            };
            append(out, |room| {
                encode.encode(room).map_err(|e| match e {
                    EncodeError::InsufficientSize(InsufficientSizeError { required_size }) => Some(required_size),
                    EncodeError::AlreadyEncoded => None,
                })
            });
        }
        let too_old = matches!(
            error,
            rustls::Error::PeerIncompatible(rustls::PeerIncompatible::SignatureAlgorithmsExtensionRequired)
        ) && (1..TLS12).contains(&self.hello_version);
        // The alert in clear, as it goes before any key: content type, version, length 2,
        // level fatal, description.
        if let [ALERT_RECORD, _, _, 0, 2, FATAL, description] = &mut out[start..] {
            if too_old && *description == HANDSHAKE_FAILURE {
                *description = PROTOCOL_VERSION;
            }
        }
    }

    /// Encrypt `plaintext` into records appended to `out`. Before the handshake completes it
    /// is held, and encrypted as soon as the handshake allows.
    pub(crate) fn send(&mut self, plaintext: &[u8], out: &mut Vec<u8>) -> Result<(), Failure> {
        if let Some(reason) = self.failed {
            return Err(Failure { reason, detail: "the session had failed".to_owned() });
        }
        if self.handshaking {
            self.waiting.extend_from_slice(plaintext);
            return Ok(());
        }
        for _ in 0..MAX_ROUNDS {
            let UnbufferedStatus { state, .. } = self.conn.process(&mut []);
            match state {
                Ok(ConnectionState::WriteTraffic(mut write)) => return encrypt(&mut write, plaintext, out),
                // Tickets or a key update waiting to go out first.
                Ok(ConnectionState::EncodeTlsData(mut encode)) => append(out, |room| {
                    encode.encode(room).map_err(|e| match e {
                        EncodeError::InsufficientSize(InsufficientSizeError { required_size }) => Some(required_size),
                        EncodeError::AlreadyEncoded => None,
                    })
                }),
                Ok(ConnectionState::TransmitTlsData(transmit)) => transmit.done(),
                Ok(other) => {
                    let detail = format!("cannot send in state {other:?}");
                    return Err(Failure { reason: FailureReason::Protocol, detail });
                }
                Err(e) => return Err(classify(&e, false)),
            }
        }
        Err(stuck())
    }

    /// End the session politely: append a close_notify alert to `out`.
    pub(crate) fn close(&mut self, out: &mut Vec<u8>) {
        if self.handshaking || self.failed.is_some() {
            return;
        }
        for _ in 0..4 {
            let UnbufferedStatus { state, .. } = self.conn.process(&mut []);
            match state {
                Ok(ConnectionState::WriteTraffic(mut write)) => {
                    append(out, |room| {
                        write.queue_close_notify(room).map_err(|e| match e {
                            EncryptError::InsufficientSize(InsufficientSizeError { required_size }) => {
                                Some(required_size)
                            }
                            EncryptError::EncryptExhausted => None,
                        })
                    });
                    return;
                }
                Ok(ConnectionState::EncodeTlsData(mut encode)) => append(out, |room| {
                    encode.encode(room).map_err(|e| match e {
                        EncodeError::InsufficientSize(InsufficientSizeError { required_size }) => Some(required_size),
                        EncodeError::AlreadyEncoded => None,
                    })
                }),
                Ok(ConnectionState::TransmitTlsData(transmit)) => transmit.done(),
                _ => return,
            }
        }
    }

    /// Time the handshake from `now` (a client's, from its ClientHello).
    pub(crate) fn began_at(&mut self, now: Instant) {
        self.began = Some(now);
    }

    pub(crate) fn is_handshaking(&self) -> bool {
        self.handshaking
    }

    /// When the session was opened (the connection's acceptance, on the server): what its
    /// handshake deadline counts from.
    pub(crate) fn opened_at(&self) -> Instant {
        self.opened
    }

    /// While the handshake is under way, when it must be done if it may take `limit` from the
    /// connection's acceptance (a stalled ClientHello is closed then, like a slow request head).
    pub(crate) fn handshake_deadline(&self, limit: Duration) -> Option<Instant> {
        self.handshaking.then(|| self.opened.checked_add(limit).unwrap_or(self.opened))
    }

    /// The bytes kept between receives (a record received in part, plaintext waiting for the
    /// handshake): what an idle session costs beyond its fixed state.
    /// Since when a record has been arriving in part (None: none is).
    pub(crate) fn partial_since(&self) -> Option<Instant> {
        self.partial_since
    }

    pub(crate) fn buffered(&self) -> usize {
        self.partial.capacity() + self.waiting.capacity()
    }

    /// What the handshake agreed on, once it is done.
    pub(crate) fn negotiated(&self) -> Option<Negotiated> {
        if self.handshaking {
            return None;
        }
        let version = match self.conn.protocol_version()? {
            rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3",
            rustls::ProtocolVersion::TLSv1_2 => "TLSv1.2",
            _ => "other",
        };
        let suite = self.conn.negotiated_cipher_suite()?.suite();
        Some(Negotiated {
            version,
            suite: suite.as_str().map_or_else(|| format!("{suite:?}"), str::to_owned),
            alpn: self.conn.alpn_protocol().map(<[u8]>::to_vec),
            resumed: self.conn.handshake_kind() == Some(HandshakeKind::Resumed),
        })
    }
}

/// The legacy version of the hello that begins `first` (a connection's first bytes): a
/// handshake record header (5 bytes), the handshake header (type 1 or 2, length: 4 bytes), then
/// the version. 0 when the bytes are not that.
fn hello_version(first: &[u8]) -> u16 {
    match first {
        [HANDSHAKE_RECORD, _, _, _, _, 1 | 2, _, _, _, major, minor, ..] => u16::from_be_bytes([*major, *minor]),
        _ => 0,
    }
}

fn stuck() -> Failure {
    Failure { reason: FailureReason::Protocol, detail: "the TLS state machine made no progress".to_owned() }
}

/// Append what `write` puts into a slice of spare room to `out`, growing the room when `write`
/// says how much it needs (`Err(Some(n))`); `Err(None)`: nothing to write.
fn append(out: &mut Vec<u8>, mut write: impl FnMut(&mut [u8]) -> Result<usize, Option<usize>>) {
    let start = out.len();
    let mut room = 512;
    loop {
        out.resize(start + room, 0);
        match write(&mut out[start..]) {
            Ok(n) => {
                out.truncate(start + n);
                return;
            }
            Err(Some(needed)) if needed > room => room = needed,
            Err(_) => {
                out.truncate(start);
                return;
            }
        }
    }
}

fn encrypt<D>(write: &mut WriteTraffic<'_, D>, plaintext: &[u8], out: &mut Vec<u8>) -> Result<(), Failure> {
    let mut failed = None;
    append(out, |room| {
        write.encrypt(plaintext, room).map_err(|e| match e {
            EncryptError::InsufficientSize(InsufficientSizeError { required_size }) => Some(required_size),
            EncryptError::EncryptExhausted => {
                failed = Some(Failure { reason: FailureReason::Protocol, detail: e.to_string() });
                None
            }
        })
    });
    failed.map_or(Ok(()), Err)
}

/// Name a rustls error. `not_tls`: the client's first byte did not begin a handshake record,
/// so whatever rustls says, the client is not speaking TLS.
pub(crate) fn classify(error: &rustls::Error, not_tls: bool) -> Failure {
    use rustls::Error as E;
    let reason = match error {
        _ if not_tls => FailureReason::NotTls,
        E::PeerIncompatible(_) | E::NoApplicationProtocol => FailureReason::Incompatible,
        E::AlertReceived(_) => FailureReason::PeerAlert,
        E::InvalidCertificate(_) => FailureReason::Certificate,
        _ => FailureReason::Protocol,
    };
    let detail = match error {
        E::InvalidCertificate(certificate) => crate::outcomes::certificate(certificate),
        other => other.to_string(),
    };
    Failure { reason, detail }
}
