//! Thin wrappers over the few Linux calls the runtime needs: mounts, cgroup directories, and
//! waiting for a process to end (pidfd) or a file to appear (inotify) without polling.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

fn cstr(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

/// The mount data must fit in one page; the kernel truncates silently otherwise.
const MAX_MOUNT_DATA: usize = 4000;

/// Options for an overlay whose upper directory becomes an image layer: renamed directories
/// and changed metadata must be copied up whole, never recorded as redirects or metadata-only
/// copies that only overlayfs could read (kernels may turn either on by default).
pub const PLAIN_UPPER: &[&str] = &["redirect_dir=off", "metacopy=off"];

/// Mounts an overlay of `lowers` (bottom first, as images list them) with a private upper, and
/// more mount `options` if given (see [`PLAIN_UPPER`]).
pub fn mount_overlay(
    lowers: &[PathBuf],
    upper: &Path,
    work: &Path,
    target: &Path,
    options: &[&str],
) -> io::Result<()> {
    for p in lowers.iter().map(PathBuf::as_path).chain([upper, work]) {
        let s = p.to_string_lossy();
        if s.contains([':', ',']) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("overlay paths cannot contain `:` or `,`: {s}"),
            ));
        }
    }
    // overlayfs lists the topmost lower layer first.
    let lower = lowers
        .iter()
        .rev()
        .map(|p| p.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(":");
    let mut data = format!(
        "lowerdir={lower},upperdir={},workdir={}",
        upper.display(),
        work.display()
    );
    for o in options {
        data.push(',');
        data.push_str(o);
    }
    if data.len() > MAX_MOUNT_DATA {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} layers make the overlay options too long ({} bytes); use a shorter cache path or flatten the image",
                lowers.len(),
                data.len()
            ),
        ));
    }
    let src = CString::new("overlay").map_err(io::Error::other)?;
    let data = CString::new(data).map_err(io::Error::other)?;
    let t = cstr(target)?;
    // SAFETY: all pointers are valid NUL-terminated strings for the duration of the call.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            t.as_ptr(),
            src.as_ptr(),
            0,
            data.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub use super::dir::unmount_all;

/// Bind-mounts `source` (recursively) at `target`, an existing directory or file. `source` may
/// be a `/proc/self/fd/N` of a directory opened beneath its root (`crate::beneath`): the kernel
/// follows that link to the very directory, not to whatever its path names now.
pub fn bind_mount(source: &Path, target: &Path) -> io::Result<()> {
    let (s, t) = (cstr(source)?, cstr(target)?);
    // SAFETY: valid NUL-terminated paths; no filesystem type or data for a bind mount.
    let rc = unsafe {
        libc::mount(
            s.as_ptr(),
            t.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `path` is the root of a mount (bind mounts of the same filesystem included), from
/// statx: one system call, where reading /proc/self/mountinfo formats every mount of the
/// namespace. `None` when the kernel cannot tell (before Linux 5.8).
pub fn is_mount_root(path: &Path) -> io::Result<Option<bool>> {
    let c = cstr(path)?;
    // SAFETY: statx only writes the struct we pass; the path is NUL-terminated.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    let r = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            0,
            &mut st,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    let bit = libc::STATX_ATTR_MOUNT_ROOT as u64;
    Ok((st.stx_attributes_mask & bit != 0).then_some(st.stx_attributes & bit != 0))
}

/// Removes `dir` and everything below it, as `fs::remove_dir_all` does, but never crosses into
/// a mount: a directory that is a mount point is an error, and what is mounted there is left
/// alone (a container's `rootfs` would be the image's shared layers). Not there is success.
pub fn remove_tree(dir: &Path) -> io::Result<()> {
    let mounted = || io::Error::other(format!("{} is mounted", dir.display()));
    match is_mount_root(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
        Ok(Some(true)) => return Err(mounted()),
        Ok(Some(false)) => {}
        // An old kernel: ask the mount table instead.
        Ok(None) if !mounts_under(dir).is_empty() => return Err(mounted()),
        Ok(None) => {}
    }
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            remove_tree(&entry.path())?;
        } else {
            fs::remove_file(entry.path())?;
        }
    }
    fs::remove_dir(dir)
}

/// Mount points at or below `dir`, from /proc/self/mountinfo.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_mountinfo)
        .map(PathBuf::from)
        .filter(|p| p.starts_with(dir))
        .collect()
}

fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Cgroup hierarchy roots: every v1 controller mount plus the unified one (or just
/// /sys/fs/cgroup itself on a pure v2 host). Symlinked aliases (`cpu` -> `cpu,cpuacct`) are
/// skipped so each hierarchy is visited once.
fn cgroup_roots() -> Vec<PathBuf> {
    let base = Path::new("/sys/fs/cgroup");
    if base.join("cgroup.controllers").exists() {
        return vec![base.to_path_buf()];
    }
    let Ok(rd) = fs::read_dir(base) else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
}

/// Removes the container's own cgroup directories that runc leaves behind. Only its own: the
/// shared parents (`gantry/<agent>`) may look empty for a moment while runc is making the next
/// container under them, and removing them then fails that start ("mkdir ...: no such file").
pub fn remove_cgroups(parent: &str, id: &str) {
    let parent: std::path::PathBuf = parent.split('/').filter(|s| !s.is_empty()).collect();
    for root in cgroup_roots() {
        let _ = fs::remove_dir(root.join(&parent).join(id));
    }
}

/// Whether `path` is on a filesystem mounted `noexec`.
pub fn noexec(path: &Path) -> io::Result<bool> {
    let c = cstr(path)?;
    // SAFETY: statvfs only writes the struct we pass; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_flag & libc::ST_NOEXEC != 0)
}

/// A file descriptor that becomes readable when process `pid` ends; it works for processes
/// that are not our children (a shim is adopted by init), unlike `waitpid`.
pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments; a non-negative result is a new fd we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Waits until `fd` is readable (a pidfd: its process ended) or `timeout` passed; true if
/// readable.
pub fn wait_readable(fd: &OwnedFd, timeout: std::time::Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut pfd, 1, ms) > 0 }
}

/// Wakes when an entry is created in, or renamed into, one directory. Files written with a
/// rename (runc's pid file, the shim's `exit.json`) appear whole when it fires. Written here
/// over libc because it is two calls and a poll; a crate would bring an async layer we do
/// not need in this blocking code.
pub struct DirWatch(OwnedFd);

impl DirWatch {
    pub fn new(dir: &Path) -> io::Result<DirWatch> {
        // SAFETY: plain syscall; a non-negative result is a new fd we own.
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above.
        let watch = DirWatch(unsafe { OwnedFd::from_raw_fd(fd) });
        let d = cstr(dir)?;
        let mask = libc::IN_CREATE | libc::IN_MOVED_TO | libc::IN_CLOSE_WRITE;
        // SAFETY: valid fd and NUL-terminated path.
        if unsafe { libc::inotify_add_watch(fd, d.as_ptr(), mask) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(watch)
    }

    /// Waits until something happened in the directory or `timeout` passed, then forgets
    /// the events (the caller looks at the files themselves).
    pub fn wait(&self, timeout: std::time::Duration) {
        let fd = self.0.as_raw_fd();
        if wait_readable(&self.0, timeout) {
            let mut buf = [0u8; 4096];
            // SAFETY: reads into a buffer we own; non-blocking, so it stops when drained.
            while unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Needs root (bind mounts), as the runtime does.
    #[test]
    fn remove_tree_stops_at_a_mount_and_follows_no_link() {
        let tmp = tempfile::tempdir().unwrap();
        let shared = tmp.path().join("shared");
        fs::create_dir_all(shared.join("layer")).unwrap();
        fs::write(shared.join("layer/file"), "keep").unwrap();
        let dir = tmp.path().join("container");
        fs::create_dir_all(dir.join("upper/a/b")).unwrap();
        fs::write(dir.join("upper/a/b/f"), "x").unwrap();
        fs::write(dir.join("config.json"), "{}").unwrap();
        std::os::unix::fs::symlink(&shared, dir.join("upper/link")).unwrap();
        let rootfs = dir.join("rootfs");
        fs::create_dir(&rootfs).unwrap();
        let (src, dst) = (cstr(&shared).unwrap(), cstr(&rootfs).unwrap());
        // SAFETY: valid NUL-terminated paths; a plain bind mount.
        let r = unsafe {
            libc::mount(
                src.as_ptr(),
                dst.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            )
        };
        assert_eq!(r, 0, "{}", io::Error::last_os_error());
        assert_eq!(is_mount_root(&rootfs).unwrap(), Some(true));
        assert_eq!(is_mount_root(&dir).unwrap(), Some(false));

        let err = remove_tree(&dir).unwrap_err();
        assert!(err.to_string().contains("rootfs is mounted"), "{err}");
        assert_eq!(
            fs::read_to_string(shared.join("layer/file")).unwrap(),
            "keep"
        );

        unmount_all(&rootfs).unwrap();
        remove_tree(&dir).unwrap();
        assert!(!dir.exists());
        // The link went, not what it pointed at.
        assert_eq!(
            fs::read_to_string(shared.join("layer/file")).unwrap(),
            "keep"
        );
        remove_tree(&dir).unwrap();
    }

    #[test]
    fn pidfd_becomes_readable_when_the_process_ends() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .unwrap();
        let fd = pidfd_open(child.id() as i32).unwrap();
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        assert_eq!(
            unsafe { libc::poll(&mut pfd, 1, 0) },
            0,
            "readable while running"
        );
        // SAFETY: as above.
        assert_eq!(
            unsafe { libc::poll(&mut pfd, 1, 5000) },
            1,
            "never readable"
        );
        child.wait().unwrap();
    }

    #[test]
    fn dir_watch_wakes_on_a_rename_into_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let watch = DirWatch::new(dir.path()).unwrap();
        let tmp = dir.path().join(".x");
        fs::write(&tmp, b"1").unwrap();
        watch.wait(std::time::Duration::from_millis(1));
        let path = dir.path().join("x");
        let writer = {
            let path = path.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(100));
                fs::rename(tmp, path).unwrap();
            })
        };
        let begun = std::time::Instant::now();
        while !path.exists() {
            watch.wait(std::time::Duration::from_secs(10));
            assert!(begun.elapsed() < std::time::Duration::from_secs(10));
        }
        // Woken by the rename, not by the 10 s timeout.
        assert!(begun.elapsed() < std::time::Duration::from_secs(5));
        writer.join().unwrap();
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_mountinfo(r"/a\040b"), "/a b");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
    }
}
