//! Network namespaces kept alive by a bind mount on a file, as `ip netns add` does, but under
//! the agent's own state directory so agents on one host never see each other's.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

fn cstr(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

/// Makes a new, empty network namespace (not even `lo` is up) and binds it to `path`, which
/// must not exist. On error nothing is left behind.
pub fn create(path: &Path) -> io::Result<()> {
    create_in(path, None)
}

/// [`create`], with the namespace owned by `userns` when given (the user namespace of the
/// container that will join it, see `UserNs::netns`) rather than by the host's.
pub fn create_in(path: &Path, userns: Option<&crate::runtime::userns::UserNs>) -> io::Result<()> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(path)?;
    let made = match userns {
        Some(ns) => ns.netns(path),
        None => unshare_and_bind(path),
    };
    if made.is_err() {
        let _ = fs::remove_file(path);
    }
    made
}

fn unshare_and_bind(path: &Path) -> io::Result<()> {
    let target = cstr(path)?;
    // unshare(CLONE_NEWNET) moves only the calling thread: a thread of its own, which ends
    // right after, so no other work ever runs in the new namespace by accident.
    std::thread::spawn(move || -> io::Result<()> {
        // SAFETY: unshare changes only this thread's network namespace.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let source = c"/proc/thread-self/ns/net";
        // SAFETY: valid NUL-terminated strings; a bind mount takes no data.
        let rc = unsafe {
            libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    })
    .join()
    .unwrap_or_else(|_| Err(io::Error::other("the namespace thread panicked")))
}

/// Whether `path` is a mounted network namespace.
pub fn is_mounted(path: &Path) -> bool {
    crate::runtime::sys::mounts_under(path)
        .iter()
        .any(|m| m == path)
}

/// Unmounts and removes a namespace file. The namespace itself goes once nothing else holds
/// it (no process in it, no other mount of it). Missing is success.
pub fn remove(path: &Path) -> io::Result<()> {
    crate::runtime::sys::unmount_all(path)?;
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Runs `f` on a fresh thread inside the network namespace at `ns` (a namespace file or
/// `/proc/PID/ns/net`). Sockets made there stay in that namespace. The thread ends with `f`,
/// so nothing else ever runs in the namespace by accident.
pub fn run_in<T: Send + 'static>(
    ns: &Path,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<T> {
    let file = fs::File::open(ns)?;
    std::thread::spawn(move || -> io::Result<T> {
        use std::os::fd::AsRawFd;
        // SAFETY: setns on a file descriptor we own, for this thread only.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        drop(file);
        Ok(f())
    })
    .join()
    .unwrap_or_else(|_| Err(io::Error::other("the namespace thread panicked")))
}
