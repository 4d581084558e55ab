//! Frame Streams, the framing dnstap travels in: each data frame is a 32-bit big-endian
//! length and the payload; control frames start with a zero length (the escape), then
//! their own length, type and fields.
//!
//! A file is written unidirectionally (START, data frames, STOP). A socket needs the
//! bidirectional handshake first: the writer offers its content type in READY, the reader
//! answers ACCEPT, the writer sends START; at the end the writer sends STOP and the reader
//! answers FINISH. Readers such as `fstrm_capture` close a connection that starts with
//! START, so the unidirectional writer of the `framestream` crate cannot talk to them.

use std::io::{self, Read, Write};

/// The content type of dnstap streams.
pub const CONTENT_TYPE: &[u8] = b"protobuf:dnstap.Dnstap";

const ACCEPT: u32 = 1;
const START: u32 = 2;
const STOP: u32 = 3;
const READY: u32 = 4;
const FINISH: u32 = 5;
const FIELD_CONTENT_TYPE: u32 = 1;

/// The largest control frame read; the library that defines the protocol allows 512 bytes.
const MAX_CONTROL: usize = 512;

#[derive(Debug, thiserror::Error)]
pub enum FstrmError {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error("expected a control frame, got a data frame")]
    NotControl,
    #[error("control frame of {0} bytes is over the limit of {MAX_CONTROL}")]
    TooLong(usize),
    #[error("malformed control frame")]
    Malformed,
    #[error("expected control frame {expected}, got {got}")]
    Unexpected { expected: u32, got: u32 },
    #[error("the reader does not accept content type {}", String::from_utf8_lossy(CONTENT_TYPE))]
    Refused,
}

/// A control frame as read: its type and whether it names our content type (or none).
#[derive(Debug, PartialEq, Eq)]
struct Control {
    kind: u32,
    content_types: usize,
    ours: bool,
}

/// Writes a control frame, with our content type when `with_type`.
fn write_control(w: &mut impl Write, kind: u32, with_type: bool) -> io::Result<()> {
    let fields = if with_type { 8 + CONTENT_TYPE.len() } else { 0 };
    let mut frame = [0u8; 16 + 8 + CONTENT_TYPE.len()];
    frame[4..8].copy_from_slice(&((4 + fields) as u32).to_be_bytes());
    frame[8..12].copy_from_slice(&kind.to_be_bytes());
    if with_type {
        frame[12..16].copy_from_slice(&FIELD_CONTENT_TYPE.to_be_bytes());
        frame[16..20].copy_from_slice(&(CONTENT_TYPE.len() as u32).to_be_bytes());
        frame[20..20 + CONTENT_TYPE.len()].copy_from_slice(CONTENT_TYPE);
    }
    w.write_all(&frame[..12 + fields])
}

fn read_u32(r: &mut impl Read) -> io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_be_bytes(b))
}

fn read_control(r: &mut impl Read) -> Result<Control, FstrmError> {
    if read_u32(r)? != 0 {
        return Err(FstrmError::NotControl);
    }
    let len = read_u32(r)? as usize;
    if len > MAX_CONTROL {
        return Err(FstrmError::TooLong(len));
    }
    let mut body = [0u8; MAX_CONTROL];
    let body = &mut body[..len];
    r.read_exact(body)?;
    parse_control(body)
}

fn parse_control(body: &[u8]) -> Result<Control, FstrmError> {
    let word = |at: usize| -> Result<u32, FstrmError> {
        let b = body.get(at..at + 4).ok_or(FstrmError::Malformed)?;
        Ok(u32::from_be_bytes(b.try_into().expect("four bytes")))
    };
    let mut control = Control { kind: word(0)?, content_types: 0, ours: false };
    let mut at = 4;
    while at < body.len() {
        let (field, len) = (word(at)?, word(at + 4)? as usize);
        let value = body.get(at + 8..at + 8 + len).ok_or(FstrmError::Malformed)?;
        if field == FIELD_CONTENT_TYPE {
            control.content_types += 1;
            control.ours |= value == CONTENT_TYPE;
        }
        at += 8 + len;
    }
    Ok(control)
}

fn expect(got: &Control, expected: u32) -> Result<(), FstrmError> {
    if got.kind == expected {
        Ok(())
    } else {
        Err(FstrmError::Unexpected { expected, got: got.kind })
    }
}

/// The writer's side of the bidirectional handshake, up to and including START. `stream`
/// should have a read timeout: a reader that never answers must not hold the writer.
pub fn open_bidirectional(stream: &mut (impl Read + Write)) -> Result<(), FstrmError> {
    write_control(stream, READY, true)?;
    stream.flush()?;
    let accept = read_control(stream)?;
    expect(&accept, ACCEPT)?;
    // An ACCEPT that names content types must name ours; one naming none takes anything.
    if accept.content_types > 0 && !accept.ours {
        return Err(FstrmError::Refused);
    }
    write_control(stream, START, true)?;
    Ok(())
}

/// Starts a unidirectional stream (a file).
pub fn open_unidirectional(w: &mut impl Write) -> io::Result<()> {
    write_control(w, START, true)
}

/// One data frame.
pub fn write_data<W: Write + ?Sized>(w: &mut W, payload: &[u8]) -> io::Result<()> {
    w.write_all(&(payload.len() as u32).to_be_bytes())?;
    w.write_all(payload)
}

/// Ends a unidirectional stream.
pub fn close_unidirectional(w: &mut impl Write) -> io::Result<()> {
    write_control(w, STOP, false)?;
    w.flush()
}

/// Ends a bidirectional stream: STOP, then the reader's FINISH.
pub fn close_bidirectional(stream: &mut (impl Read + Write)) -> Result<(), FstrmError> {
    write_control(stream, STOP, false)?;
    stream.flush()?;
    expect(&read_control(stream)?, FINISH)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket stand-in: reads from `input`, collects what is written.
    struct Duplex {
        input: io::Cursor<Vec<u8>>,
        output: Vec<u8>,
    }

    impl Read for Duplex {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.input.read(buf)
        }
    }

    impl Write for Duplex {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.output.write(buf)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn control(kind: u32, with_type: bool) -> Vec<u8> {
        let mut v = Vec::new();
        write_control(&mut v, kind, with_type).unwrap();
        v
    }

    #[test]
    fn control_frames_are_laid_out_as_the_protocol_says() {
        let start = control(START, true);
        let mut want = vec![0, 0, 0, 0, 0, 0, 0, 34, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 22];
        want.extend_from_slice(CONTENT_TYPE);
        assert_eq!(start, want);
        assert_eq!(control(STOP, false), [0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 3]);
        let mut data = Vec::new();
        write_data(&mut data, b"abc").unwrap();
        assert_eq!(data, [0, 0, 0, 3, b'a', b'b', b'c']);
    }

    #[test]
    fn handshake_and_finish() {
        let mut input = control(ACCEPT, true);
        input.extend(control(FINISH, false));
        let mut s = Duplex { input: io::Cursor::new(input), output: Vec::new() };
        open_bidirectional(&mut s).unwrap();
        write_data(&mut s, b"x").unwrap();
        close_bidirectional(&mut s).unwrap();
        let mut want = control(READY, true);
        want.extend(control(START, true));
        want.extend([0, 0, 0, 1, b'x']);
        want.extend(control(STOP, false));
        assert_eq!(s.output, want);
    }

    #[test]
    fn a_reader_that_refuses_or_answers_wrongly_fails_the_handshake() {
        // ACCEPT of another content type.
        let mut other = vec![0, 0, 0, 0, 0, 0, 0, 13, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, b'x'];
        let mut s = Duplex { input: io::Cursor::new(other.clone()), output: Vec::new() };
        assert!(matches!(open_bidirectional(&mut s), Err(FstrmError::Refused)));
        // An ACCEPT naming no content type takes ours.
        let mut s = Duplex { input: io::Cursor::new(control(ACCEPT, false)), output: Vec::new() };
        open_bidirectional(&mut s).unwrap();
        // FINISH where ACCEPT belongs.
        let mut s = Duplex { input: io::Cursor::new(control(FINISH, false)), output: Vec::new() };
        let got = open_bidirectional(&mut s);
        assert!(matches!(got, Err(FstrmError::Unexpected { expected: ACCEPT, got: FINISH })));
        // A data frame, a truncated field, an oversized frame, silence.
        for input in [vec![0, 0, 0, 5], vec![0, 0, 0, 0, 0, 0, 2, 1], vec![]] {
            let mut s = Duplex { input: io::Cursor::new(input), output: Vec::new() };
            assert!(open_bidirectional(&mut s).is_err());
        }
        other[7] = 14; // one byte more than the field holds
        other.push(0);
        other[19] = 9;
        let mut s = Duplex { input: io::Cursor::new(other), output: Vec::new() };
        assert!(matches!(open_bidirectional(&mut s), Err(FstrmError::Malformed)));
    }
}
