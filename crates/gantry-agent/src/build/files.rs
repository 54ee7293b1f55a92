//! A FILES step: files written into the image through its overlay, no container needed.
//!
//! Paths are resolved inside the image's root (`openat2` with `RESOLVE_IN_ROOT`): an image's
//! symlinks (`/lib -> usr/lib`, even absolute ones) are followed as they would be in a
//! container, and never lead out to the host's files.

use std::ffi::CString;
use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Checks a file's target: absolute, no `..`, not `/` itself. Returns it relative to `/`.
pub fn target_path(target: &str) -> Result<PathBuf, String> {
    let p = Path::new(target);
    if !p.is_absolute() {
        return Err(format!("file target `{target}` is not absolute"));
    }
    let mut rel = PathBuf::new();
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => rel.push(n),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(format!("file target `{target}` may not contain `..`"))
            }
        }
    }
    if rel.as_os_str().is_empty() {
        return Err(format!("file target `{target}` names no file"));
    }
    Ok(rel)
}

/// Writes `content` at `rel` under the root `root` (a mounted overlay) with `mode` (permission
/// bits, set-id and sticky bits included) and owner `uid:gid`. Missing parent directories are
/// made (0755, the same owner). An existing file or symlink at the target is replaced; a
/// directory there is an error.
pub fn write_file(
    root: &Path,
    rel: &Path,
    content: &[u8],
    mode: u32,
    uid: u32,
    gid: u32,
) -> io::Result<()> {
    let rootfd = open_path(root)?;
    let name = rel
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let parent = mkdir_all(&rootfd, rel.parent().unwrap_or(Path::new("")), uid, gid)?;
    let cname = CString::new(name.as_bytes()).map_err(io::Error::other)?;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let fd = loop {
        // SAFETY: valid dirfd and NUL-terminated name.
        let fd = unsafe { libc::openat(parent.as_raw_fd(), cname.as_ptr(), flags, 0o600) };
        if fd >= 0 {
            // SAFETY: a new fd owned by nothing else.
            break unsafe { OwnedFd::from_raw_fd(fd) };
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // A symlink (ELOOP with O_NOFOLLOW) or a special file in the way: replace it.
            Some(libc::ELOOP) | Some(libc::ENXIO) | Some(libc::ETXTBSY) => {
                // SAFETY: valid dirfd and name.
                if unsafe { libc::unlinkat(parent.as_raw_fd(), cname.as_ptr(), 0) } != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Some(libc::EISDIR) => {
                return Err(io::Error::new(
                    io::ErrorKind::IsADirectory,
                    format!("/{} is a directory in the image", rel.display()),
                ))
            }
            _ => return Err(e),
        }
    };
    let mut file = fs::File::from(fd);
    file.write_all(content)?;
    // SAFETY: a valid fd; ownership first, since chown clears set-id bits.
    unsafe {
        if libc::fchown(file.as_raw_fd(), uid, gid) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::fchmod(file.as_raw_fd(), (mode & 0o7777) as libc::mode_t) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Opens (making what is missing) the directory `rel` inside `root`, resolved in the root.
fn mkdir_all(root: &OwnedFd, rel: &Path, uid: u32, gid: u32) -> io::Result<OwnedFd> {
    let mut dir = dup(root)?;
    let mut prefix = PathBuf::new();
    for c in rel.components() {
        let Component::Normal(part) = c else { continue };
        prefix.push(part);
        match open_in_root(root, &prefix) {
            Ok(fd) => dir = fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                let cpart = CString::new(part.as_bytes()).map_err(io::Error::other)?;
                // SAFETY: valid dirfd and name.
                unsafe {
                    if libc::mkdirat(dir.as_raw_fd(), cpart.as_ptr(), 0o755) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    if libc::fchownat(
                        dir.as_raw_fd(),
                        cpart.as_ptr(),
                        uid,
                        gid,
                        libc::AT_SYMLINK_NOFOLLOW,
                    ) != 0
                    {
                        return Err(io::Error::last_os_error());
                    }
                    // The umask may have taken bits off.
                    if libc::fchmodat(dir.as_raw_fd(), cpart.as_ptr(), 0o755, 0) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                dir = open_in_root(root, &prefix)?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(dir)
}

/// `struct open_how` of linux/openat2.h.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_IN_ROOT: u64 = 0x10;

/// `openat2(root, rel, O_PATH|O_DIRECTORY, RESOLVE_IN_ROOT)`: symlinks resolve inside root.
fn open_in_root(root: &OwnedFd, rel: &Path) -> io::Result<OwnedFd> {
    let c = CString::new(rel.as_os_str().as_bytes()).map_err(io::Error::other)?;
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: valid dirfd, path and struct of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn open_path(p: &Path) -> io::Result<OwnedFd> {
    let c = CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: valid path.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn dup(fd: &OwnedFd) -> io::Result<OwnedFd> {
    fd.try_clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn targets_must_be_absolute_and_stay_in_the_image() {
        assert_eq!(
            target_path("/opt/app/x.txt").unwrap(),
            PathBuf::from("opt/app/x.txt")
        );
        assert!(target_path("rel/x").is_err());
        assert!(target_path("/a/../../etc/passwd").is_err());
        assert!(target_path("/").is_err());
    }

    #[test]
    fn files_land_in_the_root_even_through_absolute_symlinks() {
        let d = std::env::temp_dir().join(format!(
            "gantry-files-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let root = d.join("root");
        let outside = d.join("outside");
        fs::create_dir_all(root.join("usr/lib")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        // An absolute link: on the host it would lead to `outside`.
        std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
        std::os::unix::fs::symlink("/usr/lib", root.join("lib")).unwrap();
        write_file(&root, Path::new("lib/x.so"), b"so", 0o755, 0, 0).unwrap();
        assert_eq!(fs::read(root.join("usr/lib/x.so")).unwrap(), b"so");
        // Dangling inside the image: refused, and nothing written on the host.
        assert!(write_file(&root, Path::new("escape/evil"), b"no", 0o644, 0, 0).is_err());
        let inside = root.join(outside.strip_prefix("/").unwrap());
        fs::create_dir_all(&inside).unwrap();
        write_file(&root, Path::new("escape/evil"), b"no", 0o644, 0, 0).unwrap();
        assert!(!outside.join("evil").exists());
        assert_eq!(fs::read(inside.join("evil")).unwrap(), b"no");
        // Parents made, modes exact, a symlink at the target replaced.
        std::os::unix::fs::symlink("/etc/passwd", root.join("link")).unwrap();
        write_file(&root, Path::new("link"), b"plain", 0o4750, 0, 0).unwrap();
        let md = fs::symlink_metadata(root.join("link")).unwrap();
        assert!(md.is_file());
        assert_eq!(md.mode() & 0o7777, 0o4750);
        write_file(&root, Path::new("a/b/c"), b"", 0o600, 0, 0).unwrap();
        assert_eq!(
            fs::metadata(root.join("a/b")).unwrap().mode() & 0o777,
            0o755
        );
        assert!(write_file(&root, Path::new("usr"), b"", 0o600, 0, 0).is_err());
        fs::remove_dir_all(d).unwrap();
    }
}
