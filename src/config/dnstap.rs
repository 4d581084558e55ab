//! `log.dnstap:`: query logs in dnstap, sent to a Frame Streams reader's unix socket or
//! written to a file. Off unless configured.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::raw::{Loc, RawLog};
use crate::diag::Sink;
use crate::model::snapshot::{Dnstap, DnstapOutput};

/// The longest unix socket path the kernel takes (`sun_path` less its final NUL).
const MAX_SOCKET_PATH: usize = 107;

pub fn build(sink: &mut Sink<'_>, raw: Option<&RawLog>, base: &Path) -> Option<Dnstap> {
    let block = raw?.dnstap.as_ref()?;
    let raw = &block.value;
    let output = match (&raw.socket, &raw.file) {
        (Some(socket), None) => {
            let path = base.join(non_empty(sink, socket, "log.dnstap.socket")?);
            if path.as_os_str().as_bytes().len() > MAX_SOCKET_PATH {
                let n = path.as_os_str().len();
                let msg = format!(
                    "log.dnstap.socket: {} is {n} bytes long, over the {MAX_SOCKET_PATH} a unix socket path may have",
                    path.display()
                );
                sink.on(socket, msg);
                return None;
            }
            DnstapOutput::Socket(path)
        }
        (None, Some(file)) => {
            DnstapOutput::File(base.join(non_empty(sink, file, "log.dnstap.file")?))
        }
        (Some(_), Some(file)) => {
            sink.on(file, "log.dnstap: give socket or file, not both");
            return None;
        }
        (None, None) => {
            sink.on(block, "log.dnstap needs socket (a Frame Streams reader) or file");
            return None;
        }
    };
    let sample = match &raw.sample {
        None => 1.0,
        Some(s) if s.value > 0.0 && s.value <= 1.0 => s.value,
        Some(s) => {
            sink.on(s, format!("log.dnstap.sample must be above 0 and at most 1, got {}", s.value));
            return None;
        }
    };
    let identity = raw.identity.as_ref().map_or_else(super::host::host_name, |i| i.value.clone());
    let version = raw
        .version
        .as_ref()
        .map_or_else(|| format!("steerdns {}", env!("CARGO_PKG_VERSION")), |v| v.value.clone());
    Some(Dnstap { output, sample, identity, version })
}

fn non_empty<'a>(sink: &mut Sink<'_>, v: &'a Loc<String>, key: &str) -> Option<&'a str> {
    if v.value.is_empty() {
        sink.on(v, format!("{key} must not be empty"));
        return None;
    }
    Some(&v.value)
}
