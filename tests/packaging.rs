//! Packaging without a Docker engine or a running systemd: the Dockerfile's build stage
//! copies everything cargo needs, the configuration its runtime stage copies in loads, and
//! `packaging/steerdns.service` passes `systemd-analyze verify`.

#[allow(dead_code)]
#[path = "common/tools.rs"]
mod tools;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    let path = root().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// One stage of a Dockerfile: what it copies from the build context, the commands it runs
/// and its `CMD`, with paths made absolute against its `WORKDIR`.
#[derive(Debug, Default)]
struct Stage {
    name: Option<String>,
    /// (context path, absolute destination, destination names a directory), in order.
    copies: Vec<(String, String, bool)>,
    /// Each `RUN` with the `WORKDIR` it runs in.
    runs: Vec<(String, String)>,
    cmd: Vec<String>,
}

/// The instructions this test needs (`FROM`, `WORKDIR`, `COPY`, `RUN`, `CMD`); the others
/// do not change which files the build sees. `.dockerignore` is not applied: there is none.
fn stages(dockerfile: &str) -> Vec<Stage> {
    // Comment lines go first (they may sit inside a continued instruction), then
    // backslash continuations join the lines of one instruction.
    let mut joined = String::new();
    for line in dockerfile.lines().filter(|l| !l.trim_start().starts_with('#')) {
        match line.strip_suffix('\\') {
            Some(part) => joined.push_str(part),
            None => {
                joined.push_str(line);
                joined.push('\n');
            }
        }
    }
    let mut stages: Vec<Stage> = Vec::new();
    let mut workdir = String::from("/");
    for line in joined.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (keyword, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let rest = rest.trim();
        if keyword.eq_ignore_ascii_case("FROM") {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let name = match words.as_slice() {
                [_, as_, name] if as_.eq_ignore_ascii_case("AS") => Some(name.to_string()),
                _ => None,
            };
            stages.push(Stage { name, ..Stage::default() });
            workdir = String::from("/");
            continue;
        }
        let stage = stages.last_mut().expect("an instruction before FROM");
        match keyword.to_ascii_uppercase().as_str() {
            "WORKDIR" => workdir = absolute(&workdir, rest),
            "RUN" => stage.runs.push((rest.to_string(), workdir.clone())),
            "CMD" => stage.cmd = serde_json::from_str(rest).expect("CMD in JSON form"),
            "COPY" | "ADD" => {
                let words = arguments(rest);
                if words.iter().any(|w| w.starts_with("--from")) {
                    continue;
                }
                let words: Vec<&String> = words.iter().filter(|w| !w.starts_with("--")).collect();
                let (dest, sources) = words.split_last().expect("COPY needs a destination");
                let into_dir = dest.ends_with('/') || sources.len() > 1;
                for source in sources {
                    assert!(
                        !source.contains(['*', '?', '[']) && !source.contains("://"),
                        "{line}: this test copies plain paths only"
                    );
                    stage.copies.push((source.to_string(), absolute(&workdir, dest), into_dir));
                }
            }
            _ => {}
        }
    }
    stages
}

/// The words of a `COPY`, in shell form or JSON form.
fn arguments(rest: &str) -> Vec<String> {
    if rest.starts_with('[') {
        serde_json::from_str(rest).expect("COPY in JSON form")
    } else {
        rest.split_whitespace().map(String::from).collect()
    }
}

fn absolute(workdir: &str, path: &str) -> String {
    let joined = if path.starts_with('/') { path.to_string() } else { format!("{workdir}/{path}") };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Does what the stage's `COPY` instructions do, into `image` as the root of its file
/// system: a directory's contents go into the destination, a file to it or into it.
fn copy_into(image: &Path, stage: &Stage) {
    for (source, dest, into_dir) in &stage.copies {
        let from = root().join(source);
        let mut to = image.join(dest.trim_start_matches('/'));
        if from.is_dir() {
            copy_dir(&from, &to);
            continue;
        }
        assert!(from.is_file(), "COPY {source}: not in the repository");
        if *into_dir {
            to = to.join(from.file_name().unwrap());
        }
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&from, &to).unwrap_or_else(|e| panic!("{source} -> {}: {e}", to.display()));
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The directory cargo built this test into (it holds `CACHEDIR.TAG`).
fn target_dir() -> PathBuf {
    let exe = Path::new(env!("CARGO_BIN_EXE_steerdns"));
    let found = exe.ancestors().skip(1).take(3).find(|d| d.join("CACHEDIR.TAG").is_file());
    found.unwrap_or_else(|| exe.parent().unwrap().parent().unwrap()).to_path_buf()
}

#[test]
fn dockerfile_stages_are_read_as_docker_reads_them() {
    let file = "FROM rust AS build\nWORKDIR /src\nCOPY a b ./\n# note\nRUN make \\\n  # inside\n  all\n\
                FROM debian\nCOPY --from=build /src/x /usr/bin/x\nWORKDIR etc\nCOPY [\"c\", \"d\"]\n\
                COPY e f/\nCMD [\"serve\", \"-c\", \"f\"]\n";
    let s = stages(file);
    assert_eq!(s.len(), 2);
    assert_eq!(s[0].name.as_deref(), Some("build"));
    let copies = |i: usize| -> Vec<(&str, &str, bool)> {
        s[i].copies.iter().map(|(a, b, d)| (a.as_str(), b.as_str(), *d)).collect()
    };
    assert_eq!(copies(0), [("a", "/src", true), ("b", "/src", true)]);
    assert_eq!(s[0].runs, [("make   all".to_string(), "/src".to_string())]);
    assert_eq!(copies(1), [("c", "/etc/d", false), ("e", "/etc/f", true)]);
    assert_eq!(s[1].cmd, ["serve", "-c", "f"]);
}

/// Cargo reads the manifest, the lock file and every file compiled in exactly as the image
/// build does, from the files the build stage copies. `cargo check`, not `cargo build`:
/// it finds the same missing files and targets, takes a few seconds in the target directory
/// the tests were built in (where the dependencies are already checked), and writes no
/// `steerdns` binary over the one the other tests run.
#[test]
fn docker_build_stage_copies_what_cargo_needs() {
    let all = stages(&read("docker/Dockerfile"));
    let build = all
        .iter()
        .find(|s| s.runs.iter().any(|(run, _)| run.contains("cargo build")))
        .expect("a stage runs cargo build");
    let (run, workdir) = build.runs.iter().find(|(run, _)| run.contains("cargo build")).unwrap();
    assert!(run.contains("--locked"), "the image builds from Cargo.lock: {run}");
    // A fixed place, so that each run overwrites the last one's check artifacts.
    let image = target_dir().join("docker-build-stage");
    let _ = std::fs::remove_dir_all(&image);
    copy_into(&image, build);
    let project = image.join(workdir.trim_start_matches('/'));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["check", "--offline", "--locked", "--quiet"])
        .current_dir(&project)
        .env("CARGO_TARGET_DIR", target_dir())
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "cargo check fails on the files docker/Dockerfile copies into its build stage \
         ({}):\n{}",
        project.display(),
        text(&out)
    );
}

/// The image's configuration (docker/steerdns.yaml with the files copied beside it) loads
/// where the image's `CMD` points.
#[test]
fn docker_image_configuration_loads() {
    let all = stages(&read("docker/Dockerfile"));
    let runtime = all.last().expect("a stage");
    let image = tempfile::tempdir().unwrap();
    copy_into(image.path(), runtime);
    let at = runtime.cmd.iter().position(|a| a == "-c" || a == "--config");
    let config = &runtime.cmd[at.expect("CMD names the configuration with -c") + 1];
    let config = image.path().join(config.trim_start_matches('/'));
    let out = Command::new(env!("CARGO_BIN_EXE_steerdns"))
        .arg("check")
        .arg("-c")
        .arg(&config)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}: {}", config.display(), text(&out));
    assert!(text(&out).starts_with("ok: "), "{}", text(&out));
}

const UNIT: &str = "packaging/steerdns.service";

/// The unit's `ExecStart=` command line.
fn exec_start(unit: &str) -> Vec<String> {
    let line = unit.lines().find_map(|l| l.strip_prefix("ExecStart=")).expect("ExecStart=");
    line.split_whitespace().map(String::from).collect()
}

/// The unit's command line is one the binary takes (clap exits 2 on a usage error): run
/// as `check`, it gets as far as reading the configuration file.
#[test]
fn systemd_unit_command_line_parses() {
    let words = exec_start(&read(UNIT));
    assert_eq!(words.get(1).map(String::as_str), Some("serve"), "{words:?}");
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("steerdns.yaml");
    let mut args: Vec<String> = words[1..].to_vec();
    args[0] = "check".into();
    for (i, a) in args.clone().iter().enumerate() {
        if a.ends_with("steerdns.yaml") {
            args[i] = missing.display().to_string();
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_steerdns")).args(&args).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
    assert!(text(&out).contains(&missing.display().to_string()), "{}", text(&out));
}

/// `systemd-analyze verify` on the unit, its `ExecStart=` pointed at the binary just
/// built (verify insists that the program exists). Unknown keys and bad values are only
/// warnings there, so any message about the unit fails the test too.
#[test]
fn systemd_unit_verifies() {
    if !tools::have_tool("systemd-analyze", "systemd") {
        return;
    }
    let unit = read(UNIT);
    let program = exec_start(&unit)[0].clone();
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("steerdns.service");
    let exe = env!("CARGO_BIN_EXE_steerdns");
    let line = format!("ExecStart={program}");
    assert!(unit.contains(&line));
    std::fs::write(&copy, unit.replace(&line, &format!("ExecStart={exe}"))).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .env("SYSTEMD_LOG_COLOR", "0")
        .output()
        .unwrap();
    let messages = text(&out);
    let about_unit: Vec<&str> = messages.lines().filter(|l| l.contains("steerdns")).collect();
    assert!(out.status.success() && about_unit.is_empty(), "{UNIT}:\n{messages}");
}
