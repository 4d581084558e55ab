//! This host's name, the default of settings that name the server (`cluster.node`,
//! `log.dnstap.identity`). The one place steerdns asks the system for it.

/// The host name, as the system gives it; empty when it gives none.
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: a writable buffer of the length given; gethostname writes at most that much.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_host_name_is_found() {
        assert!(!super::host_name().is_empty());
    }
}
