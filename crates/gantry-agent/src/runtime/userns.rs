//! User namespaces for containers (job containers and build steps), and idmapped mounts of
//! image layers and volumes.
//!
//! A job container's root (each its own range, see `runtime::JOB_IDS`), like a RUN step's,
//! is mapped to an unprivileged host id, and the image's layers and the volumes are mounted
//! through that mapping, so what the container writes into a volume keeps the owners it would
//! have without one. For builds: a RUN step's root is mapped to an unprivileged host id (`IdMap::host`), so a command that
//! escapes its container is nobody on the host. The image's files (owned by 0..65535 on disk,
//! shared by every container on the node) must then look owned by the mapped ids from inside:
//! each lower layer is given to overlayfs as an *idmapped mount* of the cached layer (a view
//! with shifted owners; nothing on disk changes). The upper directory cannot be idmapped
//! (overlayfs writes its work directory with the mounter's ids, which the mapping does not
//! cover), so what a step writes is owned by the mapped host ids, and the layer conversion
//! shifts them back (`layer::write_layer`). Steps built before are stacked as they are (their
//! owners are already shifted).
//!
//! This needs Linux 5.19 or later (idmapped overlayfs layers); [`probe`] says whether it works
//! on this node.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::runtime::IdMap;

/// Host ids `0x7000_0000..+65536` are root..65535 of build steps: far above what systems hand
/// out to users and system services (systemd leaves 0x70000000 and up alone), so no process
/// or file of the host is ever one of them.
pub const BUILD_MAP: IdMap = IdMap {
    host: 0x7000_0000,
    size: 65536,
};

// linux/mount.h
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// A user namespace with a mapping, held open for idmapped mounts.
#[derive(Debug)]
pub struct UserNs {
    fd: OwnedFd,
    map: IdMap,
}

impl UserNs {
    /// Makes a user namespace mapping 0..size to host..host+size: a child process unshares
    /// one, the mapping is written from here, and its namespace file is kept open.
    pub fn new(map: IdMap) -> io::Result<Self> {
        // SAFETY: unshare is async-signal-safe.
        let fd = in_child(
            || unsafe { libc::unshare(libc::CLONE_NEWUSER) == 0 },
            "could not make a user namespace",
            |pid| {
                let line = format!("0 {} {}\n", map.host, map.size);
                fs::write(format!("/proc/{pid}/uid_map"), &line)?;
                fs::write(format!("/proc/{pid}/gid_map"), &line)?;
                let f = fs::File::open(format!("/proc/{pid}/ns/user"))?;
                Ok(OwnedFd::from(f))
            },
        )?;
        Ok(UserNs { fd, map })
    }

    pub fn map(&self) -> IdMap {
        self.map
    }

    /// Whether the network namespace bound at `netns` is owned by this user namespace.
    pub fn owns_netns(&self, netns: &Path) -> io::Result<bool> {
        use std::os::unix::fs::MetadataExt;
        const NS_GET_USERNS: libc::c_ulong = 0xb701;
        let net = fs::File::open(netns)?;
        // SAFETY: a valid fd; the ioctl returns a new fd of the owning namespace or -1.
        let owner = unsafe { libc::ioctl(net.as_raw_fd(), NS_GET_USERNS) };
        if owner < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new fd owned by nothing else.
        let owner = fs::File::from(unsafe { OwnedFd::from_raw_fd(owner) });
        let mine = fs::File::from(self.fd.try_clone()?);
        let (a, b) = (owner.metadata()?, mine.metadata()?);
        Ok((a.dev(), a.ino()) == (b.dev(), b.ino()))
    }

    /// This namespace as a path another process (runc) can join while this is open.
    pub fn path(&self) -> std::path::PathBuf {
        format!("/proc/{}/fd/{}", std::process::id(), self.fd.as_raw_fd()).into()
    }

    /// Makes a network namespace owned by this user namespace and binds it to `target` (an
    /// existing file), as `netns::create` does for the host's: a container that joins both
    /// holds its capabilities (binding low ports, ping) over its own network, and `runc exec`,
    /// which joins the user namespace first, may then join the network too. A child process
    /// enters this namespace (a thread cannot: setns into a user namespace needs a
    /// single-threaded caller) and makes the network there; this process binds it.
    pub fn netns(&self, target: &Path) -> io::Result<()> {
        let userns = self.fd.as_raw_fd();
        in_child(
            // SAFETY: setns and unshare are async-signal-safe; `userns` stays open meanwhile.
            || unsafe {
                libc::setns(userns, libc::CLONE_NEWUSER) == 0
                    && libc::unshare(libc::CLONE_NEWNET) == 0
            },
            "could not make a network namespace in the user namespace",
            |pid| {
                crate::runtime::sys::bind_mount(Path::new(&format!("/proc/{pid}/ns/net")), target)
            },
        )
    }

    /// Mounts `src` at `target` (an existing directory) with owners shifted by this
    /// namespace's mapping. Undo with `runtime::sys::unmount_all`.
    pub fn idmapped_mount(&self, src: &Path, target: &Path) -> io::Result<()> {
        let s = cstr(src)?;
        let t = cstr(target)?;
        // SAFETY: valid NUL-terminated path; the returned fd is owned below.
        let tree = unsafe {
            libc::syscall(
                libc::SYS_open_tree,
                libc::AT_FDCWD,
                s.as_ptr(),
                OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
            )
        };
        if tree < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: open_tree returned a new fd that nothing else owns.
        let tree = unsafe { OwnedFd::from_raw_fd(tree as i32) };
        let attr = MountAttr {
            attr_set: MOUNT_ATTR_IDMAP,
            attr_clr: 0,
            propagation: 0,
            userns_fd: self.fd.as_raw_fd() as u64,
        };
        let empty = c"";
        // SAFETY: valid fd, empty path with AT_EMPTY_PATH, and a struct of the size passed.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                tree.as_raw_fd(),
                empty.as_ptr(),
                libc::AT_EMPTY_PATH,
                &attr as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: valid fds and paths.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                tree.as_raw_fd(),
                empty.as_ptr(),
                libc::AT_FDCWD,
                t.as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Whether build steps can run in a user namespace here: a namespace, an idmapped mount and
/// an overlay over it, tried in `scratch` (an empty directory on the filesystem the layers
/// live on). Leaves nothing mounted.
pub fn probe(map: IdMap, scratch: &Path) -> Result<(), String> {
    // The mapped root is an unprivileged host uid: it must be able to pass through every
    // directory above the build's files, or runc fails later with a bare "permission denied"
    // (a state dir under a 0700 home or `mktemp -d`).
    {
        use std::os::unix::fs::PermissionsExt;
        for dir in scratch.ancestors().skip(1) {
            if let Ok(m) = fs::metadata(dir) {
                if m.permissions().mode() & 0o001 == 0 {
                    return Err(format!(
                        "{} (mode {:o}) cannot be entered by the build's unprivileged user; \
                         `chmod o+x` it to build in a user namespace",
                        dir.display(),
                        m.permissions().mode() & 0o7777
                    ));
                }
            }
        }
    }
    let ns = UserNs::new(map).map_err(|e| format!("user namespace: {e}"))?;
    let (src, lower, upper, work, merged) = (
        scratch.join("src"),
        scratch.join("lower"),
        scratch.join("upper"),
        scratch.join("work"),
        scratch.join("merged"),
    );
    for d in [&src, &lower, &upper, &work, &merged] {
        fs::create_dir_all(d).map_err(|e| format!("creating {}: {e}", d.display()))?;
    }
    let result = ns
        .idmapped_mount(&src, &lower)
        .map_err(|e| format!("idmapped mount: {e}"))
        .and_then(|()| {
            crate::runtime::sys::mount_overlay(
                std::slice::from_ref(&lower),
                &upper,
                &work,
                &merged,
                crate::runtime::sys::PLAIN_UPPER,
            )
            .map_err(|e| format!("overlay over an idmapped layer: {e}"))
        })
        .and_then(|()| shows_mapped_root(&lower, map));
    let _ = crate::runtime::sys::unmount_all(&merged);
    let _ = crate::runtime::sys::unmount_all(&lower);
    result
}

/// Whether a directory at `scratch` (made and removed here) can be mounted with owners shifted
/// by `map`: what volumes need on the storage root. Leaves nothing mounted.
pub fn probe_idmapped_dir(map: IdMap, scratch: &Path) -> Result<(), String> {
    let (src, view) = (scratch.join("src"), scratch.join("view"));
    let result = (|| {
        for d in [&src, &view] {
            fs::create_dir_all(d).map_err(|e| format!("creating {}: {e}", d.display()))?;
        }
        let ns = UserNs::new(map).map_err(|e| format!("user namespace: {e}"))?;
        ns.idmapped_mount(&src, &view)
            .map_err(|e| format!("idmapped mount: {e}"))?;
        let shown = shows_mapped_root(&view, map);
        let _ = crate::runtime::sys::unmount_all(&view);
        shown
    })();
    let _ = fs::remove_dir_all(scratch);
    result
}

/// Whether `view`, an idmapped mount of a directory of root's, reads as the mapped root's.
fn shows_mapped_root(view: &Path, map: IdMap) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let uid = fs::metadata(view).map(|m| m.uid()).unwrap_or(0);
    if uid == map.host {
        Ok(())
    } else {
        Err(format!(
            "the idmapped mount shows owner {uid}, not {}",
            map.host
        ))
    }
}

/// Forks a child that runs `enter` (which must make only async-signal-safe calls: this process
/// has other threads) and then waits; once `enter` has succeeded, runs `then` here with the
/// child's pid (to read or bind its namespaces through /proc), and then lets the child end.
fn in_child<T>(
    enter: impl FnOnce() -> bool,
    failed: &str,
    then: impl FnOnce(i32) -> io::Result<T>,
) -> io::Result<T> {
    let (ready_r, ready_w) = pipe()?;
    let (done_r, done_w) = pipe()?;
    // SAFETY: the child only runs `enter` and async-signal-safe calls (write, read, _exit)
    // before it exits; it never returns into Rust code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: plain syscalls on fds this process owns; the child ends with _exit.
        unsafe {
            libc::close(ready_r.as_raw_fd());
            libc::close(done_w.as_raw_fd());
            let ok = u8::from(enter());
            libc::write(ready_w.as_raw_fd(), (&ok as *const u8).cast(), 1);
            let mut b = 0u8;
            libc::read(done_r.as_raw_fd(), (&mut b as *mut u8).cast(), 1);
            libc::_exit(0);
        }
    }
    drop(ready_w);
    drop(done_r);
    let result = (|| {
        let mut ok = 0u8;
        // SAFETY: reading one byte into a valid buffer.
        let n = unsafe { libc::read(ready_r.as_raw_fd(), (&mut ok as *mut u8).cast(), 1) };
        if n != 1 || ok != 1 {
            return Err(io::Error::other(failed.to_owned()));
        }
        then(pid)
    })();
    // A byte, not just the pipe's end: another thread may fork meanwhile, and its child then
    // holds a copy of `done_w` (and we of its), so an end of file alone might never come.
    // SAFETY: writing one byte from a valid buffer.
    unsafe { libc::write(done_w.as_raw_fd(), (&1u8 as *const u8).cast(), 1) };
    drop(done_w);
    let mut status = 0;
    // SAFETY: reaping our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    result
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just made and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn cstr(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Agents of one process (`gantry up --agents N`) make namespaces at the same time: each
    /// child then holds copies of the others' pipes, which must not keep any of them waiting.
    #[test]
    fn namespaces_made_from_many_threads_at_once_all_finish() {
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..8 {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for _ in 0..10 {
                    let ns = UserNs::new(BUILD_MAP).map(|ns| ns.map());
                    let _ = tx.send(ns.map_err(|e| e.to_string()));
                }
            });
        }
        drop(tx);
        for _ in 0..80 {
            let made = rx
                .recv_timeout(std::time::Duration::from_secs(60))
                .expect("a namespace within a minute: the children are waiting on each other");
            assert_eq!(made, Ok(BUILD_MAP));
        }
    }
}
