//! A container directory's layout, and the two things both the agent and the shim do there:
//! write a file whole, and take the image's mount off `rootfs`.
//!
//! Standard library only: the shim (`shim/main.rs`, a static program without crates) includes
//! this file as a module, so the agent and the shim share one list of names and one way of
//! writing them.

use std::ffi::CString;
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// File names inside a container's directory, and (the last four) in the agent's state
/// directory.
pub mod files {
    pub const META: &str = "meta.json";
    pub const CONFIG: &str = "config.json";
    pub const ROOTFS: &str = "rootfs";
    pub const UPPER: &str = "upper";
    pub const WORK: &str = "work";
    pub const INJECTED: &str = "files";
    /// The mount sources the caller gave, bound here until the container has started.
    pub const MOUNTS: &str = "mounts";
    /// Idmapped views of the image's layers, while the overlay is mounted over them.
    pub const LOWER: &str = "lower";
    pub const STDOUT: &str = "stdout";
    pub const STDERR: &str = "stderr";
    pub const SHIM_PID: &str = "shim.pid";
    pub const SHIM_LOG: &str = "shim.log";
    pub const RUNC_LOG: &str = "runc.log";
    pub const CONTAINER_PID: &str = "container.pid";
    pub const EXIT: &str = "exit.json";
    pub const TASK: &str = "task.json";
    /// What every container starts through (`spec.rs`), the filter it loads, and the shim
    /// every container runs under.
    pub const CONFINE: &str = "confine";
    pub const SECCOMP: &str = "seccomp.bpf";
    pub const SHIM: &str = "shim";
    /// Multinode members' remote launcher (`rsh/main.rs`), bind-mounted into their containers.
    pub const RSH: &str = "rsh";
}

/// Writes a whole file by rename, so a reader (or an agent restarted after a crash) sees the
/// old content or the new, never a part, and a file bind-mounted into containers keeps its
/// inode. Each call has its own temporary name, so threads writing one path never share one.
/// No fsync: these files matter while the host stays up (a host that loses power loses its
/// containers with them, and the server then treats the node's attempts as lost), and the
/// fsyncs cost each container start and end milliseconds on the path of every job.
pub fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    // The owner's alone: a bundle's config.json and meta.json carry the assignment's
    // environment, secrets filled in.
    write_atomic_mode(path, data, 0o600)
}

/// [`write_atomic`] with the file's permissions.
pub fn write_atomic_mode(path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let tmp = path.with_extension(format!(
        "tmp{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)?;
    f.write_all(data)?;
    // The umask may have narrowed what `open` asked for.
    f.set_permissions(fs::Permissions::from_mode(mode))?;
    drop(f);
    fs::rename(&tmp, path)
}

extern "C" {
    fn umount2(target: *const std::ffi::c_char, flags: i32) -> i32;
}
const MNT_DETACH: i32 = 2;
const EINVAL: i32 = 22;
const ENOENT: i32 = 2;

/// Detaches every mount stacked on `target`. Not mounted is success.
pub fn unmount_all(target: &Path) -> io::Result<()> {
    let t = CString::new(target.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    loop {
        // SAFETY: a valid NUL-terminated path.
        if unsafe { umount2(t.as_ptr(), MNT_DETACH) } == 0 {
            continue;
        }
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(EINVAL) | Some(ENOENT) => Ok(()),
            _ => Err(e),
        };
    }
}
