//! A lean HTTP/1.1 GET for probes: the request is rendered to bytes once per probe, and a
//! run writes it, reads the response head and, only when `body_contains` asks for it, up
//! to `BODY_LIMIT` bytes of the body.
//!
//! A general HTTP client does far more per request than a probe needs (header maps, URL
//! handling, a connection pool, a spawned connection task, vectored writes and a shutdown
//! per connection). Measured against hyper's HTTP/1 client connection at 1,000 probes/s
//! (`bench/RESULTS.md`), hyper took about 20% more prober CPU and 18 MiB more memory, and
//! cannot cap interim responses; so this reader stays, with explicit limits on the head, the
//! interim responses and the body, and a buffer that never keeps consumed bytes. Every probe
//! opens a fresh connection and asks the server to close it, so nothing here deals with
//! keep-alive or pipelining.

use std::io;

use ::http::header::{self, HeaderName, HeaderValue};
use tokio::io::{AsyncRead, AsyncReadExt};

/// The largest response head accepted (status line and headers).
pub const MAX_HEAD: usize = 16 * 1024;
/// The most interim (1xx) responses skipped before the final one.
pub const MAX_INTERIM: usize = 8;
/// The most response headers accepted.
const MAX_HEADERS: usize = 100;
/// The longest chunk-size line accepted in a chunked body.
pub const MAX_CHUNK_LINE: usize = 1024;

/// Why a response could not be read. The texts follow hyper's, which operators saw before;
/// the limits' own texts name the limit.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("connection closed before message completed")]
    Incomplete,
    #[error("response head larger than {MAX_HEAD} bytes")]
    TooLarge,
    #[error("more than {MAX_HEADERS} response headers")]
    TooManyHeaders,
    #[error("more than {MAX_INTERIM} interim responses")]
    TooManyInterim,
    #[error("invalid HTTP {0} parsed")]
    Parse(&'static str),
    #[error("invalid content-length parsed")]
    ContentLength,
    #[error("invalid chunk size line")]
    ChunkSize,
    #[error("end of file before message length reached")]
    BodyEof,
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Renders the GET request once. `host` is the default Host header; a monitor header of
/// the same name (any case) replaces a default, as header names are case-insensitive.
pub fn request(path: &str, host: &str, headers: &[(String, String)]) -> Result<Vec<u8>, String> {
    let mut all: Vec<(HeaderName, &str)> = vec![
        (header::HOST, host),
        (header::USER_AGENT, concat!("steerdns-probe/", env!("CARGO_PKG_VERSION"))),
        (header::ACCEPT, "*/*"),
        // Each probe uses a fresh connection: the server may close it right after answering.
        (header::CONNECTION, "close"),
    ];
    for (k, v) in headers {
        let name = HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| format!("invalid header name {k:?}"))?;
        // `HeaderValue` also takes bytes above 0x7f (obs-text), which would go out as raw
        // UTF-8 that servers may reject or read differently. Probes send ASCII only: such a
        // value is a setup error naming the header, not a request the server may misread.
        if !v.is_ascii() || HeaderValue::from_str(v).is_err() {
            return Err(format!("invalid value of header {k}: {v:?}"));
        }
        all.retain(|(n, _)| *n != name);
        all.push((name, v));
    }
    let mut out = format!("GET {} HTTP/1.1\r\n", encode_path(path)).into_bytes();
    for (k, v) in all {
        out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    Ok(out)
}

/// The request target: the path with the bytes a URL may not hold raw percent-encoded
/// (what URL parsing did before), so a space in a configured path cannot break the line.
fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b <= 0x20 || b >= 0x7f || b"\"<>`{}".contains(&b) {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(char::from(b));
        }
    }
    out
}

/// How the body of a response is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    Empty,
    Length(u64),
    Chunked,
    Close,
}

/// A response read up to the end of its head; the body is read on demand.
pub struct Response<'a, S> {
    pub status: u16,
    framing: Framing,
    conn: Conn<'a, S>,
}

/// A connection with the bytes read from it but not consumed yet.
struct Conn<'a, S> {
    s: &'a mut S,
    buf: Vec<u8>,
    pos: usize,
}

impl<S: AsyncRead + Unpin> Conn<'_, S> {
    /// Reads more bytes into the buffer; false at end of stream. Consumed bytes are dropped
    /// first, so the buffer holds only what is pending (at most a head, a chunk line or a
    /// read's worth), whatever the server sends in total.
    async fn fill(&mut self) -> io::Result<bool> {
        self.buf.drain(..self.pos);
        self.pos = 0;
        self.buf.reserve(2048);
        Ok(self.s.read_buf(&mut self.buf).await? > 0)
    }

    fn pending(&self) -> &[u8] {
        &self.buf[self.pos..]
    }
}

/// Reads the response head, skipping interim (1xx) responses.
pub async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> Result<Response<'_, S>, HttpError> {
    let mut conn = Conn { s, buf: Vec::with_capacity(2048), pos: 0 };
    let mut interim = 0;
    loop {
        // Pending bytes looked at already (parsed, or found to hold no LF), and whether the
        // stream has ended.
        let (mut looked, mut ended) = (0, false);
        let (len, status, framing) = loop {
            let pending = conn.pending();
            // A head ends with an LF: bytes without one cannot complete it, and an error in
            // them is found just as well at the next LF, at the end or at the limit. Parsing
            // once per line rather than once per read keeps a server that sends its head a
            // few bytes at a time from costing a parse of the whole head per read.
            let over = pending.len() > MAX_HEAD;
            if ended || over || pending[looked..].contains(&b'\n') {
                if let Some(head) = parse_head(pending)? {
                    break head;
                }
                if over {
                    return Err(HttpError::TooLarge);
                }
                if ended {
                    return Err(HttpError::Incomplete);
                }
            }
            looked = pending.len();
            ended = !conn.fill().await?;
        };
        conn.pos += len;
        // 101 is final (a protocol switch); other 1xx are followed by the real response.
        if !(100..200).contains(&status) || status == 101 {
            return Ok(Response { status, framing, conn });
        }
        interim += 1;
        if interim > MAX_INTERIM {
            return Err(HttpError::TooManyInterim);
        }
    }
}

/// Reads a whole response as a check with `body_contains` does: the head, then the first
/// `body_limit` bytes of the body. The status and those bytes.
pub async fn read_response<S: AsyncRead + Unpin>(
    s: &mut S,
    body_limit: usize,
) -> Result<(u16, Vec<u8>), HttpError> {
    let resp = read_head(s).await?;
    let status = resp.status;
    Ok((status, resp.body(body_limit).await?))
}

/// Parses a complete head at the start of `data`: its length, status and body framing.
/// Only the first `MAX_HEAD` bytes are looked at, however many have arrived, so the outcome
/// does not depend on how the response was cut into reads: a head that does not end within
/// them is too large, whatever follows (a 101st header, say).
fn parse_head(data: &[u8]) -> Result<Option<(usize, u16, Framing)>, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(&data[..data.len().min(MAX_HEAD)]) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(HttpError::TooManyHeaders),
        Err(e) => return Err(HttpError::Parse(parse_error_part(e))),
    };
    let status = resp.code.unwrap_or_default();
    let framing = framing(status, resp.headers)?;
    Ok(Some((len, status, framing)))
}

fn parse_error_part(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::Version => "version",
        httparse::Error::Status => "status-code",
        _ => "header",
    }
}

/// RFC 9112 §6.3: chunked wins over Content-Length; another transfer coding, or neither
/// header, reads to the end of the connection.
fn framing(status: u16, headers: &[httparse::Header<'_>]) -> Result<Framing, HttpError> {
    if status == 204 || status == 304 || (100..200).contains(&status) {
        return Ok(Framing::Empty);
    }
    let mut length = None;
    for h in headers {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            let last = h.value.rsplit(|b| *b == b',').next().unwrap_or_default();
            let chunked = last.trim_ascii().eq_ignore_ascii_case(b"chunked");
            return Ok(if chunked { Framing::Chunked } else { Framing::Close });
        }
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = std::str::from_utf8(h.value.trim_ascii()).ok().and_then(|t| t.parse().ok());
            let n: u64 = n.ok_or(HttpError::ContentLength)?;
            if length.is_some_and(|l| l != n) {
                return Err(HttpError::ContentLength);
            }
            length = Some(n);
        }
    }
    Ok(length.map_or(Framing::Close, Framing::Length))
}

impl<S: AsyncRead + Unpin> Response<'_, S> {
    /// The first `limit` bytes of the body (all of it when shorter).
    pub async fn body(mut self, limit: usize) -> Result<Vec<u8>, HttpError> {
        let mut body = Vec::new();
        match self.framing {
            Framing::Empty => {}
            Framing::Length(n) => {
                let want = usize::try_from(n).unwrap_or(usize::MAX).min(limit);
                self.take(&mut body, want, true).await?;
            }
            Framing::Close => self.take(&mut body, limit, false).await?,
            Framing::Chunked => self.chunked(&mut body, limit).await?,
        }
        Ok(body)
    }

    /// Appends up to `n` more bytes to `body`; a stream ending first is an error only when
    /// the bytes were promised (`exact`).
    async fn take(&mut self, body: &mut Vec<u8>, n: usize, exact: bool) -> Result<(), HttpError> {
        let end = body.len().saturating_add(n);
        while body.len() < end {
            if self.conn.pending().is_empty() && !self.conn.fill().await? {
                return if exact { Err(HttpError::BodyEof) } else { Ok(()) };
            }
            let data = self.conn.pending();
            let k = data.len().min(end - body.len());
            body.extend_from_slice(&data[..k]);
            self.conn.pos += k;
        }
        Ok(())
    }

    /// Decodes chunks until the last one or until `limit` bytes are in `body`.
    async fn chunked(&mut self, body: &mut Vec<u8>, limit: usize) -> Result<(), HttpError> {
        loop {
            let size = self.chunk_size().await?;
            if size == 0 {
                return Ok(());
            }
            let room = limit - body.len();
            let take = usize::try_from(size).unwrap_or(usize::MAX).min(room);
            self.take(body, take, true).await?;
            if body.len() >= limit {
                return Ok(());
            }
            // The chunk's own CRLF, which a chunk-size line must start after.
            self.line().await?;
        }
    }

    /// Reads one chunk-size line and parses its hex size (extensions are ignored).
    async fn chunk_size(&mut self) -> Result<u64, HttpError> {
        let line = self.line().await?;
        let hex = line.split(|b| *b == b';').next().unwrap_or_default().trim_ascii();
        let text = std::str::from_utf8(hex).map_err(|_| HttpError::ChunkSize)?;
        u64::from_str_radix(text, 16).map_err(|_| HttpError::ChunkSize)
    }

    /// The next line (without CRLF), consumed. A line is at most `MAX_CHUNK_LINE` bytes
    /// before its LF wherever the reads that brought it ended.
    async fn line(&mut self) -> Result<Vec<u8>, HttpError> {
        // Pending bytes already searched: each read's bytes are searched once.
        let mut searched = 0;
        loop {
            let data = self.conn.pending();
            let window = &data[..data.len().min(MAX_CHUNK_LINE + 1)];
            if let Some(i) = window[searched..].iter().position(|b| *b == b'\n') {
                let i = searched + i;
                let line = data[..i].strip_suffix(b"\r").unwrap_or(&data[..i]).to_vec();
                self.conn.pos += i + 1;
                return Ok(line);
            }
            if data.len() > MAX_CHUNK_LINE {
                return Err(HttpError::ChunkSize);
            }
            searched = window.len();
            if !self.conn.fill().await? {
                return Err(HttpError::BodyEof);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `response` (as one stream) and returns the status and the body up to `limit`.
    async fn read(response: &[u8], limit: usize) -> Result<(u16, Vec<u8>), HttpError> {
        read_response(&mut &response[..], limit).await
    }

    /// A stream that hands out `data` a few bytes a read, as a slow server's segments.
    struct Trickle<'a>(&'a [u8]);

    impl AsyncRead for Trickle<'_> {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            let n = self.0.len().min(buf.remaining()).min(3);
            buf.put_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// `n` interim responses, then `last`.
    fn interim(n: usize, last: &str) -> String {
        "HTTP/1.1 100 Continue\r\n\r\n".repeat(n) + last
    }

    /// A complete 200 head of exactly `len` bytes, without a body.
    fn head_of(len: usize) -> String {
        let start = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX: ";
        let pad = len - start.len() - "\r\n\r\n".len();
        format!("{start}{}\r\n\r\n", "a".repeat(pad))
    }

    #[tokio::test]
    async fn responses_table() {
        let chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        /// The status and body read, or the error text.
        type Want = Result<(u16, &'static str), &'static str>;
        // (response, body limit, expected)
        let cases: &[(&str, usize, Want)] = &[
            ("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK", 10, Ok((200, "OK"))),
            ("HTTP/1.1 503 X\r\nContent-Length: 5\r\n\r\ndown!", 3, Ok((503, "dow"))),
            ("HTTP/1.0 200 OK\r\n\r\nto the end", 100, Ok((200, "to the end"))),
            ("HTTP/1.1 204 No Content\r\n\r\n", 100, Ok((204, ""))),
            (
                "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nx",
                100,
                Ok((200, "x")),
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nall\r\n4\r\n OK!\r\n0\r\n\r\n",
                100,
                Ok((200, "all OK!")),
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n5\r\nfgh",
                7,
                Ok((200, "abcdefg")),
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort",
                100,
                Err("end of file before message length reached"),
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Le",
                100,
                Err("connection closed before message completed"),
            ),
            ("", 100, Err("connection closed before message completed")),
            ("SSH-2.0-OpenSSH_9.6\r\n\r\n", 100, Err("invalid HTTP version parsed")),
            ("HTTP/1.1 2x0 OK\r\n\r\n", 100, Err("invalid HTTP status-code parsed")),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
                100,
                Err("invalid content-length parsed"),
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                100,
                Err("invalid chunk size line"),
            ),
            (&interim(8, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"), 100, Ok((200, "x"))),
            (
                &interim(9, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"),
                100,
                Err("more than 8 interim responses"),
            ),
            // A whole oversized head, and one that never ends.
            (&head_of(MAX_HEAD + 1), 100, Err("response head larger than 16384 bytes")),
            (&head_of(MAX_HEAD), 100, Ok((200, ""))),
            (
                &format!("HTTP/1.1 200 OK\r\nX: {}", "a".repeat(MAX_HEAD)),
                100,
                Err("response head larger than 16384 bytes"),
            ),
            (
                &format!("HTTP/1.1 200 OK\r\n{}\r\n", "a: b\r\n".repeat(101)),
                100,
                Err("more than 100 response headers"),
            ),
            // Past the head limit nothing counts, not even a 101st header.
            (
                &format!(
                    "HTTP/1.1 200 OK\r\n{}\r\n",
                    format!("h: {}\r\n", "a".repeat(160)).repeat(101)
                ),
                100,
                Err("response head larger than 16384 bytes"),
            ),
            // A chunk-size line of 1024 bytes before its LF, and one of 1025.
            (
                &format!("{chunked}1;{}\r\na\r\n0\r\n\r\n", "x".repeat(MAX_CHUNK_LINE - 3)),
                100,
                Ok((200, "a")),
            ),
            (
                &format!("{chunked}1;{}\r\na\r\n0\r\n\r\n", "x".repeat(MAX_CHUNK_LINE - 2)),
                100,
                Err("invalid chunk size line"),
            ),
        ];
        for (response, limit, want) in cases {
            // Whole, and a few bytes a read: how the response is cut changes nothing.
            let whole = read(response.as_bytes(), *limit).await;
            let trickled = read_response(&mut Trickle(response.as_bytes()), *limit).await;
            for got in [whole, trickled] {
                match (got, want) {
                    (Ok((status, body)), Ok((s, b))) => {
                        assert_eq!((status, body.as_slice()), (*s, b.as_bytes()), "{response:?}")
                    }
                    (Err(e), Err(text)) => assert_eq!(e.to_string(), *text, "{response:?}"),
                    (got, want) => panic!("{response:?}: got {got:?}, want {want:?}"),
                }
            }
        }
    }

    /// A stream that sends `prefix`, then `repeat` forever, counting what it sent.
    struct Endless {
        prefix: &'static [u8],
        repeat: &'static [u8],
        sent: usize,
    }

    impl AsyncRead for Endless {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            while buf.remaining() > 0 {
                let at = self.sent;
                let byte = match at.checked_sub(self.prefix.len()) {
                    None => self.prefix[at],
                    Some(i) => self.repeat[i % self.repeat.len()],
                };
                buf.put_slice(&[byte]);
                self.sent += 1;
            }
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// Whatever a server sends without end, a read stops at a limit: what it read is
    /// bounded by the limit plus one read's worth.
    #[tokio::test]
    async fn endless_responses_stop_at_a_limit() {
        let ok = b"HTTP/1.1 200 OK\r\n\r\n";
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        /// The body length read, or the error text.
        type Want = Result<usize, &'static str>;
        // (prefix, repeated, expected)
        let cases: &[(&[u8], &[u8], Want)] = &[
            (b"", b"HTTP/1.1 100 Continue\r\n\r\n", Err("more than 8 interim responses")),
            (
                b"HTTP/1.1 200 OK\r\n",
                b"X-Long: aaaaaaaa\r\n",
                Err("more than 100 response headers"),
            ),
            (b"HTTP/1.1 200 OK\r\nX: ", b"a", Err("response head larger than 16384 bytes")),
            (ok, b"body", Ok(5120)),
            (chunked, b"4\r\nbody\r\n", Ok(5120)),
            (chunked, b"1", Err("invalid chunk size line")),
        ];
        for (prefix, repeat, want) in cases {
            let mut s = Endless { prefix, repeat, sent: 0 };
            let got = match read_head(&mut s).await {
                Ok(resp) => resp.body(5120).await.map(|b| b.len()),
                Err(e) => Err(e),
            };
            match (got, want) {
                (Ok(n), Ok(w)) => assert_eq!(n, *w, "{repeat:?}"),
                (Err(e), Err(text)) => assert_eq!(e.to_string(), *text, "{repeat:?}"),
                (got, want) => panic!("{repeat:?}: got {got:?}, want {want:?}"),
            }
            assert!(s.sent < MAX_HEAD + 64 * 1024, "{repeat:?}: read {} bytes", s.sent);
        }
    }

    /// Bytes of heads already parsed are not kept: eight 4 KiB interim heads leave a buffer
    /// the size of one head, not of all of them.
    #[tokio::test]
    async fn consumed_heads_leave_the_buffer() {
        let big = format!("HTTP/1.1 100 Continue\r\nX: {}\r\n\r\n", "a".repeat(4096));
        let all = big.repeat(MAX_INTERIM) + "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        let mut s = all.as_bytes();
        let resp = read_head(&mut s).await.unwrap();
        assert_eq!(resp.status, 200);
        assert!(resp.conn.buf.capacity() < 16 * 1024, "buffer of {}", resp.conn.buf.capacity());
    }

    #[test]
    fn request_bytes() {
        let plain = request("/health", "192.0.2.1:8080", &[]).unwrap();
        assert_eq!(
            String::from_utf8(plain).unwrap(),
            concat!(
                "GET /health HTTP/1.1\r\nhost: 192.0.2.1:8080\r\nuser-agent: steerdns-probe/",
                env!("CARGO_PKG_VERSION"),
                "\r\naccept: */*\r\nconnection: close\r\n\r\n"
            )
        );
        let headers =
            vec![("Host".to_string(), "probe.test".to_string()), ("X-A".into(), "1".into())];
        let custom = String::from_utf8(request("/a b", "h", &headers).unwrap()).unwrap();
        assert!(custom.starts_with("GET /a%20b HTTP/1.1\r\n"), "{custom}");
        assert!(custom.contains("host: probe.test\r\n") && !custom.contains("host: h\r\n"));
        assert!(custom.ends_with("x-a: 1\r\n\r\n"), "{custom}");
        let bad = |k: &str, v: &str| request("/", "h", &[(k.to_string(), v.to_string())]);
        assert_eq!(bad("a b", "1").unwrap_err(), "invalid header name \"a b\"");
        assert_eq!(bad("X", "1\r\n2").unwrap_err(), "invalid value of header X: \"1\\r\\n2\"");
        assert_eq!(bad("", "1").unwrap_err(), "invalid header name \"\"");
        assert_eq!(bad("X", "caf\u{e9}").unwrap_err(), "invalid value of header X: \"caf\u{e9}\"");
        // Every RFC 9110 token character is a valid name; tabs and spaces are valid in values.
        let odd = request("/", "h", &[("X-Odd!#$%&'*+.^_`|~".into(), "a\tb c".into())]).unwrap();
        let odd = String::from_utf8(odd).unwrap();
        assert!(odd.contains("\r\nx-odd!#$%&'*+.^_`|~: a\tb c\r\n"), "{odd}");
    }
}
