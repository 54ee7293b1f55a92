//! Unpacks one OCI layer blob into a directory that overlayfs can use as a lowerdir.
//!
//! OCI layers express deletions with marker files (`.wh.NAME`, `.wh..wh..opq`); overlayfs
//! expresses them with a 0:0 character device and the `trusted.overlay.opaque` xattr. Converting
//! once, at unpack time, is what lets every container stack the cached layers without copying.

use std::ffi::CString;
use std::fs;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use filetime::FileTime;

const WHITEOUT_PREFIX: &str = ".wh.";
const OPAQUE_MARKER: &str = ".wh..wh..opq";

/// Why a layer could not be unpacked. The message names the entry.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("layer entry `{path}` is unsafe: {reason}")]
    Unsafe { path: String, reason: &'static str },
    #[error("layer entry `{path}`: {source}")]
    Entry { path: String, source: io::Error },
    #[error("reading layer: {0}")]
    Read(#[source] io::Error),
}

fn entry_err(path: &Path) -> impl FnOnce(io::Error) -> UnpackError + '_ {
    move |source| UnpackError::Entry {
        path: path.display().to_string(),
        source,
    }
}

/// Opens a layer blob, picking the decompressor from its magic bytes rather than the media
/// type: registries and tools disagree on media types far more often than on content.
fn open_layer(blob: &Path) -> io::Result<Box<dyn Read>> {
    let mut f = fs::File::open(blob)?;
    let mut magic = [0u8; 4];
    let n = read_up_to(&mut f, &mut magic)?;
    f.seek(SeekFrom::Start(0))?;
    let magic = &magic[..n];
    Ok(if magic.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::MultiGzDecoder::new(BufReader::new(f)))
    } else if magic == [0x28, 0xb5, 0x2f, 0xfd] {
        Box::new(zstd::stream::read::Decoder::new(f)?)
    } else {
        Box::new(BufReader::new(f))
    })
}

fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Unpacks `blob` (gzip, zstd or plain tar) into `dest`, which must be an empty directory.
pub fn unpack_layer(blob: &Path, dest: &Path) -> Result<(), UnpackError> {
    let reader = open_layer(blob).map_err(UnpackError::Read)?;
    unpack_tar(reader, dest)
}

/// The tar half of [`unpack_layer`], separate so tests can feed crafted archives.
pub fn unpack_tar(reader: impl Read, dest: &Path) -> Result<(), UnpackError> {
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(true);
    archive.set_preserve_ownerships(true);
    archive.set_preserve_mtime(true);
    archive.set_overwrite(true);
    // Directory mtimes change as their children land; they are put back at the end.
    let mut dir_times: Vec<(PathBuf, FileTime)> = Vec::new();

    for entry in archive.entries().map_err(UnpackError::Read)? {
        let mut entry = entry.map_err(UnpackError::Read)?;
        let raw = entry.path().map_err(UnpackError::Read)?.into_owned();
        let rel = safe_relative(&raw)?;
        let header = entry.header();
        let kind = header.entry_type();
        let mtime = header
            .mtime()
            .ok()
            .map(|t| FileTime::from_unix_time(t as i64, 0));

        if rel.as_os_str().is_empty() {
            // `./` itself: its mode and owner are those of the image's `/`.
            if kind.is_dir() {
                apply_owner_mode(dest, header).map_err(entry_err(&raw))?;
                if let Some(t) = mtime {
                    dir_times.push((dest.to_path_buf(), t));
                }
            }
            continue;
        }

        let name = rel
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let parent_rel = rel.parent().unwrap_or(Path::new(""));

        if name == OPAQUE_MARKER {
            let dir = ensure_dir(dest, parent_rel).map_err(entry_err(&raw))?;
            set_xattr(&dir, "trusted.overlay.opaque", b"y").map_err(entry_err(&raw))?;
            continue;
        }
        if let Some(hidden) = name.strip_prefix(WHITEOUT_PREFIX) {
            if hidden.starts_with(WHITEOUT_PREFIX) || hidden.is_empty() {
                // Other AUFS metadata (`.wh..wh.plnk` ...) has no overlayfs meaning.
                continue;
            }
            let dir = ensure_dir(dest, parent_rel).map_err(entry_err(&raw))?;
            let target = dir.join(hidden);
            remove_existing(&target).map_err(entry_err(&raw))?;
            mknod(&target, libc::S_IFCHR, 0).map_err(entry_err(&raw))?;
            continue;
        }

        if kind.is_character_special() || kind.is_block_special() || kind.is_fifo() {
            // The tar crate would write these as empty regular files.
            let dir = ensure_dir(dest, parent_rel).map_err(entry_err(&raw))?;
            let target = dir.join(&name);
            let fmt = if kind.is_character_special() {
                libc::S_IFCHR
            } else if kind.is_block_special() {
                libc::S_IFBLK
            } else {
                libc::S_IFIFO
            };
            let major = header.device_major().ok().flatten().unwrap_or(0);
            let minor = header.device_minor().ok().flatten().unwrap_or(0);
            remove_existing(&target).map_err(entry_err(&raw))?;
            mknod(&target, fmt, libc::makedev(major, minor)).map_err(entry_err(&raw))?;
            apply_owner_mode(&target, header).map_err(entry_err(&raw))?;
            continue;
        }

        let xattrs = layer_xattrs(&mut entry);
        // `unpack_in` refuses to write through symlinks that leave `dest`, and checks that
        // hard link targets stay inside it.
        let unpacked = entry.unpack_in(dest).map_err(entry_err(&raw))?;
        if !unpacked {
            return Err(UnpackError::Unsafe {
                path: raw.display().to_string(),
                reason: "it would land outside the layer",
            });
        }
        let target = dest.join(&rel);
        if !kind.is_symlink() {
            for (key, value) in xattrs {
                set_xattr(&target, &key, &value).map_err(entry_err(&raw))?;
            }
        }
        if kind.is_dir() {
            if let Some(t) = mtime {
                dir_times.push((target, t));
            }
        }
    }

    for (dir, t) in dir_times.iter().rev() {
        filetime::set_symlink_file_times(dir, t.to_owned(), t.to_owned())
            .map_err(entry_err(dir))?;
    }
    Ok(())
}

/// The entry's path relative to the layer root. Leading `./` is fine; `..` and absolute paths
/// are refused outright (the tar crate would silently skip or re-root them).
fn safe_relative(raw: &Path) -> Result<PathBuf, UnpackError> {
    let mut out = PathBuf::new();
    for c in raw.components() {
        match c {
            Component::CurDir => {}
            Component::Normal(p) => out.push(p),
            Component::ParentDir => {
                return Err(UnpackError::Unsafe {
                    path: raw.display().to_string(),
                    reason: "it contains `..`",
                })
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(UnpackError::Unsafe {
                    path: raw.display().to_string(),
                    reason: "it is absolute",
                })
            }
        }
    }
    Ok(out)
}

/// Creates `rel` below `root` one component at a time, refusing to pass through anything but
/// real directories, so a marker can never be placed outside the layer via a symlink.
fn ensure_dir(root: &Path, rel: &Path) -> io::Result<PathBuf> {
    let mut cur = root.to_path_buf();
    for c in rel.components() {
        let Component::Normal(part) = c else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "unexpected path component",
            ));
        };
        cur.push(part);
        match fs::symlink_metadata(&cur) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("`{}` is not a directory", cur.display()),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir(&cur)?;
                fs::set_permissions(&cur, fs::Permissions::from_mode(0o755))?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(cur)
}

fn remove_existing(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn cstr(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

fn mknod(path: &Path, fmt: libc::mode_t, dev: libc::dev_t) -> io::Result<()> {
    let p = cstr(path)?;
    // SAFETY: `p` is a valid NUL-terminated path.
    if unsafe { libc::mknod(p.as_ptr(), fmt, dev) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn set_xattr(path: &Path, key: &str, value: &[u8]) -> io::Result<()> {
    let p = cstr(path)?;
    let k = CString::new(key).map_err(|_| io::Error::other("xattr name contains NUL"))?;
    // SAFETY: pointers are valid for the given lengths; lsetxattr does not follow symlinks.
    let rc = unsafe {
        libc::lsetxattr(
            p.as_ptr(),
            k.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn apply_owner_mode(path: &Path, header: &tar::Header) -> io::Result<()> {
    let p = cstr(path)?;
    let uid = header.uid()? as libc::uid_t;
    let gid = header.gid()? as libc::gid_t;
    // SAFETY: valid path; lchown never follows symlinks.
    if unsafe { libc::lchown(p.as_ptr(), uid, gid) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // After chown, which clears set-id bits.
    fs::set_permissions(path, fs::Permissions::from_mode(header.mode()? & 0o7777))
}

/// Extended attributes carried as PAX `SCHILY.xattr.*` records (file capabilities, mostly).
/// `trusted.*` is dropped: a layer must not be able to steer overlayfs (`trusted.overlay.*`)
/// beyond what its whiteouts say.
fn layer_xattrs<R: Read>(entry: &mut tar::Entry<'_, R>) -> Vec<(String, Vec<u8>)> {
    let Ok(Some(exts)) = entry.pax_extensions() else {
        return Vec::new();
    };
    exts.filter_map(Result::ok)
        .filter_map(|e| {
            let key = e.key().ok()?.strip_prefix("SCHILY.xattr.")?.to_owned();
            (!key.starts_with("trusted.")).then(|| (key, e.value_bytes().to_vec()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{FileTypeExt, MetadataExt};

    fn header(kind: tar::EntryType, size: u64, mode: u32) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(1_700_000_000);
        h
    }

    /// Writes a raw name into the header, bypassing the builder's own path checks so that
    /// hostile archives can be made.
    fn raw_entry(b: &mut tar::Builder<Vec<u8>>, name: &str, kind: tar::EntryType, data: &[u8]) {
        let mut h = header(kind, data.len() as u64, 0o644);
        let field = &mut h.as_old_mut().name;
        field.fill(0);
        field[..name.len()].copy_from_slice(name.as_bytes());
        h.set_cksum();
        b.append(&h, data).unwrap();
    }

    fn link_entry(b: &mut tar::Builder<Vec<u8>>, name: &str, kind: tar::EntryType, target: &str) {
        let mut h = header(kind, 0, 0o777);
        let field = &mut h.as_old_mut().name;
        field[..name.len()].copy_from_slice(name.as_bytes());
        let field = &mut h.as_old_mut().linkname;
        field[..target.len()].copy_from_slice(target.as_bytes());
        h.set_cksum();
        b.append(&h, io::empty()).unwrap();
    }

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "gantry-unpack-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        fs::create_dir_all(d.join("layer")).unwrap();
        d
    }

    fn unpack(
        tag: &str,
        build: impl FnOnce(&mut tar::Builder<Vec<u8>>),
    ) -> (PathBuf, Result<(), UnpackError>) {
        let mut b = tar::Builder::new(Vec::new());
        build(&mut b);
        let bytes = b.into_inner().unwrap();
        let d = tmpdir(tag);
        let r = unpack_tar(&bytes[..], &d.join("layer"));
        (d, r)
    }

    #[test]
    fn whiteouts_become_overlay_markers() {
        let (d, r) = unpack("wh", |b| {
            raw_entry(b, "./", tar::EntryType::Directory, b"");
            raw_entry(b, "./data/", tar::EntryType::Directory, b"");
            raw_entry(b, "./data/.wh.gone", tar::EntryType::Regular, b"");
            raw_entry(b, "./data/opq/.wh..wh..opq", tar::EntryType::Regular, b"");
            raw_entry(b, "./data/opq/new", tar::EntryType::Regular, b"new\n");
            raw_entry(b, "./data/keep", tar::EntryType::Regular, b"keep\n");
            link_entry(b, "./data/hard", tar::EntryType::Link, "data/keep");
            link_entry(b, "./data/soft", tar::EntryType::Symlink, "keep");
        });
        r.unwrap();
        let l = d.join("layer");
        let gone = fs::symlink_metadata(l.join("data/gone")).unwrap();
        assert!(gone.file_type().is_char_device());
        assert_eq!(gone.rdev(), 0);
        let mut buf = [0u8; 8];
        let p = cstr(&l.join("data/opq")).unwrap();
        let k = CString::new("trusted.overlay.opaque").unwrap();
        // SAFETY: valid pointers and buffer length.
        let n = unsafe { libc::lgetxattr(p.as_ptr(), k.as_ptr(), buf.as_mut_ptr().cast(), 8) };
        assert_eq!(&buf[..n as usize], b"y");
        assert_eq!(fs::read(l.join("data/opq/new")).unwrap(), b"new\n");
        let keep = fs::metadata(l.join("data/keep")).unwrap();
        assert_eq!(fs::metadata(l.join("data/hard")).unwrap().ino(), keep.ino());
        assert_eq!(
            fs::read_link(l.join("data/soft")).unwrap(),
            Path::new("keep")
        );
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn refuses_parent_dir_paths() {
        let (d, r) = unpack("dotdot", |b| {
            raw_entry(b, "../evil", tar::EntryType::Regular, b"x");
        });
        assert!(matches!(r, Err(UnpackError::Unsafe { .. })), "{r:?}");
        assert!(!d.join("evil").exists());
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn refuses_absolute_paths() {
        let (d, r) = unpack("abs", |b| {
            raw_entry(b, "/etc/evil", tar::EntryType::Regular, b"x");
        });
        assert!(matches!(r, Err(UnpackError::Unsafe { .. })), "{r:?}");
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn refuses_writing_through_escaping_symlink() {
        let (d, r) = unpack("symlink", |b| {
            link_entry(b, "esc", tar::EntryType::Symlink, "..");
            raw_entry(b, "esc/evil", tar::EntryType::Regular, b"x");
        });
        assert!(r.is_err());
        assert!(!d.join("evil").exists());
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn refuses_whiteout_through_symlink() {
        let (d, r) = unpack("whsymlink", |b| {
            link_entry(b, "esc", tar::EntryType::Symlink, "..");
            raw_entry(b, "esc/.wh.victim", tar::EntryType::Regular, b"");
        });
        assert!(r.is_err());
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn refuses_hardlink_out_of_root() {
        let (d, r) = unpack("hardlink", |b| {
            link_entry(b, "h", tar::EntryType::Link, "../outside");
        });
        assert!(r.is_err());
        fs::remove_dir_all(d).unwrap();
    }
}
