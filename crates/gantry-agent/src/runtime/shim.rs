//! `gantry shim`: the per-container parent process.
//!
//! The shim exists so containers outlive the agent: it runs detached (own session, reparented
//! to init), is the parent of `runc run`, and leaves everything the agent needs in files in the
//! container's directory: `shim.pid`, the output in `stdout`/`stderr`, and `exit.json`.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{files, sys, write_atomic, ExitRecord};

struct ShimArgs {
    runc: PathBuf,
    runc_root: PathBuf,
    id: String,
    dir: PathBuf,
}

/// The arguments `Runtime::start` appends to `shim_argv`.
pub(crate) fn shim_args(runc: &Path, runc_root: &Path, id: &str, dir: &Path) -> Vec<String> {
    vec![
        "--runc".into(),
        runc.to_string_lossy().into_owned(),
        "--runc-root".into(),
        runc_root.to_string_lossy().into_owned(),
        "--id".into(),
        id.into(),
        "--dir".into(),
        dir.to_string_lossy().into_owned(),
    ]
}

fn parse(args: &[String]) -> Result<ShimArgs, String> {
    let (mut runc, mut runc_root, mut id, mut dir) = (None, None, None, None);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value"))?
            .clone();
        match flag.as_str() {
            "--runc" => runc = Some(PathBuf::from(value)),
            "--runc-root" => runc_root = Some(PathBuf::from(value)),
            "--id" => id = Some(value),
            "--dir" => dir = Some(PathBuf::from(value)),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(ShimArgs {
        runc: runc.ok_or("--runc is required")?,
        runc_root: runc_root.ok_or("--runc-root is required")?,
        id: id.ok_or("--id is required")?,
        dir: dir.ok_or("--dir is required")?,
    })
}

/// Entry point of `gantry shim ARGS...` (`args` are the arguments after `shim`). Returns the
/// process exit code. Its own diagnostics go to stderr, which the runtime points at
/// `shim.log` in the container's directory.
pub fn shim_main(args: &[String]) -> i32 {
    let a = match parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gantry shim: {e}");
            return 2;
        }
    };
    match detach() {
        Ok(true) => {}
        Ok(false) => return 0,
        Err(e) => {
            eprintln!("gantry shim {}: detaching: {e}", a.id);
            return 1;
        }
    }
    match run(&a) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("gantry shim {}: {e}", a.id);
            1
        }
    }
}

/// Gives the shim its own session (no terminal signals) and makes it an orphan adopted by
/// init, so the agent never reaps it and it outlives the agent. Returns true in the shim,
/// false in the launcher, which exits at once: the agent waits for that exit.
///
/// Done here rather than in a `pre_exec` hook of the agent's `Command` because such a hook
/// forces a real fork of the agent (a large multi-threaded process: page tables copied per
/// container); without one the agent starts us with `posix_spawn`.
fn detach() -> std::io::Result<bool> {
    // SAFETY: called before the shim starts any thread, so forking is sound; setsid has no
    // memory effects.
    unsafe {
        if libc::setsid() < 0 {
            return Err(std::io::Error::last_os_error());
        }
        match libc::fork() {
            -1 => Err(std::io::Error::last_os_error()),
            0 => Ok(true),
            _ => Ok(false),
        }
    }
}

fn run(a: &ShimArgs) -> Result<(), String> {
    let dir = &a.dir;
    write_atomic(
        &dir.join(files::SHIM_PID),
        std::process::id().to_string().as_bytes(),
    )
    .map_err(|e| format!("writing shim.pid: {e}"))?;

    // The container writes straight into these files (runc hands them on); O_APPEND so a
    // restarted container or an operator's `>>` never overwrites what is there.
    let open = |name: &str| {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(name))
            .map_err(|e| format!("opening {name}: {e}"))
    };
    let stdout = open(files::STDOUT)?;
    let stderr = open(files::STDERR)?;
    let status = Command::new(&a.runc)
        .arg("--root")
        .arg(&a.runc_root)
        .arg("--log")
        .arg(dir.join(files::RUNC_LOG))
        .args(["--log-format", "json", "run", "--bundle"])
        .arg(dir)
        .arg("--pid-file")
        .arg(dir.join(files::CONTAINER_PID))
        .arg(&a.id)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .status();

    let record = match status {
        Err(e) => ExitRecord {
            exit_code: 127,
            signal: None,
            start_error: Some(format!("could not run {}: {e}", a.runc.display())),
        },
        Ok(st) => {
            use std::os::unix::process::ExitStatusExt;
            // runc reports a container killed by signal N as 128+N, like a shell.
            let (exit_code, signal) = match (st.code(), st.signal()) {
                (Some(c), _) => (c, (129..=128 + 64).contains(&c).then_some(c - 128)),
                (None, Some(s)) => (128 + s, Some(s)),
                (None, None) => (255, None),
            };
            // runc writes the pid file only once the process is running, so without it the
            // container never started and the exit code is runc's own.
            let started = dir.join(files::CONTAINER_PID).exists();
            let start_error = (!started).then(|| {
                runc_error(&dir.join(files::RUNC_LOG))
                    .unwrap_or_else(|| format!("runc run exited with {exit_code}"))
            });
            ExitRecord {
                exit_code,
                signal: if started { signal } else { None },
                start_error,
            }
        }
    };
    let json = serde_json::to_vec(&record).map_err(|e| e.to_string())?;
    // Recorded before the cleanup below, so a crash there never loses the status.
    write_atomic(&dir.join(files::EXIT), &json).map_err(|e| format!("writing exit.json: {e}"))?;

    // No `runc delete` here: `runc run` without `--keep` has destroyed the container when it
    // returns, and a runc that was killed leaves state the agent's `remove` deletes.
    if let Err(e) = sys::unmount_all(&dir.join(files::ROOTFS)) {
        eprintln!("gantry shim {}: unmounting rootfs: {e}", a.id);
    }
    Ok(())
}

/// The last error runc logged (its log is JSON lines: `{"level":"error","msg":...}`).
pub(crate) fn runc_error(log: &Path) -> Option<String> {
    let text = fs::read_to_string(log).ok()?;
    text.lines().rev().find_map(|l| {
        let v: serde_json::Value = serde_json::from_str(l).ok()?;
        let level = v["level"].as_str()?;
        (level == "error" || level == "fatal").then(|| v["msg"].as_str().map(str::to_owned))?
    })
}
