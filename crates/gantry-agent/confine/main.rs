//! `confine [--init] FILTER COMMAND [ARG...]`: load the seccomp filter in FILTER, then exec
//! COMMAND; with `--init`, run COMMAND as the child of this process, which stays the
//! container's PID 1.
//!
//! Every container's process starts as this program (bind-mounted at `/dev/confine`), so the
//! filter the agent compiled once (`runtime/seccomp.rs`) confines the container instead of
//! runc 1.1 compiling the same allow-list again in each container's init, which cost 7-9 ms
//! of CPU per container (bench/README.md). runc has already set up everything else (namespaces,
//! cgroups, capabilities, `no_new_privs`) when this runs, and nothing of the image has run yet.
//!
//! It runs inside images that may have no libc, so it is linked statically (`build.rs`) and
//! uses only the standard library: no crate dependencies. If anything goes wrong it exits 127
//! without running COMMAND: a container never runs unconfined.
//!
//! As PID 1 (`--init`) it does what tini does by default: forwards every signal it gets to
//! COMMAND, reaps every process that ends in the container (orphans are re-parented to PID
//! 1), and exits when COMMAND does, with its exit code (128 + N if signal N killed it). A
//! workload that does not handle SIGTERM would otherwise, as PID 1 itself, ignore it and only
//! stop at SIGKILL. Doing it here rather than exec'ing tini saves each container an exec and
//! a bind mount: ~1.5 ms of CPU, measured in bench/README.md.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{exit, Command};

/// cBPF's limit on a program's length (`BPF_MAXINSNS`).
const MAX_INSNS: usize = 4096;
const PR_SET_NO_NEW_PRIVS: i32 = 38;
const SECCOMP_SET_MODE_FILTER: u32 = 1;
#[cfg(target_arch = "x86_64")]
const SYS_SECCOMP: i64 = 317;
#[cfg(target_arch = "aarch64")]
const SYS_SECCOMP: i64 = 277;

#[repr(C)]
struct SockFprog {
    len: u16,
    filter: *const u8,
}

/// The C library's `sigset_t` (1024 bits in glibc and musl), only ever filled by it.
#[repr(C)]
struct SigSet([u64; 16]);

const SIG_SETMASK: i32 = 2;
const SIGCHLD: i32 = 17;
const WNOHANG: i32 = 1;
const EINTR: i32 = 4;

extern "C" {
    fn prctl(option: i32, ...) -> i32;
    fn syscall(number: i64, ...) -> i64;
    fn sigfillset(set: *mut SigSet) -> i32;
    fn sigprocmask(how: i32, set: *const SigSet, old: *mut SigSet) -> i32;
    fn sigwaitinfo(set: *const SigSet, info: *mut u8) -> i32;
    fn fork() -> i32;
    fn setpgid(pid: i32, pgid: i32) -> i32;
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
    fn kill(pid: i32, sig: i32) -> i32;
}

fn fail(what: &str, err: impl std::fmt::Display) -> ! {
    eprintln!("gantry confine: {what}: {err}");
    exit(127)
}

fn main() {
    let mut args = std::env::args_os().skip(1).peekable();
    let init = args.next_if(|a| a == "--init").is_some();
    let (Some(filter), Some(command)) = (args.next(), args.next()) else {
        fail("usage", "confine [--init] FILTER COMMAND [ARG...]")
    };
    let rest: Vec<OsString> = args.collect();
    let prog = match std::fs::read(&filter) {
        Ok(p) => p,
        Err(e) => fail(&format!("reading {}", filter.to_string_lossy()), e),
    };
    if prog.is_empty() || prog.len() % 8 != 0 || prog.len() / 8 > MAX_INSNS {
        fail(
            "filter",
            format!("{} bytes is not a cBPF program", prog.len()),
        );
    }
    let fprog = SockFprog {
        len: (prog.len() / 8) as u16,
        filter: prog.as_ptr(),
    };
    // SAFETY: plain system calls; `fprog` points at `prog`, alive until the exec below.
    unsafe {
        // Already set by runc (the container's `noNewPrivileges`); setting it again is a no-op
        // and is what lets an unprivileged process load a filter.
        if prctl(PR_SET_NO_NEW_PRIVS, 1u64, 0u64, 0u64, 0u64) != 0 {
            fail("no_new_privs", std::io::Error::last_os_error());
        }
        if syscall(
            SYS_SECCOMP,
            SECCOMP_SET_MODE_FILTER,
            0u32,
            &fprog as *const SockFprog,
        ) != 0
        {
            fail(
                "loading the seccomp filter",
                std::io::Error::last_os_error(),
            );
        }
    }
    if init {
        run_as_init(&command, rest)
    }
    exec(&command, rest)
}

/// Replaces this process with COMMAND, found on PATH as runc would have found it.
fn exec(command: &OsString, rest: Vec<OsString>) -> ! {
    let err = Command::new(command).args(rest).exec();
    fail(&format!("exec {}", command.to_string_lossy()), err)
}

/// PID 1's duties (see the header) for COMMAND, run as its child.
fn run_as_init(command: &OsString, rest: Vec<OsString>) -> ! {
    let mut all = SigSet([0; 16]);
    let mut old = SigSet([0; 16]);
    // SAFETY: the C library fills and reads the sets we own; fork in a process with one thread.
    let child = unsafe {
        // Blocked from here on, every signal waits for `sigwaitinfo` below, one sent before
        // the child exists included. PID 1 gets no signal it has no handler for unless it is
        // blocked: the kernel would drop it.
        sigfillset(&mut all);
        sigprocmask(SIG_SETMASK, &all, &mut old);
        fork()
    };
    if child < 0 {
        fail("fork", std::io::Error::last_os_error());
    }
    if child == 0 {
        // SAFETY: the child restores the mask it inherited and leaves PID 1's process group,
        // as tini does, so that signals sent to the group reach PID 1 only via forwarding.
        unsafe {
            sigprocmask(SIG_SETMASK, &old, std::ptr::null_mut());
            setpgid(0, 0);
        }
        exec(command, rest)
    }
    let mut info = [0u8; 128];
    loop {
        // SAFETY: `all` is a filled set; `info` has room for a siginfo_t (128 bytes).
        let sig = unsafe { sigwaitinfo(&all, info.as_mut_ptr()) };
        if sig < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(EINTR) {
                continue;
            }
            fail("waiting for signals", e);
        }
        if sig != SIGCHLD {
            // SAFETY: plain system call. The child may be gone already: nothing to do then.
            unsafe { kill(child, sig) };
            continue;
        }
        // One SIGCHLD may stand for several ends: reap all there are.
        loop {
            let mut status = 0;
            // SAFETY: plain system call writing into `status`.
            let pid = unsafe { waitpid(-1, &mut status, WNOHANG) };
            if pid <= 0 {
                break;
            }
            if pid == child {
                exit(exit_code(status));
            }
        }
    }
}

/// A shell's exit code for a wait status: the process's own, or 128 + the signal that ended it.
fn exit_code(status: i32) -> i32 {
    let signal = status & 0x7f;
    if signal == 0 {
        (status >> 8) & 0xff
    } else {
        128 + signal
    }
}
