//! The shim: the per-container parent process.
//!
//! `shim --runc RUNC --runc-root ROOT --id ID --dir DIR`
//!
//! The shim exists so containers outlive the agent: it runs detached (own session, reparented
//! to init), is the parent of `runc run`, and leaves everything the agent needs in files in the
//! container's directory (`runtime/mod.rs` reads them): `shim.pid`, the output in
//! `stdout`/`stderr`, and `exit.json`.
//!
//! One starts for every container, so it is a small static program of its own, built by
//! `build.rs` and written out by the agent, rather than the 35 MB `gantry` binary: starting
//! that (dynamic loading, relocations, its fork and exit) cost ~3 ms of CPU per container
//! (bench/README.md). Standard library only; what it writes is simple enough to spell out.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{exit, Command, Stdio};

// The container directory's names and the agent's way of writing there (std only). The
// agent's unit tests compile this program as a module too, so there the file is loaded twice.
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "../src/runtime/dir.rs"]
mod dir;
use dir::files::{CONTAINER_PID, EXIT, ROOTFS, RUNC_LOG, SHIM_PID, STDERR, STDOUT};
use dir::{unmount_all, write_atomic};

extern "C" {
    fn setsid() -> i32;
    fn fork() -> i32;
}

struct Args {
    runc: PathBuf,
    runc_root: PathBuf,
    id: String,
    dir: PathBuf,
}

fn parse() -> Result<Args, String> {
    let (mut runc, mut runc_root, mut id, mut dir) = (None, None, None, None);
    let mut it = std::env::args_os().skip(1);
    while let Some(flag) = it.next() {
        let flag = flag.to_string_lossy().into_owned();
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--runc" => runc = Some(PathBuf::from(value)),
            "--runc-root" => runc_root = Some(PathBuf::from(value)),
            "--id" => id = Some(value.to_string_lossy().into_owned()),
            "--dir" => dir = Some(PathBuf::from(value)),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(Args {
        runc: runc.ok_or("--runc is required")?,
        runc_root: runc_root.ok_or("--runc-root is required")?,
        id: id.ok_or("--id is required")?,
        dir: dir.ok_or("--dir is required")?,
    })
}

fn main() {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gantry shim: {e}");
            exit(2)
        }
    };
    // Its own session (no terminal signals), and an orphan adopted by init, so the agent never
    // reaps it and it outlives the agent. The launcher (the parent here) exits at once: the
    // agent waits for that.
    // SAFETY: single-threaded at this point, so forking is sound; setsid has no memory effects.
    unsafe {
        if setsid() < 0 {
            eprintln!(
                "gantry shim {}: setsid: {}",
                a.id,
                std::io::Error::last_os_error()
            );
            exit(1)
        }
        match fork() {
            -1 => {
                eprintln!(
                    "gantry shim {}: fork: {}",
                    a.id,
                    std::io::Error::last_os_error()
                );
                exit(1)
            }
            0 => {}
            _ => exit(0),
        }
    }
    if let Err(e) = run(&a) {
        eprintln!("gantry shim {}: {e}", a.id);
        exit(1)
    }
}

fn run(a: &Args) -> Result<(), String> {
    let dir = &a.dir;
    write_atomic(
        &dir.join(SHIM_PID),
        std::process::id().to_string().as_bytes(),
    )
    .map_err(|e| format!("writing shim.pid: {e}"))?;

    // The container writes straight into these files (runc hands them on); O_APPEND so a
    // restarted container or an operator's `>>` never overwrites what is there.
    // Only the agent reads them: a job's output is its owner's.
    let open = |name: &str| {
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(dir.join(name))
            .map_err(|e| format!("opening {name}: {e}"))
    };
    let stdout = open(STDOUT)?;
    let stderr = open(STDERR)?;
    let status = Command::new(&a.runc)
        .arg("--root")
        .arg(&a.runc_root)
        .arg("--log")
        .arg(dir.join(RUNC_LOG))
        .args(["--log-format", "json", "run", "--bundle"])
        .arg(dir)
        .arg("--pid-file")
        .arg(dir.join(CONTAINER_PID))
        .arg(&a.id)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .status();

    // A start error is runc's exit status here; the agent reads runc's own message from runc.log.
    let record = match status {
        Err(e) => exit_record(
            127,
            None,
            Some(&format!("could not run {}: {e}", a.runc.display())),
        ),
        Ok(st) => {
            // runc reports a container killed by signal N as 128+N, like a shell.
            let (exit_code, signal) = match (st.code(), st.signal()) {
                (Some(c), _) => (c, (129..=128 + 64).contains(&c).then_some(c - 128)),
                (None, Some(s)) => (128 + s, Some(s)),
                (None, None) => (255, None),
            };
            // runc writes the pid file only once the process is running, so without it the
            // container never started and the exit code is runc's own.
            if dir.join(CONTAINER_PID).exists() {
                exit_record(exit_code, signal, None)
            } else {
                let why = format!("runc run exited with {exit_code}");
                exit_record(exit_code, None, Some(&why))
            }
        }
    };
    // Recorded before the cleanup below, so a crash there never loses the status.
    write_atomic(&dir.join(EXIT), record.as_bytes())
        .map_err(|e| format!("writing exit.json: {e}"))?;

    // No `runc delete` here: `runc run` without `--keep` has destroyed the container when it
    // returns, and a runc that was killed leaves state the agent's `remove` deletes.
    if let Err(e) = unmount_all(&dir.join(ROOTFS)) {
        eprintln!("gantry shim {}: unmounting rootfs: {e}", a.id);
    }
    Ok(())
}

/// `exit.json`: {"exit_code": N, "signal": S|null, "start_error": "..."?}, as the agent's
/// `runtime::ExitRecord` reads it.
pub(crate) fn exit_record(
    exit_code: i32,
    signal: Option<i32>,
    start_error: Option<&str>,
) -> String {
    let signal = signal.map_or("null".to_string(), |s| s.to_string());
    match start_error {
        None => format!(r#"{{"exit_code":{exit_code},"signal":{signal}}}"#),
        Some(e) => format!(
            r#"{{"exit_code":{exit_code},"signal":{signal},"start_error":{}}}"#,
            json_string(e)
        ),
    }
}

/// A JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
