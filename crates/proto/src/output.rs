//! The answer of a protocol to one read: a list of segments to write, in order.

use std::ops::Range;

use bytes::Bytes;

/// One piece of output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// A range of the input just fed to the protocol (echo), so the bytes need not be copied
    /// unless the socket refuses part of them.
    Input(Range<usize>),
    /// Bytes owned elsewhere and shared by reference count, such as a pre-rendered response.
    Shared(Bytes),
    /// A range of the response body the server sends from its body file
    /// ([`crate::http::ResponseBody::File`]): the bytes never pass through this crate.
    File(Range<u64>),
}

/// The segments produced by one call. A server keeps one and clears it between calls, so
/// producing output allocates nothing in the steady state.
#[derive(Debug, Default)]
pub struct Output {
    segments: Vec<Segment>,
    len: usize,
    /// A segment is a file range: asked on every send, so kept rather than searched for.
    has_file: bool,
}

impl Output {
    pub fn push_input(&mut self, range: Range<usize>) {
        if range.is_empty() {
            return;
        }
        self.len += range.len();
        if let Some(Segment::Input(last)) = self.segments.last_mut() {
            if last.end == range.start {
                last.end = range.end;
                return;
            }
        }
        self.segments.push(Segment::Input(range));
    }

    pub fn push_shared(&mut self, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        self.len += bytes.len();
        self.segments.push(Segment::Shared(bytes));
    }

    pub fn push_file(&mut self, range: Range<u64>) {
        if range.is_empty() {
            return;
        }
        self.len = self.len.saturating_add(usize::try_from(range.end - range.start).unwrap_or(usize::MAX));
        self.segments.push(Segment::File(range));
        self.has_file = true;
    }

    /// Whether any segment is a file range (which [`Output::slice`] cannot give as bytes).
    pub fn has_file(&self) -> bool {
        self.has_file
    }

    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Total bytes queued.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn clear(&mut self) {
        self.segments.clear();
        self.len = 0;
        self.has_file = false;
    }

    /// The segment's bytes, resolving input ranges against `input`; empty for a file range,
    /// whose bytes are the server's to send.
    pub fn slice<'a>(segment: &'a Segment, input: &'a [u8]) -> &'a [u8] {
        match segment {
            Segment::Input(range) => &input[range.clone()],
            Segment::Shared(bytes) => bytes,
            Segment::File(_) => &[],
        }
    }

    /// All output flattened into one vector, a file range as `<file a..b>`; for tests and
    /// slow paths.
    pub fn to_vec(&self, input: &[u8]) -> Vec<u8> {
        let mut all = Vec::with_capacity(self.len.min(1 << 20));
        for segment in &self.segments {
            match segment {
                Segment::File(range) => {
                    all.extend_from_slice(format!("<file {}..{}>", range.start, range.end).as_bytes())
                }
                other => all.extend_from_slice(Self::slice(other, input)),
            }
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjacent_input_ranges_merge_and_empty_pushes_vanish() {
        let mut out = Output::default();
        out.push_input(0..3);
        out.push_input(3..5);
        out.push_input(5..5);
        out.push_shared(Bytes::new());
        out.push_shared(Bytes::from_static(b"!"));
        out.push_input(7..8);
        assert_eq!(out.segments().len(), 3);
        assert_eq!(out.len(), 7);
        assert_eq!(out.to_vec(b"abcdefgh"), b"abcde!h");
    }
}
