//! `confine FILTER COMMAND [ARG...]`: load the seccomp filter in FILTER, then exec COMMAND.
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

extern "C" {
    fn prctl(option: i32, ...) -> i32;
    fn syscall(number: i64, ...) -> i64;
}

fn fail(what: &str, err: impl std::fmt::Display) -> ! {
    eprintln!("gantry confine: {what}: {err}");
    exit(127)
}

fn main() {
    let mut args = std::env::args_os().skip(1);
    let (Some(filter), Some(command)) = (args.next(), args.next()) else {
        fail("usage", "confine FILTER COMMAND [ARG...]")
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
    // PATH lookup, as runc would have done for the command.
    let err = Command::new(&command).args(rest).exec();
    fail(&format!("exec {}", command.to_string_lossy()), err)
}
