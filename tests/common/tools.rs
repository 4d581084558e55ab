//! The one place a test asks for an outside tool (dig, delv, BIND's key tools, named,
//! unbound, etcd, chromium, mmdblookup, systemd-analyze, fstrm_capture). On a developer's
//! machine a missing tool skips the test with a message naming the Debian package; with
//! `STEERDNS_REQUIRE_TOOLS=1`, which `.ci/run` exports, it fails the test instead, so CI
//! can never pass by skipping.

use std::path::PathBuf;

/// The variable that turns a skip into a failure.
pub const REQUIRE_TOOLS: &str = "STEERDNS_REQUIRE_TOOLS";

/// Whether missing tools fail tests (CI) rather than skip them.
pub fn tools_required() -> bool {
    std::env::var_os(REQUIRE_TOOLS).is_some_and(|v| v == "1")
}

/// The binary `name` (on PATH or in the sbin and browser directories), or `None` after
/// printing that the test skips. Panics instead when `STEERDNS_REQUIRE_TOOLS=1`.
pub fn require_tool(name: &str, package: &str) -> Option<PathBuf> {
    require_any(&[name], package)
}

/// The first of `names` that is installed (the same program under different names).
pub fn require_any(names: &[&str], package: &str) -> Option<PathBuf> {
    if let Some(found) = names.iter().find_map(|n| find_binary(n)) {
        return Some(found);
    }
    let what = names.join(" or ");
    assert!(
        !tools_required(),
        "{what} is not installed (Debian package {package}) and {REQUIRE_TOOLS}=1: \
         CI must run this test"
    );
    eprintln!("skipping: {what} is not installed (apt-get install {package})");
    None
}

/// `require_tool` as a yes or no, for tests that run the tool by name.
pub fn have_tool(name: &str, package: &str) -> bool {
    require_tool(name, package).is_some()
}

/// The binary `name`: on PATH, else in the sbin directories (often missing from a user's
/// PATH) or Debian's chromium directory.
pub fn find_binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin", "/usr/lib/chromium"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
