//! Thin wrappers over the few Linux calls the runtime needs: mounts and cgroup directories.

use std::ffi::CString;
use std::fs;
use std::io;
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

/// Detaches every mount stacked on `target`. Not mounted is success.
pub fn unmount_all(target: &Path) -> io::Result<()> {
    let t = cstr(target)?;
    loop {
        // SAFETY: valid NUL-terminated path.
        if unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) } == 0 {
            continue;
        }
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EINVAL) | Some(libc::ENOENT) => Ok(()),
            _ => Err(e),
        };
    }
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

/// Removes `<root>/<parent>/<id>` in every hierarchy, then each parent that is left empty.
/// A cgroup directory with live processes cannot be removed (EBUSY) and is left alone.
/// Removes the container's own cgroup directories that runc leaves behind. Only its own: the
/// shared parents (`gantry/<agent>`) may look empty for a moment while runc is making the next
/// container under them, and removing them then fails that start ("mkdir ...: no such file").
pub fn remove_cgroups(parent: &str, id: &str) {
    let parent: std::path::PathBuf = parent.split('/').filter(|s| !s.is_empty()).collect();
    for root in cgroup_roots() {
        let _ = fs::remove_dir(root.join(&parent).join(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_mountinfo(r"/a\040b"), "/a b");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
    }
}
