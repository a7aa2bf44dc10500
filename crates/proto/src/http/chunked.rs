//! Decoding (and discarding) a chunked request body, fed in arbitrary pieces.
//!
//! The size line is accumulated until its line end and then handed to
//! `httparse::parse_chunk_size`. Lines are bounded, so a peer cannot make a session buffer more
//! than [`MAX_LINE`] bytes however it splits its body.

/// A chunk-size line or a trailer line longer than this is a 400.
pub const MAX_LINE: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkError {
    /// Not valid chunked encoding.
    Malformed,
    /// The decoded body passed the configured limit.
    TooLarge,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Reading a chunk-size line.
    Size,
    /// Skipping this many data bytes.
    Data(u64),
    /// Expecting the CRLF after chunk data; the count says how much of it has arrived.
    DataEnd(u8),
    /// Reading trailer lines after the last chunk until an empty line.
    Trailer,
    Done,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkedDecoder {
    state: State,
    line: Vec<u8>,
    decoded: u64,
    trailer_bytes: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder { state: State::Size, line: Vec::new(), decoded: 0, trailer_bytes: 0 }
    }
}

impl ChunkedDecoder {
    /// Consume bytes of `data`; returns how many were consumed and whether the body ended.
    /// Bytes after the end of the body are not consumed: they belong to the next request.
    pub fn feed(&mut self, data: &[u8], max_body: u64, max_trailer: usize) -> Result<(usize, bool), ChunkError> {
        let mut pos = 0;
        while pos < data.len() && self.state != State::Done {
            match self.state {
                State::Data(remaining) => {
                    let take = remaining.min((data.len() - pos) as u64);
                    pos += take as usize;
                    self.state = if take == remaining { State::DataEnd(0) } else { State::Data(remaining - take) };
                }
                State::DataEnd(seen) => {
                    // Checked byte by byte, so garbage after chunk data fails at once instead
                    // of waiting for a line end that may never come.
                    let expected = b"\r\n"[usize::from(seen)];
                    if data[pos] != expected {
                        return Err(ChunkError::Malformed);
                    }
                    pos += 1;
                    self.state = if seen == 1 { State::Size } else { State::DataEnd(1) };
                }
                State::Size | State::Trailer => {
                    let Some(line_len) = self.take_line(&data[pos..])? else {
                        pos = data.len();
                        break;
                    };
                    pos += line_len;
                    self.end_line(max_body, max_trailer)?;
                }
                State::Done => unreachable!("loop condition"),
            }
        }
        Ok((pos, self.state == State::Done))
    }

    /// Append bytes up to and including the next `\n` to the line buffer; returns the count
    /// consumed once the line is complete, or `None` when `data` ran out first.
    fn take_line(&mut self, data: &[u8]) -> Result<Option<usize>, ChunkError> {
        let (chunk, complete) = match memchr::memchr(b'\n', data) {
            Some(i) => (&data[..=i], true),
            None => (data, false),
        };
        if self.line.len() + chunk.len() > MAX_LINE {
            return Err(ChunkError::Malformed);
        }
        self.line.extend_from_slice(chunk);
        Ok(complete.then_some(chunk.len()))
    }

    fn end_line(&mut self, max_body: u64, max_trailer: usize) -> Result<(), ChunkError> {
        let line = std::mem::take(&mut self.line);
        if !line.ends_with(b"\r\n") {
            return Err(ChunkError::Malformed);
        }
        self.state = match self.state {
            // httparse takes an empty size as 0; RFC 9112 says chunk-size is 1*HEXDIG.
            State::Size if !line[0].is_ascii_hexdigit() => return Err(ChunkError::Malformed),
            State::Size => match httparse::parse_chunk_size(&line) {
                Ok(httparse::Status::Complete((_, 0))) => State::Trailer,
                Ok(httparse::Status::Complete((_, size))) => {
                    self.decoded = self.decoded.checked_add(size).ok_or(ChunkError::TooLarge)?;
                    if self.decoded > max_body {
                        return Err(ChunkError::TooLarge);
                    }
                    State::Data(size)
                }
                _ => return Err(ChunkError::Malformed),
            },
            State::Trailer if line.len() == 2 => State::Done,
            State::Trailer => {
                self.trailer_bytes += line.len();
                if self.trailer_bytes > max_trailer || line[0] == b' ' || line[0] == b'\t' {
                    return Err(ChunkError::Malformed);
                }
                State::Trailer
            }
            State::Data(_) | State::DataEnd(_) | State::Done => {
                unreachable!("lines end only in line states")
            }
        };
        // Give back the line's memory between lines so an idle decoder owns nothing.
        if line.capacity() <= 64 {
            self.line = line;
            self.line.clear();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(body: &[u8]) -> Result<(usize, bool), ChunkError> {
        ChunkedDecoder::default().feed(body, u64::MAX, 8192)
    }

    #[test]
    fn decodes_and_stops_at_body_end() {
        let body = b"5\r\nhello\r\nA;ext=1\r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\nGET";
        assert_eq!(decode_all(body), Ok((body.len() - 3, true)));
    }

    #[test]
    fn same_result_byte_by_byte() {
        let body = b"5\r\nhello\r\n0\r\n\r\n";
        let mut d = ChunkedDecoder::default();
        for (i, b) in body.iter().enumerate() {
            let (n, done) = d.feed(std::slice::from_ref(b), u64::MAX, 8192).unwrap();
            assert_eq!(n, 1);
            assert_eq!(done, i == body.len() - 1);
        }
    }

    #[test]
    fn rejects_bad_sizes_and_framing() {
        for bad in [
            &b"-1\r\n"[..],
            b"zz\r\n",
            b"\r\n",
            b"5\nhello\r\n",
            b"5\r\nhelloXY",
            b"fffffffffffffffff\r\n",
            b"0\r\n folded\r\n\r\n",
        ] {
            assert_eq!(decode_all(bad), Err(ChunkError::Malformed), "{:?}", String::from_utf8_lossy(bad));
        }
        let long = vec![b'1'; MAX_LINE + 1];
        assert_eq!(decode_all(&long), Err(ChunkError::Malformed));
    }

    #[test]
    fn enforces_body_limit() {
        let mut d = ChunkedDecoder::default();
        assert_eq!(d.feed(b"10\r\n", 15, 8192), Err(ChunkError::TooLarge));
    }
}
