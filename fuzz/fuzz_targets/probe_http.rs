//! Arbitrary bytes as the response a health probe reads (`steerdns::probe::http_reader`,
//! the reader of `src/probe/http.rs`), fed from memory in reads of a size the input picks.
//! The first byte picks the read size, the second the body limit and whether the stream
//! ends after the rest of the input or repeats it forever; the rest is the stream.
//!
//! Checks, for every input: the reader finishes without waiting (the stream never makes it
//! wait) and without panicking; a body is at most the limit; a final status is not an
//! interim one; the bytes it takes from the stream stay within what its limits allow (at
//! most `MAX_INTERIM` + 1 heads of `MAX_HEAD` bytes, the body limit, chunk-size lines of
//! `MAX_CHUNK_LINE` bytes and one buffer's worth read ahead), however long the stream is;
//! and the result does not depend on how the stream is cut into reads.
#![no_main]

use std::future::Future;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker};

use libfuzzer_sys::fuzz_target;
use steerdns::probe::http_reader::{MAX_CHUNK_LINE, MAX_HEAD, MAX_INTERIM, read_response};
use tokio::io::{AsyncRead, ReadBuf};

/// Body limits to read with: the probe's own (5120 bytes) first.
const BODY_LIMITS: [usize; 8] = [5120, 0, 1, 2, 16, 1000, 8192, 65536];
/// What the reader may read past what it consumes: the bytes left in its buffer, which
/// holds at most a head plus one read.
const READ_AHEAD: usize = 64 * 1024;

/// The stream: `data`, once or repeated without end, handed out at most `max_read` bytes
/// a read. Counts what it handed out.
struct Stream<'a> {
    data: &'a [u8],
    endless: bool,
    max_read: usize,
    sent: usize,
}

impl AsyncRead for Stream<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let left = if self.endless { usize::MAX } else { self.data.len() - self.sent };
        let mut n = left.min(self.max_read).min(buf.remaining());
        while n > 0 {
            let at = self.sent % self.data.len();
            let piece = &self.data[at..self.data.len().min(at + n)];
            buf.put_slice(piece);
            self.sent += piece.len();
            n -= piece.len();
        }
        Poll::Ready(Ok(()))
    }
}

/// Runs a future that must finish at its first poll: its stream never waits.
fn now<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the reader waits on a stream that is always ready"),
    }
}

/// The result as text (error texts included), and the bytes read from the stream.
fn read(
    data: &[u8],
    endless: bool,
    max_read: usize,
    limit: usize,
) -> (Result<(u16, Vec<u8>), String>, usize) {
    let mut s = Stream { data, endless, max_read, sent: 0 };
    let got = now(read_response(&mut s, limit)).map_err(|e| e.to_string());
    (got, s.sent)
}

fuzz_target!(|input: &[u8]| {
    let [size, flags, data @ ..] = input else { return };
    let max_read = (1usize << (size % 17)) + usize::from(size / 17);
    let endless = flags & 1 == 1 && !data.is_empty();
    let limit = BODY_LIMITS[usize::from(flags >> 1) % BODY_LIMITS.len()];

    let (got, sent) = read(data, endless, max_read, limit);
    if let Ok((status, body)) = &got {
        assert!(body.len() <= limit, "a body of {} bytes for a limit of {limit}", body.len());
        assert!(!(100..200).contains(status) || *status == 101, "interim status {status} ends it");
    }
    // Every head but the last is an interim one; a chunked body has at most one chunk-size
    // line per body byte plus the last, each followed by its chunk's line end.
    let heads = (MAX_INTERIM + 1) * MAX_HEAD;
    let chunk_lines = (2 * limit + 1) * (MAX_CHUNK_LINE + 2);
    let bound = heads + limit + chunk_lines + READ_AHEAD;
    assert!(sent <= bound, "read {sent} bytes; the limits allow {bound} (limit {limit})");

    // The same stream in reads as large as the reader takes gives the same result.
    let (whole, _) = read(data, endless, usize::MAX, limit);
    assert_eq!(got, whole, "reads of at most {max_read} bytes vs. of any size");
});
