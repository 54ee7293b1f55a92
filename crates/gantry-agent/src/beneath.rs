//! Paths from workflow input, resolved beneath their root. The agent runs as root, and a
//! workflow's containers can plant symlinks anywhere they can write (a volume, an image build's
//! tree) and rename directories between a check and a use; so every path that comes from a
//! workflow (a volume's directory under the storage root, a file written into a volume or an
//! image, a mount source, an `oci://` layout beneath its `--oci-root` and the files in it) is
//! opened here, one component at a time relative to an open directory, and then used through
//! the descriptor, never by its name again. Nothing else in the agent joins a path from
//! workflow input onto a host path.
//!
//! Two ways to resolve, both with `openat2` (Linux 5.6):
//! - [`Resolve::Beneath`] (volumes, the storage root, layouts): `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//!   RESOLVE_NO_MAGICLINKS`. A symlink anywhere on the way is an error ([`is_symlink_error`]),
//!   whatever it points at: a symlink in a volume means what it says only inside a container,
//!   where `/` is another directory.
//! - [`Resolve::InRoot`] (an image's tree, for a build's FILES step): `RESOLVE_IN_ROOT`, so the
//!   image's own symlinks (`/lib -> usr/lib`, even absolute ones) resolve as they would in the
//!   container, and never lead out of the root.
//!
//! A directory to mount is handed on as [`Dir::mount_source`], `/proc/<agent>/fd/<n>`: runc
//! (or the kernel, for the agent's own mounts) follows that magic link to the very directory
//! resolved here, wherever it has been renamed to since. The [`Dir`] must stay open until the
//! mount is made.

use std::ffi::{CString, OsStr};
use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// How symlinks on the way are treated (see the module's header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolve {
    Beneath,
    InRoot,
}

/// A relative path from workflow input: one or more plain components, no `..`, no `.`, no
/// root, no NUL. The only kind of path the functions here take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rel(PathBuf);

impl Rel {
    /// A path relative to a root (`ephemeral/<workflow>/<volume>`).
    pub fn new(rel: impl AsRef<Path>) -> Result<Rel, String> {
        let p = rel.as_ref();
        if p.is_absolute() {
            return Err(format!("{} is not a relative path", p.display()));
        }
        Self::components(p)
    }

    /// An absolute path in a container (`/opt/app/x.txt`), relative to the container's `/`.
    pub fn container(target: &str) -> Result<Rel, String> {
        let p = Path::new(target);
        if !p.is_absolute() {
            return Err(format!("`{target}` is not an absolute path"));
        }
        Self::components(p).map_err(|e| format!("`{target}`: {e}"))
    }

    fn components(p: &Path) -> Result<Rel, String> {
        let mut rel = PathBuf::new();
        for c in p.components() {
            match c {
                Component::RootDir | Component::CurDir => {}
                Component::Normal(n) if !n.as_bytes().contains(&0) => rel.push(n),
                Component::Normal(_) => return Err("a path may not contain NUL".into()),
                Component::ParentDir | Component::Prefix(_) => {
                    return Err("a path may not contain `..`".into())
                }
            }
        }
        if rel.as_os_str().is_empty() {
            return Err("the path names nothing below its root".into());
        }
        Ok(Rel(rel))
    }

    pub fn as_path(&self) -> &Path {
        &self.0
    }

    /// The part of `self` below `prefix`, if `self` lies strictly below it.
    pub fn below(&self, prefix: &Rel) -> Option<Rel> {
        let rest = self.0.strip_prefix(&prefix.0).ok()?;
        (!rest.as_os_str().is_empty()).then(|| Rel(rest.to_path_buf()))
    }

    fn split(&self) -> (Option<&Path>, &OsStr) {
        let name = self.0.file_name().unwrap_or_default();
        let parent = self.0.parent().filter(|p| !p.as_os_str().is_empty());
        (parent, name)
    }
}

impl std::fmt::Display for Rel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.display().fmt(f)
    }
}

/// Whether an error from here means a symlink was in the way under [`Resolve::Beneath`] (or a
/// path tried to leave its root), rather than something missing or a failure of the disk.
pub fn is_symlink_error(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::EXDEV))
}

/// An open directory (`O_PATH`): a root to resolve beneath, or what was resolved.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
}

/// Owner and mode of what [`Dir::create_dirs`] and [`Dir::write_file`] make.
#[derive(Debug, Clone, Copy)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

impl Owner {
    pub const ROOT: Owner = Owner { uid: 0, gid: 0 };
}

fn cstr(p: &OsStr) -> io::Result<CString> {
    CString::new(p.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

/// `struct open_how` of linux/openat2.h.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;
const RESOLVE_IN_ROOT: u64 = 0x10;

fn openat2(dir: BorrowedFd<'_>, rel: &Path, flags: i32, how: Resolve) -> io::Result<OwnedFd> {
    let c = cstr(rel.as_os_str())?;
    let resolve = match how {
        Resolve::Beneath => RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        Resolve::InRoot => RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    };
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve,
    };
    loop {
        // SAFETY: a valid dirfd, a NUL-terminated path and a struct of the size passed.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                c.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if fd >= 0 {
            // SAFETY: a new fd owned by nothing else.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) });
        }
        let e = io::Error::last_os_error();
        // The kernel asks for a retry when a rename raced the lookup.
        if e.raw_os_error() != Some(libc::EAGAIN) {
            return Err(e);
        }
    }
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl Dir {
    /// Opens a root: a path of the host that an administrator or the agent chose (the storage
    /// root, a container's overlay), not one from a workflow.
    pub fn open_root(path: &Path) -> io::Result<Dir> {
        let c = cstr(path.as_os_str())?;
        // SAFETY: a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        check(fd)?;
        // SAFETY: a new fd owned by nothing else.
        Ok(Dir {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// The existing directory `rel` beneath this one.
    pub fn open_dir(&self, rel: &Rel, how: Resolve) -> io::Result<Dir> {
        self.open_dir_path(rel.as_path(), how)
    }

    fn open_dir_path(&self, rel: &Path, how: Resolve) -> io::Result<Dir> {
        Ok(Dir {
            fd: openat2(self.fd.as_fd(), rel, libc::O_PATH | libc::O_DIRECTORY, how)?,
        })
    }

    /// The regular file `rel` beneath this directory, opened read-only. Non-blocking, so that
    /// a FIFO put in its place cannot hang the agent (reads of a regular file do not block
    /// anyway), and refused unless it is a plain file.
    pub fn open_file(&self, rel: &Rel, how: Resolve) -> io::Result<fs::File> {
        let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY;
        let file = fs::File::from(openat2(self.fd.as_fd(), rel.as_path(), flags, how)?);
        if !file.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{rel} is not a regular file"),
            ));
        }
        Ok(file)
    }

    /// The directory `rel` beneath this one, made (with `mode`, owned by `owner`) where it is
    /// missing, as `mkdir -p` would; existing directories are left as they are.
    pub fn create_dirs(&self, rel: &Rel, how: Resolve, mode: u32, owner: Owner) -> io::Result<Dir> {
        self.create_dirs_path(rel.as_path(), how, mode, owner)
    }

    fn create_dirs_path(
        &self,
        rel: &Path,
        how: Resolve,
        mode: u32,
        owner: Owner,
    ) -> io::Result<Dir> {
        let mut dir = Dir {
            fd: self.fd.try_clone()?,
        };
        let mut prefix = PathBuf::new();
        for c in rel.components() {
            let Component::Normal(part) = c else { continue };
            prefix.push(part);
            // Under InRoot the whole prefix resolves from the root each time, so an image's
            // absolute symlinks mean what they mean in the container; under Beneath one
            // component at a time from the directory before is the same walk.
            let (from, what) = match how {
                Resolve::InRoot => (self, prefix.as_path()),
                Resolve::Beneath => (&dir, Path::new(part)),
            };
            match from.open_dir_path(what, how) {
                Ok(d) => dir = d,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    let cpart = cstr(part)?;
                    // SAFETY: a valid dirfd and a NUL-terminated name.
                    let made = unsafe { libc::mkdirat(dir.fd.as_raw_fd(), cpart.as_ptr(), 0o700) };
                    if made == 0 {
                        // SAFETY: as above; never follows a symlink that replaced it.
                        unsafe {
                            check(libc::fchownat(
                                dir.fd.as_raw_fd(),
                                cpart.as_ptr(),
                                owner.uid,
                                owner.gid,
                                libc::AT_SYMLINK_NOFOLLOW,
                            ))?;
                        }
                    } else if io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
                        return Err(io::Error::last_os_error());
                    }
                    let d = from.open_dir_path(what, how)?;
                    if made == 0 {
                        // Made 0700 and then given its mode, so it is never open to others
                        // with the wrong owner; the umask does not apply to fchmod.
                        d.chmod(mode)?;
                    }
                    dir = d;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(dir)
    }

    /// The mode of this directory itself.
    fn chmod(&self, mode: u32) -> io::Result<()> {
        // fchmod refuses O_PATH descriptors; the magic link of our own fd names this very
        // inode.
        let p = cstr(self.proc_path().as_os_str())?;
        // SAFETY: a NUL-terminated path.
        check(unsafe { libc::chmod(p.as_ptr(), (mode & 0o7777) as libc::mode_t) })
    }

    /// Writes `content` at `rel` beneath this directory with `mode` (set-id and sticky bits
    /// included) and `owner`, making missing parent directories (0755, the same owner). The
    /// file is written under a temporary name and renamed over the target, so whatever was
    /// there (a file, a symlink, a device) is replaced and never written through; a directory
    /// there is an error.
    pub fn write_file(
        &self,
        rel: &Rel,
        content: &[u8],
        mode: u32,
        owner: Owner,
        how: Resolve,
    ) -> io::Result<()> {
        let mut staged = self.stage_file(rel, how, owner)?;
        staged.file().write_all(content)?;
        staged.commit(mode)
    }

    /// A file to be written at `rel` beneath this directory, as [`Dir::write_file`] does but
    /// in pieces (a download): written through [`Staged::file`] under a temporary name in the
    /// resolved parent, put in place by [`Staged::commit`], removed if dropped uncommitted.
    pub fn stage_file(&self, rel: &Rel, how: Resolve, owner: Owner) -> io::Result<Staged> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let (parent, name) = rel.split();
        let parent = match parent {
            Some(p) => self.create_dirs_path(p, how, 0o755, owner)?,
            None => Dir {
                fd: self.fd.try_clone()?,
            },
        };
        let name = cstr(name)?;
        let tmp = cstr(OsStr::new(&format!(
            ".gantry-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        )))?;
        // O_PATH descriptors cannot be written through: open the parent for real.
        let pfd = openat2(parent.fd.as_fd(), Path::new("."), libc::O_DIRECTORY, how)?;
        let flags =
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a valid dirfd and a NUL-terminated name.
        let fd = unsafe { libc::openat(pfd.as_raw_fd(), tmp.as_ptr(), flags, 0o600) };
        check(fd)?;
        Ok(Staged {
            // SAFETY: a new fd owned by nothing else.
            file: Some(fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) })),
            pfd,
            tmp,
            name,
            owner,
            rel: rel.clone(),
            committed: false,
        })
    }

    /// Removes `rel` beneath this directory and everything below it, never following a symlink
    /// (one at `rel` itself is removed, not what it points at). Not there is success.
    pub fn remove_all(&self, rel: &Rel) -> io::Result<()> {
        let (parent, name) = rel.split();
        let parent = match parent {
            Some(p) => match self.open_dir_path(p, Resolve::Beneath) {
                Ok(d) => d,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
                Err(e) => return Err(e),
            },
            None => Dir {
                fd: self.fd.try_clone()?,
            },
        };
        // The standard library's removal opens each level relative to the one before and
        // never follows symlinks; reaching the parent through our descriptor's magic link
        // keeps the walk on the directory resolved above.
        match fs::remove_dir_all(parent.proc_path().join(name)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                fs::remove_file(parent.proc_path().join(name))
            }
            r => r,
        }
    }

    /// `/proc/self/fd/<n>`: this directory, for calls of this process that take a path.
    pub fn proc_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }

    /// `/proc/<agent pid>/fd/<n>`: this directory as a mount source for another process (runc),
    /// valid while this `Dir` is open.
    pub fn mount_source(&self) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            self.fd.as_raw_fd()
        ))
    }
}

/// A file being written beneath a [`Dir`] ([`Dir::stage_file`]).
#[derive(Debug)]
pub struct Staged {
    file: Option<fs::File>,
    pfd: OwnedFd,
    tmp: CString,
    name: CString,
    owner: Owner,
    rel: Rel,
    committed: bool,
}

impl Staged {
    /// The temporary file, to write the content through.
    pub fn file(&mut self) -> &mut fs::File {
        self.file
            .as_mut()
            .expect("a staged file is open until commit")
    }

    /// Gives the file its owner and `mode` and renames it over `rel`.
    pub fn commit(mut self, mode: u32) -> io::Result<()> {
        let file = self.file.take().expect("committed once");
        let done = (|| {
            // SAFETY: a valid fd; ownership first, since chown clears set-id bits.
            unsafe {
                check(libc::fchown(
                    file.as_raw_fd(),
                    self.owner.uid,
                    self.owner.gid,
                ))?;
                check(libc::fchmod(
                    file.as_raw_fd(),
                    (mode & 0o7777) as libc::mode_t,
                ))?;
            }
            drop(file);
            // SAFETY: valid dirfds and NUL-terminated names.
            check(unsafe {
                libc::renameat(
                    self.pfd.as_raw_fd(),
                    self.tmp.as_ptr(),
                    self.pfd.as_raw_fd(),
                    self.name.as_ptr(),
                )
            })
        })();
        self.committed = done.is_ok();
        done.map_err(|e| match e.raw_os_error() {
            Some(libc::EISDIR) | Some(libc::ENOTEMPTY) | Some(libc::EEXIST) => io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("/{} is a directory", self.rel),
            ),
            _ => e,
        })
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            // SAFETY: a valid dirfd and a NUL-terminated name.
            unsafe { libc::unlinkat(self.pfd.as_raw_fd(), self.tmp.as_ptr(), 0) };
        }
    }
}

impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, MetadataExt};

    fn scratch() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    fn rel(s: &str) -> Rel {
        Rel::new(s).unwrap()
    }

    #[test]
    fn relative_paths_have_only_plain_components() {
        assert_eq!(rel("a/./b").as_path(), Path::new("a/b"));
        for bad in ["", ".", "/etc", "a/../b", "..", "a/\0b"] {
            assert!(Rel::new(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            Rel::container("/opt/app/x.txt").unwrap().as_path(),
            Path::new("opt/app/x.txt")
        );
        for bad in ["rel/x", "/", "/a/../../etc/passwd"] {
            assert!(Rel::container(bad).is_err(), "{bad:?}");
        }
        let data = Rel::container("/data").unwrap();
        assert_eq!(
            Rel::container("/data/a/b").unwrap().below(&data),
            Some(rel("a/b"))
        );
        assert_eq!(Rel::container("/data").unwrap().below(&data), None);
        assert_eq!(Rel::container("/database").unwrap().below(&data), None);
    }

    #[test]
    fn symlinks_beneath_a_root_are_refused_and_nothing_is_written_outside() {
        let t = scratch();
        let d = t.path();
        let (root, host) = (d.join("volume"), d.join("host"));
        fs::create_dir_all(root.join("sub")).unwrap();
        fs::create_dir_all(&host).unwrap();
        fs::write(host.join("f"), b"host's").unwrap();
        symlink(&host, root.join("dirlink")).unwrap();
        symlink("../host", root.join("rellink")).unwrap();
        symlink(host.join("f"), root.join("filelink")).unwrap();
        let r = Dir::open_root(&root).unwrap();
        for target in ["dirlink/x", "rellink/x", "dirlink/new/x"] {
            let e = r
                .write_file(&rel(target), b"evil", 0o644, Owner::ROOT, Resolve::Beneath)
                .unwrap_err();
            assert!(is_symlink_error(&e), "{target}: {e}");
            let e = r
                .create_dirs(&rel(target), Resolve::Beneath, 0o755, Owner::ROOT)
                .unwrap_err();
            assert!(is_symlink_error(&e), "{target}: {e}");
        }
        assert!(r.open_dir(&rel("dirlink"), Resolve::Beneath).is_err());
        // A symlink at the file itself is replaced, not written through.
        r.write_file(
            &rel("filelink"),
            b"mine",
            0o640,
            Owner::ROOT,
            Resolve::Beneath,
        )
        .unwrap();
        assert_eq!(fs::read(host.join("f")).unwrap(), b"host's");
        let md = fs::symlink_metadata(root.join("filelink")).unwrap();
        assert!(md.is_file());
        assert_eq!(md.mode() & 0o7777, 0o640);
        assert_eq!(fs::read_dir(&host).unwrap().count(), 1);
        // The legitimate use: directories made with their modes, files in them.
        r.write_file(
            &rel("sub/a/b/c.txt"),
            b"ok",
            0o600,
            Owner::ROOT,
            Resolve::Beneath,
        )
        .unwrap();
        assert_eq!(fs::read(root.join("sub/a/b/c.txt")).unwrap(), b"ok");
        assert_eq!(
            fs::metadata(root.join("sub/a")).unwrap().mode() & 0o7777,
            0o755
        );
        let v = r
            .create_dirs(&rel("x/y"), Resolve::Beneath, 0o1777, Owner::ROOT)
            .unwrap();
        assert_eq!(
            fs::metadata(root.join("x/y")).unwrap().mode() & 0o7777,
            0o1777
        );
        assert_eq!(
            fs::canonicalize(v.proc_path()).unwrap(),
            fs::canonicalize(root.join("x/y")).unwrap()
        );
        // A directory at the target stays.
        assert!(r
            .write_file(&rel("sub"), b"", 0o644, Owner::ROOT, Resolve::Beneath)
            .is_err());
        assert!(root.join("sub/a/b/c.txt").exists());
    }

    #[test]
    fn only_regular_files_beneath_are_opened_and_a_fifo_does_not_block() {
        let t = scratch();
        let d = t.path();
        let (root, host) = (d.join("layout"), d.join("host"));
        fs::create_dir_all(root.join("blobs")).unwrap();
        fs::create_dir_all(&host).unwrap();
        fs::write(host.join("secret"), b"host's").unwrap();
        fs::write(root.join("blobs/a"), b"blob").unwrap();
        symlink(host.join("secret"), root.join("blobs/link")).unwrap();
        symlink(&host, root.join("hostdir")).unwrap();
        let fifo = cstr(root.join("blobs/fifo").as_os_str()).unwrap();
        // SAFETY: a NUL-terminated path.
        check(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }).unwrap();
        let r = Dir::open_root(&root).unwrap();
        // Opening a FIFO without O_NONBLOCK would wait here for a writer for ever.
        for (bad, symlinked) in [
            ("blobs/fifo", false),
            ("blobs", false),
            ("blobs/link", true),
            ("hostdir/secret", true),
        ] {
            let e = r.open_file(&rel(bad), Resolve::Beneath).unwrap_err();
            assert_eq!(is_symlink_error(&e), symlinked, "{bad}: {e}");
        }
        let mut content = String::new();
        io::Read::read_to_string(
            &mut r.open_file(&rel("blobs/a"), Resolve::Beneath).unwrap(),
            &mut content,
        )
        .unwrap();
        assert_eq!(content, "blob");
    }

    #[test]
    fn a_resolved_directory_stays_itself_when_renamed_and_replaced_by_a_symlink() {
        let t = scratch();
        let d = t.path();
        let (root, host) = (d.join("volume"), d.join("host"));
        fs::create_dir_all(root.join("data")).unwrap();
        fs::create_dir_all(&host).unwrap();
        let r = Dir::open_root(&root).unwrap();
        let held = r.open_dir(&rel("data"), Resolve::Beneath).unwrap();
        // What a container could do between the resolution and the mount.
        fs::rename(root.join("data"), root.join("moved")).unwrap();
        symlink(&host, root.join("data")).unwrap();
        assert_eq!(
            fs::canonicalize(held.mount_source()).unwrap(),
            fs::canonicalize(root.join("moved")).unwrap()
        );
    }

    #[test]
    fn removal_never_follows_symlinks() {
        let t = scratch();
        let d = t.path();
        let (root, host) = (d.join("storage"), d.join("host"));
        fs::create_dir_all(root.join("wf/vol/deep")).unwrap();
        fs::create_dir_all(&host).unwrap();
        fs::write(host.join("keep"), b"").unwrap();
        symlink(&host, root.join("wf/vol/deep/link")).unwrap();
        symlink(&host, root.join("wf/hostlink")).unwrap();
        let r = Dir::open_root(&root).unwrap();
        assert!(r.remove_all(&rel("wf/hostlink/keep")).is_err());
        r.remove_all(&rel("wf/vol")).unwrap();
        assert!(!root.join("wf/vol").exists());
        r.remove_all(&rel("wf/hostlink")).unwrap();
        assert!(host.join("keep").exists());
        assert!(!root.join("wf/hostlink").exists());
        r.remove_all(&rel("wf/never/was")).unwrap();
    }

    #[test]
    fn in_root_follows_an_images_own_symlinks_inside_it() {
        let t = scratch();
        let d = t.path();
        let (root, outside) = (d.join("root"), d.join("outside"));
        fs::create_dir_all(root.join("usr/lib")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        // An absolute link: on the host it would lead to `outside`.
        symlink(&outside, root.join("escape")).unwrap();
        symlink("/usr/lib", root.join("lib")).unwrap();
        let r = Dir::open_root(&root).unwrap();
        let w = |p: &str| r.write_file(&rel(p), b"so", 0o755, Owner::ROOT, Resolve::InRoot);
        w("lib/x.so").unwrap();
        assert_eq!(fs::read(root.join("usr/lib/x.so")).unwrap(), b"so");
        // The absolute link resolves inside the root, where it dangles: refused, and nothing
        // is written on the host; once it leads somewhere in the root, the file goes there.
        assert!(w("escape/evil").is_err());
        assert!(!outside.join("evil").exists());
        let inside = root.join(outside.strip_prefix("/").unwrap());
        fs::create_dir_all(&inside).unwrap();
        w("escape/evil").unwrap();
        assert!(!outside.join("evil").exists());
        assert_eq!(fs::read(inside.join("evil")).unwrap(), b"so");
    }
}
