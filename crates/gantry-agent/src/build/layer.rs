//! An overlay upper directory (what one build step changed) -> an OCI layer blob.
//!
//! overlayfs and OCI express deletions differently; this is the inverse of
//! `crate::image::unpack`:
//! - a whiteout (a character device 0:0) becomes an empty `.wh.NAME` file;
//! - an opaque directory (`trusted.overlay.opaque=y`) gets a `.wh..wh..opq` file first;
//! - hard links within the layer stay hard links (the first path in order carries the data);
//! - ownership is kept, shifted back into the image's ids when the step ran in a user
//!   namespace; file capabilities (`security.capability`) are kept the same way; other extended
//!   attributes, and overlayfs' own `trusted.*`, are dropped;
//! - modification times are clamped to [`EPOCH`] (like `SOURCE_DATE_EPOCH`), no access or
//!   change times, no user or group names, entries sorted: the same directory gives the same
//!   bytes, hence the same digest, every time.
//!
//! The blob is gzip; its digest is over the compressed bytes, the diff_id over the tar.

use std::collections::HashMap;
use std::ffi::{CString, OsString};
use std::fs;
use std::io::{self, BufWriter, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use flate2::{Compression, GzBuilder};
use sha2::{Digest, Sha256};

use crate::runtime::IdMap;

/// Modification times are clamped to this (2000-01-01T00:00:00Z), and it is the `created` of
/// what a build writes into an image's configuration.
pub const EPOCH: i64 = 946_684_800;
/// [`EPOCH`] as RFC 3339.
pub const EPOCH_RFC3339: &str = "2000-01-01T00:00:00Z";
pub const GZIP_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// gzip level: 6 is gzip's default, a fair trade of size against time (a layer is compressed
/// once and pulled by every node).
const LEVEL: u32 = 6;

const WHITEOUT_PREFIX: &str = ".wh.";
const OPAQUE_MARKER: &str = ".wh..wh..opq";
const OPAQUE_XATTR: &str = "trusted.overlay.opaque";
const CAPABILITY_XATTR: &str = "security.capability";

/// A layer blob written by [`write_layer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    /// `sha256:` of the compressed blob.
    pub digest: String,
    /// `sha256:` of the uncompressed tar.
    pub diff_id: String,
    /// Bytes of the compressed blob.
    pub size: u64,
    /// Bytes of the tar.
    pub tar_size: u64,
}

/// Writes the layer of `upper` to `out` (created or truncated). `shift`: the user namespace the
/// step ran in; its host ids are written as the ids they are in the container.
pub fn write_layer(upper: &Path, out: &Path, shift: Option<IdMap>) -> io::Result<Layer> {
    let file = fs::File::create(out)?;
    let compressed = Hashing::new(BufWriter::with_capacity(1 << 20, file));
    // No name and no time in the gzip header: the same tar compresses to the same bytes.
    let gz = GzBuilder::new().write(compressed, Compression::new(LEVEL));
    let mut tar = tar::Builder::new(Hashing::new(gz));
    let mut walk = Walk {
        shift,
        links: HashMap::new(),
    };
    walk.dir(&mut tar, upper, Path::new(""))?;
    let tar = tar.into_inner()?;
    let (gz, diff_id, tar_size) = tar.finish();
    let (buffered, digest, size) = gz.finish()?.finish();
    let file = buffered.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok(Layer {
        digest: format!("sha256:{}", hex::encode(digest)),
        diff_id: format!("sha256:{}", hex::encode(diff_id)),
        size,
        tar_size,
    })
}

/// A writer that hashes and counts what passes through.
struct Hashing<W> {
    inner: W,
    hasher: Sha256,
    count: u64,
}

impl<W: Write> Hashing<W> {
    fn new(inner: W) -> Self {
        Hashing {
            inner,
            hasher: Sha256::new(),
            count: 0,
        }
    }

    fn finish(self) -> (W, Vec<u8>, u64) {
        (self.inner, self.hasher.finalize().to_vec(), self.count)
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

struct Walk {
    shift: Option<IdMap>,
    /// (device, inode) of files with several links -> the path that carries the data.
    links: HashMap<(u64, u64), PathBuf>,
}

impl Walk {
    fn id(&self, id: u32) -> u64 {
        u64::from(self.shift.and_then(|m| m.to_container(id)).unwrap_or(id))
    }

    fn header(&self, md: &fs::Metadata, kind: tar::EntryType) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(md.mode() & 0o7777);
        h.set_uid(self.id(md.uid()));
        h.set_gid(self.id(md.gid()));
        h.set_mtime(md.mtime().clamp(0, EPOCH) as u64);
        h.set_size(0);
        h
    }

    fn dir<W: Write>(
        &mut self,
        tar: &mut tar::Builder<W>,
        abs: &Path,
        rel: &Path,
    ) -> io::Result<()> {
        let mut names: Vec<OsString> = fs::read_dir(abs)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<io::Result<_>>()?;
        // Byte order, whatever the locale.
        names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        for name in names {
            let path = abs.join(&name);
            let entry = rel.join(&name);
            let md = fs::symlink_metadata(&path)?;
            let ft = md.file_type();
            if ft.is_char_device() && md.rdev() == 0 {
                let mut wh = OsString::from(WHITEOUT_PREFIX);
                wh.push(&name);
                let mut h = self.header(&md, tar::EntryType::Regular);
                h.set_mode(0o644);
                h.set_uid(0);
                h.set_gid(0);
                h.set_mtime(EPOCH as u64);
                tar.append_data(&mut h, rel.join(wh), io::empty())?;
            } else if ft.is_dir() {
                let mut h = self.header(&md, tar::EntryType::Directory);
                self.xattrs(tar, &path)?;
                tar.append_data(&mut h, &entry, io::empty())?;
                if get_xattr(&path, OPAQUE_XATTR)?.as_deref() == Some(b"y") {
                    let mut h = self.header(&md, tar::EntryType::Regular);
                    h.set_mode(0o644);
                    h.set_uid(0);
                    h.set_gid(0);
                    h.set_mtime(EPOCH as u64);
                    tar.append_data(&mut h, entry.join(OPAQUE_MARKER), io::empty())?;
                }
                self.dir(tar, &path, &entry)?;
            } else if ft.is_file() {
                if md.nlink() > 1 {
                    let key = (md.dev(), md.ino());
                    if let Some(first) = self.links.get(&key) {
                        let mut h = self.header(&md, tar::EntryType::Link);
                        tar.append_link(&mut h, &entry, first)?;
                        continue;
                    }
                    self.links.insert(key, entry.clone());
                }
                let mut h = self.header(&md, tar::EntryType::Regular);
                h.set_size(md.len());
                self.xattrs(tar, &path)?;
                let file = fs::File::open(&path)?;
                // A file that changes size under us would corrupt the archive: refuse it.
                tar.append_data(&mut h, &entry, ExactReader::new(file, md.len()))?;
            } else if ft.is_symlink() {
                let target = fs::read_link(&path)?;
                let mut h = self.header(&md, tar::EntryType::Symlink);
                tar.append_link(&mut h, &entry, target)?;
            } else if ft.is_fifo() || ft.is_char_device() || ft.is_block_device() {
                let kind = if ft.is_fifo() {
                    tar::EntryType::Fifo
                } else if ft.is_char_device() {
                    tar::EntryType::Char
                } else {
                    tar::EntryType::Block
                };
                let mut h = self.header(&md, kind);
                if !ft.is_fifo() {
                    h.set_device_major(libc::major(md.rdev()))?;
                    h.set_device_minor(libc::minor(md.rdev()))?;
                }
                tar.append_data(&mut h, &entry, io::empty())?;
            }
            // Sockets have no place in an image.
        }
        Ok(())
    }

    /// File capabilities, as a PAX record before the entry they belong to.
    fn xattrs<W: Write>(&self, tar: &mut tar::Builder<W>, path: &Path) -> io::Result<()> {
        let Some(cap) = get_xattr(path, CAPABILITY_XATTR)? else {
            return Ok(());
        };
        let cap = unshift_capability(cap, self.shift);
        let mut data = Vec::new();
        pax_record(&mut data, &format!("SCHILY.xattr.{CAPABILITY_XATTR}"), &cap);
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::XHeader);
        h.set_mode(0o644);
        h.set_mtime(EPOCH as u64);
        h.set_size(data.len() as u64);
        tar.append_data(&mut h, "PaxHeader", &data[..])
    }
}

/// Reads exactly `len` bytes or fails.
struct ExactReader<R> {
    inner: R,
    left: u64,
}

impl<R: io::Read> ExactReader<R> {
    fn new(inner: R, len: u64) -> Self {
        ExactReader { inner, left: len }
    }
}

impl<R: io::Read> io::Read for ExactReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let max = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..max])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "a file shrank while it was archived",
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// One PAX record: `LEN KEY=VALUE\n`, where LEN counts the whole record, itself included.
fn pax_record(out: &mut Vec<u8>, key: &str, value: &[u8]) {
    let rest = key.len() + value.len() + 3; // ' ', '=', '\n'
    let mut len = rest + 1;
    while len != rest + len.to_string().len() {
        len = rest + len.to_string().len();
    }
    out.extend_from_slice(format!("{len} {key}=").as_bytes());
    out.extend_from_slice(value);
    out.push(b'\n');
}

const VFS_CAP_REVISION_MASK: u32 = 0xFF00_0000;
const VFS_CAP_REVISION_2: u32 = 0x0200_0000;
const VFS_CAP_REVISION_3: u32 = 0x0300_0000;

/// A capability set written in a user namespace is stored as revision 3, naming the host id of
/// that namespace's root. In the image it must be for the image's root: revision 2 (or 3 with
/// the id the root is in the container, for a nested namespace).
fn unshift_capability(cap: Vec<u8>, shift: Option<IdMap>) -> Vec<u8> {
    let Some(m) = shift else { return cap };
    if cap.len() < 24 {
        return cap;
    }
    let magic = u32::from_le_bytes([cap[0], cap[1], cap[2], cap[3]]);
    if magic & VFS_CAP_REVISION_MASK != VFS_CAP_REVISION_3 {
        return cap;
    }
    let root = u32::from_le_bytes([cap[20], cap[21], cap[22], cap[23]]);
    match m.to_container(root) {
        Some(0) => {
            let mut v2 = cap[..20].to_vec();
            let magic = (magic & !VFS_CAP_REVISION_MASK) | VFS_CAP_REVISION_2;
            v2[..4].copy_from_slice(&magic.to_le_bytes());
            v2
        }
        Some(id) => {
            let mut v3 = cap[..24].to_vec();
            v3[20..24].copy_from_slice(&id.to_le_bytes());
            v3
        }
        None => cap,
    }
}

fn cstr(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

/// An extended attribute of `path` (not following symlinks); `None` when it has none.
pub(crate) fn get_xattr(path: &Path, name: &str) -> io::Result<Option<Vec<u8>>> {
    let p = cstr(path)?;
    let n = CString::new(name).map_err(io::Error::other)?;
    let mut buf = vec![0u8; 256];
    loop {
        // SAFETY: valid NUL-terminated strings and a buffer of the given length.
        let len =
            unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if len >= 0 {
            buf.truncate(len as usize);
            return Ok(Some(buf));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENODATA) | Some(libc::ENOTSUP) => return Ok(None),
            Some(libc::ERANGE) if buf.len() < 1 << 16 => buf.resize(buf.len() * 4, 0),
            _ => return Err(e),
        }
    }
}

/// Whether `rel` exists in the merged view of `layers` (bottom first, overlay lowerdirs),
/// reading whiteouts and opaque directories as overlayfs does. A path that crosses a symlink
/// counts as existing (the answer is only used to leave things alone).
pub fn exists_in_layers(layers: &[PathBuf], rel: &Path) -> bool {
    let parts: Vec<_> = rel.components().collect();
    if parts.is_empty() {
        return true;
    }
    for layer in layers.iter().rev() {
        let mut p = layer.clone();
        let mut opaque = false;
        for (i, part) in parts.iter().enumerate() {
            p.push(part);
            let Ok(md) = fs::symlink_metadata(&p) else {
                break;
            };
            let ft = md.file_type();
            if ft.is_char_device() && md.rdev() == 0 {
                return false;
            }
            if i + 1 == parts.len() || !ft.is_dir() {
                return true;
            }
            if get_xattr(&p, OPAQUE_XATTR).ok().flatten().as_deref() == Some(b"y") {
                opaque = true;
            }
        }
        if opaque {
            // An opaque directory on the way hides the layers below.
            return false;
        }
    }
    false
}

/// Removes from `upper` what runc made there for the container's mounts (`/proc`, `/tmp`, an
/// `/etc/resolv.conf` to bind over...) when the image did not have them: empty directories
/// and files at `targets`, then the parents made for them, now empty. `existed` says, for
/// each target, whether the image had it before the step.
pub fn prune_mount_points(upper: &Path, targets: &[(PathBuf, bool)]) {
    for (rel, existed) in targets {
        if *existed {
            continue;
        }
        let p = upper.join(rel);
        let Ok(md) = fs::symlink_metadata(&p) else {
            continue;
        };
        let removed = if md.is_dir() {
            fs::remove_dir(&p).is_ok()
        } else if md.is_file() && md.len() == 0 {
            fs::remove_file(&p).is_ok()
        } else {
            false
        };
        if !removed {
            continue;
        }
        // Parents the image lacked too (their own entries say whether it had them).
        let mut parent = rel.parent();
        while let Some(dir) = parent.filter(|d| !d.as_os_str().is_empty()) {
            let known_absent = targets.iter().any(|(t, e)| t == dir && !e);
            if !known_absent || fs::remove_dir(upper.join(dir)).is_err() {
                break;
            }
            parent = dir.parent();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "gantry-layer-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn mknod_whiteout(p: &Path) {
        let c = cstr(p).unwrap();
        // SAFETY: valid path.
        assert_eq!(unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR, 0) }, 0);
    }

    fn set_xattr(p: &Path, k: &str, v: &[u8]) {
        let c = cstr(p).unwrap();
        let k = CString::new(k).unwrap();
        // SAFETY: valid pointers and lengths.
        let rc = unsafe { libc::lsetxattr(c.as_ptr(), k.as_ptr(), v.as_ptr().cast(), v.len(), 0) };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
    }

    /// An upper directory as overlayfs leaves one.
    fn sample_upper(root: &Path) -> PathBuf {
        let u = root.join("upper");
        fs::create_dir_all(u.join("etc/opq/sub")).unwrap();
        fs::create_dir_all(u.join("usr/bin")).unwrap();
        fs::write(u.join("etc/new.conf"), "new\n").unwrap();
        mknod_whiteout(&u.join("etc/gone"));
        set_xattr(&u.join("etc/opq"), OPAQUE_XATTR, b"y");
        set_xattr(&u.join("etc"), "trusted.overlay.origin", b"xyz");
        fs::write(u.join("etc/opq/sub/f"), "f\n").unwrap();
        fs::write(u.join("usr/bin/tool"), "#!/bin/sh\n").unwrap();
        fs::hard_link(u.join("usr/bin/tool"), u.join("usr/bin/alias")).unwrap();
        std::os::unix::fs::symlink("tool", u.join("usr/bin/link")).unwrap();
        let future = filetime::FileTime::from_unix_time(EPOCH + 1_000_000, 0);
        let past = filetime::FileTime::from_unix_time(1_000, 0);
        filetime::set_file_mtime(u.join("etc/new.conf"), future).unwrap();
        filetime::set_file_mtime(u.join("etc/opq/sub/f"), past).unwrap();
        u
    }

    struct Entry {
        path: String,
        kind: tar::EntryType,
        mtime: u64,
        uid: u64,
        link: Option<String>,
        data: Vec<u8>,
    }

    fn entries(blob: &Path) -> Vec<Entry> {
        let f = fs::File::open(blob).unwrap();
        let mut a = tar::Archive::new(flate2::read::GzDecoder::new(f));
        a.entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let h = e.header().clone();
                let mut data = Vec::new();
                e.read_to_end(&mut data).unwrap();
                Entry {
                    path: e.path().unwrap().to_string_lossy().into_owned(),
                    kind: h.entry_type(),
                    mtime: h.mtime().unwrap(),
                    uid: h.uid().unwrap(),
                    link: e
                        .link_name()
                        .unwrap()
                        .map(|l| l.to_string_lossy().into_owned()),
                    data,
                }
            })
            .collect()
    }

    #[test]
    fn whiteouts_opaque_dirs_and_links_become_oci_entries() {
        let d = tmpdir("conv");
        let u = sample_upper(&d);
        let layer = write_layer(&u, &d.join("blob"), None).unwrap();
        let es = entries(&d.join("blob"));
        let paths: Vec<&str> = es.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                "etc",
                "etc/.wh.gone",
                "etc/new.conf",
                "etc/opq",
                "etc/opq/.wh..wh..opq",
                "etc/opq/sub",
                "etc/opq/sub/f",
                "usr",
                "usr/bin",
                "usr/bin/alias",
                "usr/bin/link",
                "usr/bin/tool",
            ]
        );
        let get = |p: &str| es.iter().find(|e| e.path == p).unwrap();
        assert_eq!(get("etc/.wh.gone").kind, tar::EntryType::Regular);
        assert!(get("etc/.wh.gone").data.is_empty());
        assert_eq!(get("etc/new.conf").data, b"new\n");
        // The first path carries the data; the other is a hard link to it.
        assert_eq!(get("usr/bin/alias").data, b"#!/bin/sh\n");
        assert_eq!(get("usr/bin/tool").kind, tar::EntryType::Link);
        assert_eq!(get("usr/bin/tool").link.as_deref(), Some("usr/bin/alias"));
        assert_eq!(get("usr/bin/link").kind, tar::EntryType::Symlink);
        assert_eq!(get("usr/bin/link").link.as_deref(), Some("tool"));
        // Clamped, not reset: older times stay.
        assert_eq!(get("etc/new.conf").mtime, EPOCH as u64);
        assert_eq!(get("etc/opq/sub/f").mtime, 1_000);
        assert!(es.iter().all(|e| e.mtime <= EPOCH as u64));
        assert_eq!(layer.size, fs::metadata(d.join("blob")).unwrap().len());
        // digest over the blob, diff_id over the tar.
        let blob = fs::read(d.join("blob")).unwrap();
        assert_eq!(
            layer.digest,
            format!("sha256:{}", hex::encode(Sha256::digest(&blob)))
        );
        let mut tar = Vec::new();
        flate2::read::GzDecoder::new(&blob[..])
            .read_to_end(&mut tar)
            .unwrap();
        assert_eq!(
            layer.diff_id,
            format!("sha256:{}", hex::encode(Sha256::digest(&tar)))
        );
        assert_eq!(layer.tar_size, tar.len() as u64);
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn the_same_directory_gives_the_same_digest() {
        let d = tmpdir("det");
        let u = sample_upper(&d);
        let a = write_layer(&u, &d.join("a"), None).unwrap();
        // Touching a file (a newer mtime, clamped anyway) and re-reading changes nothing.
        filetime::set_file_mtime(
            u.join("usr/bin/tool"),
            filetime::FileTime::from_unix_time(EPOCH + 5, 0),
        )
        .unwrap();
        let b = write_layer(&u, &d.join("b"), None).unwrap();
        assert_eq!(a, b);
        assert_eq!(
            fs::read(d.join("a")).unwrap(),
            fs::read(d.join("b")).unwrap()
        );
        // A changed content changes it.
        fs::write(u.join("etc/new.conf"), "other\n").unwrap();
        let c = write_layer(&u, &d.join("c"), None).unwrap();
        assert_ne!(a.digest, c.digest);
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn user_namespace_ids_are_shifted_back() {
        let d = tmpdir("shift");
        let u = d.join("upper");
        fs::create_dir_all(u.join("home")).unwrap();
        fs::write(u.join("home/f"), "x").unwrap();
        let m = IdMap {
            host: 1_879_048_192,
            size: 65536,
        };
        std::os::unix::fs::lchown(u.join("home"), Some(m.host), Some(m.host)).unwrap();
        std::os::unix::fs::lchown(u.join("home/f"), Some(m.host + 1000), Some(m.host + 1000))
            .unwrap();
        write_layer(&u, &d.join("blob"), Some(m)).unwrap();
        let es = entries(&d.join("blob"));
        assert_eq!(es[0].uid, 0);
        assert_eq!(es[1].uid, 1000);
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn capabilities_written_in_a_namespace_are_for_the_image_root() {
        let m = IdMap {
            host: 1_879_048_192,
            size: 65536,
        };
        let mut v3 = Vec::new();
        v3.extend_from_slice(&(VFS_CAP_REVISION_3 | 1).to_le_bytes());
        v3.extend_from_slice(&[0x00, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        v3.extend_from_slice(&m.host.to_le_bytes());
        let v2 = unshift_capability(v3.clone(), Some(m));
        assert_eq!(v2.len(), 20);
        assert_eq!(
            u32::from_le_bytes([v2[0], v2[1], v2[2], v2[3]]),
            VFS_CAP_REVISION_2 | 1
        );
        assert_eq!(&v2[4..20], &v3[4..20]);
        assert_eq!(unshift_capability(v3.clone(), None), v3);
    }

    #[test]
    fn pax_records_count_their_own_length() {
        let mut out = Vec::new();
        pax_record(&mut out, "k", b"v");
        assert_eq!(out, b"6 k=v\n");
        let mut out = Vec::new();
        pax_record(&mut out, "SCHILY.xattr.security.capability", &[0u8; 20]);
        let len: usize = std::str::from_utf8(&out[..out.iter().position(|b| *b == b' ').unwrap()])
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(len, out.len());
    }

    #[test]
    fn existence_follows_whiteouts_and_opaque_dirs() {
        let d = tmpdir("exists");
        let (a, b) = (d.join("a"), d.join("b"));
        fs::create_dir_all(a.join("etc/x")).unwrap();
        fs::create_dir_all(a.join("tmp")).unwrap();
        fs::write(a.join("etc/x/f"), "").unwrap();
        fs::create_dir_all(b.join("etc/x")).unwrap();
        mknod_whiteout(&b.join("tmp"));
        set_xattr(&b.join("etc/x"), OPAQUE_XATTR, b"y");
        let layers = vec![a.clone(), b];
        assert!(exists_in_layers(&layers, Path::new("etc")));
        assert!(exists_in_layers(&layers, Path::new("etc/x")));
        assert!(!exists_in_layers(&layers, Path::new("etc/x/f")));
        assert!(!exists_in_layers(&layers, Path::new("tmp")));
        assert!(!exists_in_layers(&layers, Path::new("proc")));
        assert!(exists_in_layers(&[a], Path::new("tmp")));
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn mount_points_runc_made_are_pruned() {
        let d = tmpdir("prune");
        let u = d.join("upper");
        fs::create_dir_all(u.join("tmp")).unwrap();
        fs::create_dir_all(u.join("etc")).unwrap();
        fs::write(u.join("etc/resolv.conf"), "").unwrap();
        fs::create_dir_all(u.join("proc")).unwrap();
        fs::write(u.join("proc/kept"), "x").unwrap();
        fs::create_dir_all(u.join("dev")).unwrap();
        let targets = vec![
            (PathBuf::from("tmp"), false),
            (PathBuf::from("etc"), false),
            (PathBuf::from("etc/resolv.conf"), false),
            (PathBuf::from("proc"), false),
            (PathBuf::from("dev"), true),
        ];
        prune_mount_points(&u, &targets);
        assert!(!u.join("tmp").exists());
        assert!(!u.join("etc").exists());
        assert!(
            u.join("proc/kept").exists(),
            "not empty: the step wrote there"
        );
        assert!(u.join("dev").exists(), "the image had it");
        fs::remove_dir_all(d).unwrap();
    }
}
