//! `steerdns serve` as a child process of the test, its stderr collected line by line by a
//! thread of its own, as it comes: for tests of the real binary (signals, exit codes, what
//! it logs).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A started `steerdns serve` and what collects its stderr.
pub struct Served {
    pub child: Child,
    /// Its stderr lines so far.
    pub stderr: Arc<Mutex<Vec<String>>>,
    /// The thread collecting stderr: it ends once the process has exited and every line is
    /// in `stderr`.
    pub reader: JoinHandle<()>,
}

/// Starts `steerdns serve -c config` at log level info, with JSON logs when `json`, and
/// collects its stderr, each line as `each` makes it.
pub fn serve_collecting_stderr(
    config: &Path,
    json: bool,
    mut each: impl FnMut(String) -> String + Send + 'static,
) -> Served {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_steerdns"));
    if json {
        cmd.args(["--log-format", "json"]);
    }
    let mut child = cmd
        .args(["serve", "-c"])
        .arg(config)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn steerdns");
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let lines = stderr.clone();
    let pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        for l in BufReader::new(pipe).lines() {
            let Ok(l) = l else { break };
            lines.lock().unwrap().push(each(l));
        }
    });
    Served { child, stderr, reader }
}
