//! The dnstap writer thread: drains every ring, encodes each record into its messages and
//! writes them as Frame Streams data frames to the file or the socket reader.
//!
//! A socket reader may be absent at start, go away or stop reading: the writer then
//! reconnects with a growing delay, and whatever arrives meanwhile is taken from the rings
//! and counted as lost, so that the rings keep room and the log resumes with current
//! traffic. Writes to a reader have a timeout, so a reader that stops reading costs a
//! reconnection, not a stuck writer.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use socket2::{Domain, SockAddr, Socket, Type};

use super::Shared;
use super::encode::{Encoder, Record};
use super::fstrm::{self, FstrmError};
use super::ring::Receiver;

/// How long the writer sleeps when nobody wakes it: the longest a logged exchange waits.
const TICK: Duration = Duration::from_millis(50);
/// Bytes gathered before a write to the output.
const BUFFER: usize = 256 * 1024;
/// How long a reader may take to answer READY (with ACCEPT) or STOP (with FINISH).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a write to a reader may block before the reader counts as gone.
const WRITE_TIMEOUT: Duration = Duration::from_secs(1);
/// The delay before the first reconnection, doubled after each failure up to the next.
const FIRST_RETRY: Duration = Duration::from_millis(250);
const MAX_RETRY: Duration = Duration::from_secs(5);

/// Where the frames go.
pub(super) enum Output {
    /// A unidirectional stream; `None` once a write failed (reopening would truncate it).
    File {
        path: PathBuf,
        w: Option<BufWriter<File>>,
    },
    Socket(SocketOutput),
}

pub(super) struct SocketOutput {
    path: PathBuf,
    conn: Option<BufWriter<UnixStream>>,
    next_try: Instant,
    retry: Duration,
    /// The reader's absence was logged at warn level; later failures go to debug.
    warned: bool,
}

impl Output {
    /// Creates (or truncates) the file and starts its stream.
    pub(super) fn file(path: &Path) -> std::io::Result<Output> {
        let mut w = BufWriter::with_capacity(BUFFER, File::create(path)?);
        fstrm::open_unidirectional(&mut w)?;
        w.flush()?;
        Ok(Output::File { path: path.to_path_buf(), w: Some(w) })
    }

    /// A socket reader, connected to by the writer.
    pub(super) fn socket(path: &Path) -> Output {
        Output::Socket(SocketOutput {
            path: path.to_path_buf(),
            conn: None,
            next_try: Instant::now(),
            retry: FIRST_RETRY,
            warned: false,
        })
    }

    /// Connects to the socket reader when there is none and the retry delay is over.
    fn connect_if_due(&mut self) {
        let Output::Socket(s) = self else { return };
        if s.conn.is_some() || Instant::now() < s.next_try {
            return;
        }
        match connect(&s.path) {
            Ok(stream) => {
                tracing::info!(path = %s.path.display(), "dnstap reader connected");
                s.conn = Some(BufWriter::with_capacity(BUFFER, stream));
                s.retry = FIRST_RETRY;
                s.warned = false;
            }
            Err(e) => {
                if s.warned {
                    tracing::debug!(path = %s.path.display(), error = %e, "dnstap reader still unreachable");
                } else {
                    tracing::warn!(path = %s.path.display(), error = %e, "dnstap reader unreachable; messages are dropped until it is back");
                    s.warned = true;
                }
                s.next_try = Instant::now() + s.retry;
                s.retry = (s.retry * 2).min(MAX_RETRY);
            }
        }
    }

    fn writer(&mut self) -> Option<&mut dyn Write> {
        match self {
            Output::File { w, .. } => w.as_mut().map(|w| w as &mut dyn Write),
            Output::Socket(s) => s.conn.as_mut().map(|w| w as &mut dyn Write),
        }
    }

    /// Gives up the stream after a failed write.
    fn broken(&mut self, e: &std::io::Error) {
        match self {
            Output::File { path, w } => {
                tracing::error!(path = %path.display(), error = %e, "dnstap file write failed; query logging stops until restart");
                *w = None;
            }
            Output::Socket(s) => {
                tracing::warn!(path = %s.path.display(), error = %e, "dnstap reader gone; reconnecting");
                s.conn = None;
                s.warned = true;
                s.next_try = Instant::now() + s.retry;
            }
        }
    }

    /// Ends the stream: STOP for a file; STOP and the reader's FINISH for a socket.
    fn close(self) {
        match self {
            Output::File { path, w: Some(mut w) } => {
                if let Err(e) = fstrm::close_unidirectional(&mut w) {
                    tracing::warn!(path = %path.display(), error = %e, "dnstap file not closed cleanly");
                }
            }
            Output::Socket(SocketOutput { path, conn: Some(conn), .. }) => {
                let finished = conn
                    .into_inner()
                    .map_err(|e| FstrmError::from(e.into_error()))
                    .and_then(|mut stream| {
                        stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
                        fstrm::close_bidirectional(&mut stream)
                    });
                if let Err(e) = finished {
                    tracing::debug!(path = %path.display(), error = %e, "dnstap reader did not finish cleanly");
                }
            }
            _ => {}
        }
    }
}

/// Connects and runs the handshake, with timeouts so that a silent reader fails it. The
/// connection itself has one too: a reader that stopped accepting leaves its backlog full,
/// and a plain connect would then wait for as long as it does.
fn connect(path: &Path) -> Result<UnixStream, FstrmError> {
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    socket.connect_timeout(&SockAddr::unix(path)?, HANDSHAKE_TIMEOUT)?;
    let mut stream = UnixStream::from(socket);
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    fstrm::open_bidirectional(&mut stream)?;
    Ok(stream)
}

pub(super) struct Writer {
    shared: Arc<Shared>,
    rings: Vec<Receiver>,
    output: Output,
    encoder: Encoder,
    record: Record,
    /// Messages written into the output's buffer since it was last flushed.
    unflushed: u64,
}

impl Writer {
    pub(super) fn new(
        shared: Arc<Shared>,
        output: Output,
        identity: &str,
        version: &str,
    ) -> Writer {
        Writer {
            shared,
            rings: Vec::new(),
            output,
            encoder: Encoder::new(identity, version),
            record: Record::default(),
            unflushed: 0,
        }
    }

    pub(super) fn run(mut self) {
        loop {
            // Read before draining: once it is set, no producer takes a new ring, and a
            // round after every ring was let go of takes everything written to them.
            let stopping = self.shared.stopping();
            if stopping {
                // The TCP rings no connection holds: nothing more comes through them.
                self.shared.tcp_pool.close_free();
            }
            self.adopt_rings();
            self.take_encoder();
            self.output.connect_if_due();
            self.drain();
            self.flush();
            if stopping {
                let by = self.shared.stop_by.get().copied().unwrap_or_else(Instant::now);
                if self.rings.is_empty() || Instant::now() >= by {
                    break;
                }
            }
            std::thread::park_timeout(TICK);
        }
        self.output.close();
    }

    /// Takes a new identity and version a reload set.
    fn take_encoder(&mut self) {
        let next = self.shared.encoder.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((identity, version)) = next {
            self.encoder = Encoder::new(&identity, &version);
        }
    }

    fn adopt_rings(&mut self) {
        let mut new = self.shared.new_rings.lock().unwrap_or_else(|e| e.into_inner());
        self.rings.append(&mut new);
    }

    fn drain(&mut self) {
        let mut lost = 0;
        for ring in &mut self.rings {
            while ring.next(&mut self.record) {
                let r = &self.record;
                let Some(w) = self.output.writer() else {
                    lost += 1 + u64::from(r.response_time.is_some());
                    continue;
                };
                let mut written = fstrm::write_data(w, self.encoder.query(r)).map(|()| 1);
                if r.response_time.is_some() {
                    written = written.and_then(|n| {
                        fstrm::write_data(w, self.encoder.response(r)).map(|()| n + 1)
                    });
                }
                match written {
                    Ok(n) => self.unflushed += n,
                    Err(e) => {
                        lost += self.unflushed + 1 + u64::from(r.response_time.is_some());
                        self.unflushed = 0;
                        self.output.broken(&e);
                    }
                }
            }
        }
        self.rings.retain(|r| !r.finished());
        if lost > 0 {
            self.shared.stats.dropped_disconnected.fetch_add(lost, Ordering::Relaxed);
        }
    }

    fn flush(&mut self) {
        if self.unflushed == 0 {
            return;
        }
        let n = std::mem::take(&mut self.unflushed);
        let Some(w) = self.output.writer() else { return };
        match w.flush() {
            Ok(()) => {
                self.shared.stats.sent.fetch_add(n, Ordering::Relaxed);
            }
            Err(e) => {
                self.shared.stats.dropped_disconnected.fetch_add(n, Ordering::Relaxed);
                self.output.broken(&e);
            }
        }
    }
}
