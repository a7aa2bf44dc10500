//! permessage-deflate (RFC 7692): the offer and response of `Sec-WebSocket-Extensions`, and the
//! raw DEFLATE that compresses messages sent and inflates messages received.
//!
//! Backend: `flate2` with `zlib-rs` (pure Rust zlib). Window bits need a zlib backend:
//! `Compress::new_with_window_bits` and `Decompress::new_with_window_bits` exist only with one of
//! flate2's zlib features, and miniz_oxide (flate2's default) always uses a 32 KiB window, which
//! cannot honour a peer's `server_max_window_bits` below 15. zlib-rs needs no C compiler.
//! zlib (and flate2) refuse 8 window bits for raw DEFLATE: a peer that asks for 8 still gets
//! the extension, and this side sends its messages uncompressed (RSV1 clear, which §6 allows
//! for any message); inflating uses 9 bits there, a larger window reading any smaller one.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use crate::Role;

pub const EXTENSION: &str = "permessage-deflate";
/// The octets a sender strips from the end of a compressed message and a receiver appends.
const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// One side's wishes for permessage-deflate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeflateConfig {
    /// The server starts each message it sends with an empty window.
    pub server_no_context_takeover: bool,
    /// The client starts each message it sends with an empty window.
    pub client_no_context_takeover: bool,
    /// The largest window the server compresses with (9..=15).
    pub server_max_window_bits: u8,
    /// The largest window the client compresses with (9..=15).
    pub client_max_window_bits: u8,
    /// zlib's compression level, 0..=9.
    pub level: u32,
}

impl Default for DeflateConfig {
    /// Windows of 15 bits with context takeover (the best ratio), and level 1: echoed messages
    /// are small, and level 1 compresses them nearly as well as 6 for a fraction of the CPU.
    fn default() -> Self {
        DeflateConfig {
            server_no_context_takeover: false,
            client_no_context_takeover: false,
            server_max_window_bits: 15,
            client_max_window_bits: 15,
            level: 1,
        }
    }
}

/// What both sides agreed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeflateParams {
    pub server_no_context_takeover: bool,
    pub client_no_context_takeover: bool,
    /// 8..=15; 15 when the response did not say.
    pub server_max_window_bits: u8,
    pub client_max_window_bits: u8,
    /// This side's compression level.
    pub level: u32,
}

impl DeflateParams {
    /// The parameters as a server's `Sec-WebSocket-Extensions` value names them: the window
    /// bits only where the offer had them (RFC 7692 §7.1.2).
    pub fn response_value(&self, server_bits_offered: bool, client_bits_offered: bool) -> String {
        let mut value = String::from(EXTENSION);
        if self.server_no_context_takeover {
            value.push_str("; server_no_context_takeover");
        }
        if self.client_no_context_takeover {
            value.push_str("; client_no_context_takeover");
        }
        if server_bits_offered {
            value.push_str(&format!("; server_max_window_bits={}", self.server_max_window_bits));
        }
        if client_bits_offered && self.client_max_window_bits < 15 {
            value.push_str(&format!("; client_max_window_bits={}", self.client_max_window_bits));
        }
        value
    }
}

/// One permessage-deflate offer (or response), its parameters checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Offer {
    pub server_no_context_takeover: bool,
    pub client_no_context_takeover: bool,
    pub server_max_window_bits: Option<u8>,
    /// `Some(None)`: the parameter without a value (the client can take any value).
    pub client_max_window_bits: Option<Option<u8>>,
}

/// Window bits as RFC 7692 §7.1.2 writes them: 8..=15, digits only, quotes allowed.
fn window_bits(value: &str) -> Option<u8> {
    let value = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(value);
    if value.is_empty() || value.len() > 2 || !value.bytes().all(|b| b.is_ascii_digit()) || value.starts_with('0') {
        return None;
    }
    value.parse::<u8>().ok().filter(|bits| (8..=15).contains(bits))
}

/// Splits a `Sec-WebSocket-Extensions` value into its extensions: each a name and the raw
/// `;`-separated parameters.
pub fn extensions(value: &str) -> impl Iterator<Item = (&str, &str)> {
    value.split(',').filter(|e| !e.trim().is_empty()).map(|e| {
        let (name, params) = e.split_once(';').unwrap_or((e, ""));
        (name.trim(), params)
    })
}

/// Reads a permessage-deflate offer's parameters: `None` if one is unknown, repeated, or has a
/// bad value (such an offer is declined, RFC 7692 §5).
pub fn parse_params(params: &str) -> Option<Offer> {
    let mut offer = Offer::default();
    for param in params.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, value) = match param.split_once('=') {
            Some((name, value)) => (name.trim(), Some(value.trim())),
            None => (param, None),
        };
        match (name.to_ascii_lowercase().as_str(), value) {
            ("server_no_context_takeover", None) if !offer.server_no_context_takeover => {
                offer.server_no_context_takeover = true
            }
            ("client_no_context_takeover", None) if !offer.client_no_context_takeover => {
                offer.client_no_context_takeover = true
            }
            ("server_max_window_bits", Some(value)) if offer.server_max_window_bits.is_none() => {
                offer.server_max_window_bits = Some(window_bits(value)?)
            }
            ("client_max_window_bits", value) if offer.client_max_window_bits.is_none() => {
                offer.client_max_window_bits = Some(match value {
                    Some(value) => Some(window_bits(value)?),
                    None => None,
                })
            }
            _ => return None,
        }
    }
    Some(offer)
}

/// The server's choice among a request's `Sec-WebSocket-Extensions` values: the first valid
/// permessage-deflate offer, with the value to answer in the 101.
pub fn negotiate<'a>(
    values: impl IntoIterator<Item = &'a str>,
    config: &DeflateConfig,
) -> Option<(DeflateParams, String)> {
    let offer = values
        .into_iter()
        .flat_map(extensions)
        .filter(|(name, _)| name.eq_ignore_ascii_case(EXTENSION))
        .find_map(|(_, params)| parse_params(params))?;
    let server_bits = config.server_max_window_bits.clamp(9, 15).min(offer.server_max_window_bits.unwrap_or(15));
    let client_bits = match offer.client_max_window_bits {
        Some(offered) => config.client_max_window_bits.clamp(9, 15).min(offered.unwrap_or(15)),
        // Without the parameter the client may use 15 bits, whatever the server would like.
        None => 15,
    };
    let params = DeflateParams {
        server_no_context_takeover: offer.server_no_context_takeover || config.server_no_context_takeover,
        client_no_context_takeover: offer.client_no_context_takeover || config.client_no_context_takeover,
        server_max_window_bits: server_bits,
        client_max_window_bits: client_bits,
        level: config.level,
    };
    let value = params.response_value(offer.server_max_window_bits.is_some(), offer.client_max_window_bits.is_some());
    Some((params, value))
}

/// A client's offer for `config`.
pub fn offer_value(config: &DeflateConfig) -> String {
    let mut value = String::from(EXTENSION);
    if config.server_no_context_takeover {
        value.push_str("; server_no_context_takeover");
    }
    if config.client_no_context_takeover {
        value.push_str("; client_no_context_takeover");
    }
    if config.server_max_window_bits < 15 {
        value.push_str(&format!("; server_max_window_bits={}", config.server_max_window_bits.max(8)));
    }
    if config.client_max_window_bits < 15 {
        value.push_str(&format!("; client_max_window_bits={}", config.client_max_window_bits.max(9)));
    } else {
        value.push_str("; client_max_window_bits");
    }
    value
}

/// Checks a server's response to [`offer_value`]`(config)`: the parameters agreed, or `None`
/// if the response is not one the offer allows (RFC 7692 §7.1).
pub fn accept_response(params: &str, config: &DeflateConfig) -> Option<DeflateParams> {
    let response = parse_params(params)?;
    if config.server_no_context_takeover && !response.server_no_context_takeover {
        return None;
    }
    let server_bits = match response.server_max_window_bits {
        Some(bits) if config.server_max_window_bits < 15 && bits > config.server_max_window_bits.max(8) => return None,
        Some(bits) => bits,
        None if config.server_max_window_bits < 15 => return None,
        None => 15,
    };
    let own_bits = config.client_max_window_bits.clamp(9, 15);
    let client_bits = match response.client_max_window_bits {
        // The server must give a value for it (§7.1.2.2), within what was offered.
        Some(None) => return None,
        Some(Some(bits)) if bits > own_bits => return None,
        Some(Some(bits)) => bits,
        None => own_bits,
    };
    Some(DeflateParams {
        server_no_context_takeover: response.server_no_context_takeover,
        client_no_context_takeover: response.client_no_context_takeover || config.client_no_context_takeover,
        server_max_window_bits: server_bits,
        client_max_window_bits: client_bits,
        level: config.level,
    })
}

/// Why inflating stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InflateError {
    /// The message would be larger than the limit.
    TooBig,
    /// Not valid DEFLATE.
    Corrupt,
}

/// The compressing half of a connection's permessage-deflate: its zlib state is made at the
/// first message sent and kept with context takeover (the window carries over); without it the
/// state is freed after each message, so a connection holds zlib's few hundred kilobytes only
/// while it compresses, not while idle (a message then pays zlib's set-up).
#[derive(Debug)]
pub struct Compressor {
    bits: u8,
    reset: bool,
    level: u32,
    state: Option<Box<Compress>>,
}

/// The inflating half: its zlib state is made at the first compressed message received, kept
/// with context takeover, freed after each message without it (as the compressor's).
#[derive(Debug)]
pub struct Inflater {
    bits: u8,
    reset: bool,
    state: Option<Box<Decompress>>,
    /// The message being inflated ended its DEFLATE stream (a block with BFINAL set).
    stream_ended: bool,
}

/// Both halves for one side of a connection.
pub fn codec(params: &DeflateParams, role: Role) -> (Compressor, Inflater) {
    let (send_bits, send_reset, recv_bits, recv_reset) = match role {
        Role::Server => (
            params.server_max_window_bits,
            params.server_no_context_takeover,
            params.client_max_window_bits,
            params.client_no_context_takeover,
        ),
        Role::Client => (
            params.client_max_window_bits,
            params.client_no_context_takeover,
            params.server_max_window_bits,
            params.server_no_context_takeover,
        ),
    };
    (
        Compressor { bits: send_bits, reset: send_reset, level: params.level.min(9), state: None },
        Inflater { bits: recv_bits.max(9), reset: recv_reset, state: None, stream_ended: false },
    )
}

impl Compressor {
    /// Appends `payload` compressed (without the final empty block's tail) and returns true,
    /// or returns false and appends nothing when this side sends uncompressed (8 window bits).
    pub fn compress(&mut self, payload: &[u8], out: &mut Vec<u8>) -> bool {
        // An empty message goes uncompressed: zlib refuses a sync flush with nothing new since
        // the last one (a "duplicate flush"), and writing nothing with RSV1 set would leave the
        // peer's inflater reading the tail it appends as a block.
        if self.bits < 9 || payload.is_empty() {
            return false;
        }
        let (level, bits) = (self.level, self.bits);
        let compress = self
            .state
            .get_or_insert_with(|| Box::new(Compress::new_with_window_bits(Compression::new(level), false, bits)));
        let start = out.len();
        let mut input = payload;
        loop {
            if out.capacity() - out.len() < 64 {
                out.reserve(input.len() / 2 + 64);
            }
            let before = compress.total_in();
            if compress.compress_vec(input, out, FlushCompress::Sync).is_err() {
                // zlib reports errors only for misuse (a stream in a bad state): start afresh
                // and send this message uncompressed.
                compress.reset();
                out.truncate(start);
                return false;
            }
            input = &input[(compress.total_in() - before) as usize..];
            if input.is_empty() && out.len() < out.capacity() {
                break;
            }
        }
        if out.len() >= start + TAIL.len() && out[out.len() - TAIL.len()..] == TAIL {
            out.truncate(out.len() - TAIL.len());
        }
        if self.reset {
            self.state = None;
        }
        true
    }
}

impl Inflater {
    /// Inflates `input` (part of a compressed message) onto `message`, which grows to at most
    /// `limit + 1` octets: one more than the limit shows the message is too big, so a deflate
    /// bomb costs at most the limit's memory.
    pub fn inflate(&mut self, input: &[u8], message: &mut Vec<u8>, limit: usize) -> Result<(), InflateError> {
        if self.stream_ended {
            return if input.is_empty() { Ok(()) } else { Err(InflateError::Corrupt) };
        }
        let bits = self.bits;
        let decompress = self.state.get_or_insert_with(|| Box::new(Decompress::new_with_window_bits(false, bits)));
        let mut input = input;
        loop {
            if message.len() == message.capacity() {
                if message.len() > limit {
                    return Err(InflateError::TooBig);
                }
                let wanted = (message.capacity() * 2).max(message.len() + input.len().max(64) * 2).min(limit + 1);
                message.reserve_exact(wanted - message.len());
            }
            let (before_in, before_out) = (decompress.total_in(), message.len());
            let status =
                decompress.decompress_vec(input, message, FlushDecompress::None).map_err(|_| InflateError::Corrupt)?;
            input = &input[(decompress.total_in() - before_in) as usize..];
            if message.len() > limit {
                return Err(InflateError::TooBig);
            }
            let room_left = message.len() < message.capacity();
            if status == Status::StreamEnd {
                // A block with BFINAL set ends the DEFLATE stream; nothing may follow in this
                // message (but the tail the receiver appends). The next message starts a new one.
                decompress.reset(false);
                self.stream_ended = true;
                return if input.is_empty() { Ok(()) } else { Err(InflateError::Corrupt) };
            }
            if input.is_empty() && room_left {
                return Ok(());
            }
            if room_left && message.len() == before_out && decompress.total_in() == before_in {
                // No progress with room to write: the input cannot be inflated.
                return Err(InflateError::Corrupt);
            }
        }
    }

    /// Ends a compressed message: appends the tail the sender stripped.
    pub fn finish_message(&mut self, message: &mut Vec<u8>, limit: usize) -> Result<(), InflateError> {
        if self.stream_ended {
            self.stream_ended = false;
            return Ok(());
        }
        self.inflate(&TAIL, message, limit)?;
        if self.reset {
            self.state = None;
        }
        Ok(())
    }

    /// A message was abandoned part way (the connection is failing): nothing to keep.
    pub fn forget_message(&mut self) {
        self.state = None;
        self.stream_ended = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(level: u32) -> DeflateParams {
        DeflateParams {
            server_no_context_takeover: false,
            client_no_context_takeover: false,
            server_max_window_bits: 15,
            client_max_window_bits: 15,
            level,
        }
    }

    #[test]
    fn rfc_7692_hello_compresses_and_inflates_as_the_example() {
        // RFC 7692 §7.2.3.1: "Hello" in one compressed frame.
        let example = [0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00];
        let mut server = codec(&params(6), Role::Server).0;
        let mut out = Vec::new();
        assert!(server.compress(b"Hello", &mut out));
        assert_eq!(out, example);
        let mut client = codec(&params(6), Role::Client).1;
        let mut message = Vec::new();
        client.inflate(&example, &mut message, 100).unwrap();
        client.finish_message(&mut message, 100).unwrap();
        assert_eq!(message, b"Hello");
    }

    #[test]
    fn context_takeover_shortens_a_repeated_message_and_no_takeover_does_not() {
        for reset in [false, true] {
            let mut p = params(6);
            p.server_no_context_takeover = reset;
            let mut server = codec(&p, Role::Server).0;
            let mut client = codec(&p, Role::Client).1;
            let mut sizes = Vec::new();
            for _ in 0..2 {
                let mut out = Vec::new();
                assert!(server.compress(b"Hello", &mut out));
                sizes.push(out.len());
                let mut message = Vec::new();
                client.inflate(&out, &mut message, 100).unwrap();
                client.finish_message(&mut message, 100).unwrap();
                assert_eq!(message, b"Hello");
            }
            // RFC 7692 §7.2.3.2: the second "Hello" with the window kept is 5 octets.
            if reset {
                assert_eq!(sizes, [7, 7]);
            } else {
                assert_eq!(sizes, [7, 5]);
            }
        }
    }

    #[test]
    fn a_deflate_bomb_stops_at_the_limit_allocating_at_most_one_more() {
        let zeros = vec![0u8; 8 << 20];
        let mut bomb = Vec::new();
        assert!(codec(&params(9), Role::Client).0.compress(&zeros, &mut bomb));
        assert!(bomb.len() < 16 << 10, "8 MiB of zeros compress to {} octets", bomb.len());
        let limit = 1 << 20;
        let mut server = codec(&params(1), Role::Server).1;
        let mut message = Vec::new();
        let mut result = Ok(());
        for chunk in bomb.chunks(100) {
            result = server.inflate(chunk, &mut message, limit);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(InflateError::TooBig));
        assert!(message.capacity() <= limit + 1, "capacity {}", message.capacity());
    }

    #[test]
    fn a_message_exactly_at_the_limit_is_accepted() {
        let data = vec![7u8; 4096];
        let mut compressed = Vec::new();
        assert!(codec(&params(6), Role::Client).0.compress(&data, &mut compressed));
        let mut server = codec(&params(6), Role::Server).1;
        let mut message = Vec::new();
        server.inflate(&compressed, &mut message, 4096).unwrap();
        server.finish_message(&mut message, 4096).unwrap();
        assert_eq!(message, data);
    }

    #[test]
    fn empty_messages_go_uncompressed_and_the_next_still_inflates() {
        let (mut server, _) = codec(&params(1), Role::Server);
        let (_, mut client) = codec(&params(1), Role::Client);
        for payload in [&b""[..], b"", b"after", b"", b"after"] {
            let mut out = Vec::new();
            if server.compress(payload, &mut out) {
                let mut message = Vec::new();
                client.inflate(&out, &mut message, 100).unwrap();
                client.finish_message(&mut message, 100).unwrap();
                assert_eq!(message, payload);
            } else {
                assert!(payload.is_empty() && out.is_empty());
            }
        }
    }

    #[test]
    fn garbage_is_corrupt() {
        let mut server = codec(&params(1), Role::Server).1;
        let mut message = Vec::new();
        assert_eq!(server.inflate(&[0xff; 32], &mut message, 1000), Err(InflateError::Corrupt));
    }

    #[test]
    fn offers_are_parsed_strictly() {
        assert_eq!(parse_params(""), Some(Offer::default()));
        let offer = parse_params("; server_no_context_takeover; client_max_window_bits").unwrap();
        assert!(offer.server_no_context_takeover);
        assert_eq!(offer.client_max_window_bits, Some(None));
        assert_eq!(parse_params("; server_max_window_bits=\"10\"").unwrap().server_max_window_bits, Some(10));
        for bad in [
            "; server_max_window_bits",
            "; server_max_window_bits=7",
            "; server_max_window_bits=16",
            "; server_max_window_bits=010",
            "; client_max_window_bits=x",
            "; server_no_context_takeover=1",
            "; server_no_context_takeover; server_no_context_takeover",
            "; unknown",
        ] {
            assert_eq!(parse_params(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_server_declines_invalid_offers_and_accepts_the_first_valid_one() {
        let config = DeflateConfig::default();
        let (params, value) = negotiate(
            [
                "permessage-deflate; server_max_window_bits=99, x-other",
                "permessage-deflate; client_max_window_bits=10; server_no_context_takeover, permessage-deflate",
            ],
            &config,
        )
        .unwrap();
        assert_eq!(value, "permessage-deflate; server_no_context_takeover; client_max_window_bits=10");
        assert_eq!((params.client_max_window_bits, params.server_max_window_bits), (10, 15));
        assert!(params.server_no_context_takeover);
        assert_eq!(negotiate(["x-webkit-deflate-frame", "permessage-deflate; bogus"], &config), None);
        let (params, value) = negotiate(["permessage-deflate; server_max_window_bits=15"], &config).unwrap();
        assert_eq!(params.server_max_window_bits, 15);
        assert_eq!(value, "permessage-deflate; server_max_window_bits=15");
        let (_, value) = negotiate(["permessage-deflate"], &config).unwrap();
        assert_eq!(value, "permessage-deflate", "client_max_window_bits only when offered");
    }

    #[test]
    fn the_client_checks_the_response_against_its_offer() {
        let config = DeflateConfig { server_max_window_bits: 10, ..DeflateConfig::default() };
        assert_eq!(offer_value(&config), "permessage-deflate; server_max_window_bits=10; client_max_window_bits");
        assert!(accept_response("; server_max_window_bits=10", &config).is_some());
        assert!(accept_response("; server_max_window_bits=9; client_max_window_bits=12", &config).is_some());
        assert_eq!(accept_response("", &config), None, "server_max_window_bits offered must be answered");
        assert_eq!(accept_response("; server_max_window_bits=11", &config), None);
        assert_eq!(accept_response("; server_max_window_bits=10; client_max_window_bits", &config), None);
        let plain = DeflateConfig::default();
        assert_eq!(accept_response("; client_max_window_bits=9", &plain).unwrap().client_max_window_bits, 9);
        let wants_reset = DeflateConfig { server_no_context_takeover: true, ..plain };
        assert_eq!(accept_response("", &wants_reset), None);
    }

    /// `serve --ws-deflate-takeover off --ws-deflate-window 10`: the answer asks no context
    /// takeover of both sides (RFC 7692 §7.1.1: a server may add either unasked), the client's
    /// window only where it offered one; the server's own window is its choice, unsaid.
    #[test]
    fn a_lean_server_answers_no_context_takeover_and_keeps_its_window() {
        let config = DeflateConfig {
            server_no_context_takeover: true,
            client_no_context_takeover: true,
            server_max_window_bits: 10,
            client_max_window_bits: 10,
            ..DeflateConfig::default()
        };
        let (params, value) = negotiate(["permessage-deflate; client_max_window_bits"], &config).unwrap();
        assert_eq!(
            value,
            "permessage-deflate; server_no_context_takeover; client_no_context_takeover; client_max_window_bits=10"
        );
        assert_eq!((params.server_max_window_bits, params.client_max_window_bits), (10, 10));
        let (params, value) = negotiate(["permessage-deflate"], &config).unwrap();
        assert_eq!(value, "permessage-deflate; server_no_context_takeover; client_no_context_takeover");
        assert_eq!((params.server_max_window_bits, params.client_max_window_bits), (10, 15));
        let answer =
            accept_response("; server_no_context_takeover; client_no_context_takeover", &DeflateConfig::default());
        let agreed = answer.expect("the client side takes both unasked");
        assert!(agreed.server_no_context_takeover && agreed.client_no_context_takeover);
    }

    #[test]
    fn eight_window_bits_are_agreed_and_sent_uncompressed() {
        let (params, value) =
            negotiate(["permessage-deflate; server_max_window_bits=8"], &DeflateConfig::default()).unwrap();
        assert_eq!(value, "permessage-deflate; server_max_window_bits=8");
        let mut server = codec(&params, Role::Server).0;
        let mut out = Vec::new();
        assert!(!server.compress(b"Hello", &mut out));
        assert!(out.is_empty());
    }
}
