//! The process's open-file limit (RLIMIT_NOFILE): raised to the hard limit at start, and
//! read to size the DNS TCP connection table, so that clients cannot take the descriptors
//! that probes, the admin API and reloads need.

/// The soft and hard limits, or `None` when they cannot be read.
pub fn nofile() -> Option<(libc::rlim_t, libc::rlim_t)> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit only writes the struct it is given.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    (rc == 0).then_some((lim.rlim_cur, lim.rlim_max))
}

/// Raises the soft limit to the hard one: the usual soft default of 1024 is a fraction of
/// what a server facing the internet needs, and the hard limit is what the administrator
/// allows. Returns the limits before and after.
pub fn raise_nofile() -> std::io::Result<(libc::rlim_t, libc::rlim_t)> {
    let (soft, hard) = nofile().ok_or_else(std::io::Error::last_os_error)?;
    if soft >= hard {
        return Ok((soft, soft));
    }
    let lim = libc::rlimit { rlim_cur: hard, rlim_max: hard };
    // SAFETY: setrlimit only reads the struct it is given.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((soft, hard))
}
