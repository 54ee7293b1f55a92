//! SIF images (Apptainer's Singularity Image Format), as `oras://` registries serve them: one
//! OCI artifact layer holding the whole `.sif` file.
//!
//! A SIF is a global header, a table of descriptors and the data objects they point at. Only
//! the primary system partition is used: a squashfs of the container's root filesystem. It is
//! unpacked once per digest into the layer cache, through the very code that unpacks OCI
//! layers ([`unpack::unpack_tar`]): the squashfs is streamed as a tar archive into it, so that
//! a SIF gets the same protections (no entry outside the layer, symlinks are data, nothing
//! written through a symlink that leaves it).
//!
//! The header and descriptors are read here rather than with a crate: the layout is small and
//! fixed (sylabs/sif `pkg/sif`, packed little-endian), and no maintained Rust crate reads it.
//! The squashfs is read with `backhand` (pure Rust), never by running `unsquashfs` as root on
//! hostile input.

use std::fs;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use backhand::{FilesystemReader, InnerNode};

use super::unpack::{self, UnpackError};
use super::ImageConfig;
use crate::beneath::{Dir, Rel, Resolve};

/// The media type of the layer that holds the SIF file in an ORAS artifact.
pub const SIF_LAYER_MEDIA_TYPE: &str = "application/vnd.sylabs.sif.layer.v1.sif";

const HEADER_LEN: u64 = 128;
const MAGIC: &[u8; 10] = b"SIF_MAGIC\0";
/// A descriptor as `binary.Write` lays it out: type, used, 3 ids, 7 int64s, name, extra.
const DESCRIPTOR_LEN: usize = 4 + 1 + 3 * 4 + 7 * 8 + 128 + 384;
/// Far more than any real image (Apptainer makes a handful); bounds what a header may ask for.
const MAX_DESCRIPTORS: i64 = 4096;
const DATA_PARTITION: i32 = 0x4004;
const FS_SQUASH: i32 = 1;
const FS_ENCRYPTED_SQUASH: i32 = 5;
const PART_PRIM_SYS: i32 = 2;
const ARCH_AMD64: &[u8; 2] = b"02";

/// Where the primary system partition lies in a SIF file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    pub offset: u64,
    pub size: u64,
}

fn bad(reason: impl Into<String>) -> UnpackError {
    UnpackError::Read(io::Error::new(
        io::ErrorKind::InvalidData,
        format!("not a usable SIF image: {}", reason.into()),
    ))
}

fn le_i64(b: &[u8], at: usize) -> i64 {
    i64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn le_i32(b: &[u8], at: usize) -> i32 {
    i32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Reads the header and descriptors of a SIF of `len` bytes and finds its primary system
/// partition. Every offset and size is checked against the file before anything is read
/// through it.
pub fn primary_partition(f: &mut (impl Read + Seek), len: u64) -> Result<Partition, UnpackError> {
    if len < HEADER_LEN {
        return Err(bad("shorter than a SIF header"));
    }
    let mut h = [0u8; HEADER_LEN as usize];
    f.seek(SeekFrom::Start(0)).map_err(UnpackError::Read)?;
    f.read_exact(&mut h).map_err(UnpackError::Read)?;
    if &h[32..42] != MAGIC {
        return Err(bad("no SIF magic"));
    }
    // After the launch script, magic, version, arch, id and two times: free, total,
    // offset and size of the descriptor table.
    let total = le_i64(&h, 88);
    let (desc_off, desc_size) = (le_i64(&h, 96), le_i64(&h, 104));
    if !(0..=MAX_DESCRIPTORS).contains(&total) {
        return Err(bad(format!("{total} descriptors")));
    }
    let need = total as u64 * DESCRIPTOR_LEN as u64;
    let inside =
        |off: i64, size: u64| off >= 0 && (off as u64).checked_add(size).is_some_and(|e| e <= len);
    if desc_size < 0 || (desc_size as u64) < need || !inside(desc_off, need) {
        return Err(bad("its descriptor table lies outside the file"));
    }
    let mut table = vec![0u8; need as usize];
    f.seek(SeekFrom::Start(desc_off as u64))
        .map_err(UnpackError::Read)?;
    f.read_exact(&mut table).map_err(UnpackError::Read)?;
    let mut found = None;
    for d in table.chunks_exact(DESCRIPTOR_LEN) {
        let used = d[4] != 0;
        if !used || le_i32(d, 0) != DATA_PARTITION {
            continue;
        }
        let (offset, size) = (le_i64(d, 17), le_i64(d, 25));
        // The partition's own descriptor data: fstype, parttype, arch.
        let extra = &d[4 + 1 + 12 + 56 + 128..];
        let (fstype, parttype) = (le_i32(extra, 0), le_i32(extra, 4));
        if parttype != PART_PRIM_SYS {
            continue;
        }
        if fstype == FS_ENCRYPTED_SQUASH {
            return Err(bad(
                "its root filesystem is encrypted (image.decryption-secret is not supported)",
            ));
        }
        if fstype != FS_SQUASH {
            return Err(bad(format!(
                "its root filesystem is of type {fstype}, not squashfs"
            )));
        }
        if &extra[8..10] != ARCH_AMD64 {
            let arch = String::from_utf8_lossy(&extra[8..10]).into_owned();
            return Err(bad(format!(
                "it is for SIF architecture {arch}; this node runs amd64 (02)"
            )));
        }
        if size < 0 || !inside(offset, size as u64) {
            return Err(bad("its root filesystem lies outside the file"));
        }
        if found.is_some() {
            return Err(bad("it has two primary system partitions"));
        }
        found = Some(Partition {
            offset: offset as u64,
            size: size as u64,
        });
    }
    found.ok_or_else(|| bad("it has no primary system partition"))
}

/// Unpacks the SIF file `blob` into the empty directory `dest`.
pub fn unpack_sif(blob: &Path, dest: &Path) -> Result<(), UnpackError> {
    let mut f = fs::File::open(blob).map_err(UnpackError::Read)?;
    let len = f.metadata().map_err(UnpackError::Read)?.len();
    let part = primary_partition(&mut f, len)?;
    let (reader, writer) = io::pipe().map_err(UnpackError::Read)?;
    // backhand's reader is not Send, so it lives wholly in the thread that writes the tar
    // stream; the unpacking side reads the other end of the pipe.
    let producer = std::thread::spawn(move || -> Result<(), UnpackError> {
        let fs = FilesystemReader::from_reader_with_offset(BufReader::new(f), part.offset)
            .map_err(|e| bad(format!("its squashfs cannot be read: {e:?}")))?;
        write_tar(&fs, writer)
    });
    let unpacked = unpack::unpack_tar(reader, dest);
    let produced = producer
        .join()
        .unwrap_or_else(|_| Err(bad("the squashfs reader panicked")));
    match (produced, unpacked) {
        (Ok(()), u) => u,
        (Err(p), Ok(())) => Err(p),
        // The unpacker stopped first (an unsafe entry): the reader then only saw the pipe
        // close.
        (Err(p), Err(u)) if broken_pipe(&p) => Err(u),
        (Err(p), Err(_)) => Err(p),
    }
}

fn broken_pipe(e: &UnpackError) -> bool {
    match e {
        UnpackError::Read(e) | UnpackError::Entry { source: e, .. } => {
            e.kind() == io::ErrorKind::BrokenPipe
        }
        UnpackError::Unsafe { .. } => false,
    }
}

/// The squashfs as a tar stream. Paths are checked here (no `..`), devices refused; the rest
/// of the checks are the unpacker's.
fn write_tar(fs: &FilesystemReader<'_>, out: impl io::Write) -> Result<(), UnpackError> {
    let mut b = tar::Builder::new(out);
    for node in fs.files() {
        let rel = relative(&node.fullpath)?;
        if rel.as_os_str().is_empty() {
            continue;
        }
        let mut h = tar::Header::new_gnu();
        h.set_mode(u32::from(node.header.permissions) & 0o7777);
        h.set_uid(u64::from(node.header.uid));
        h.set_gid(u64::from(node.header.gid));
        h.set_mtime(u64::from(node.header.mtime));
        let path = rel.display().to_string();
        let io = |e: io::Error| UnpackError::Entry {
            path: path.clone(),
            source: e,
        };
        match &node.inner {
            InnerNode::Dir(_) => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_size(0);
                b.append_data(&mut h, &rel, io::empty()).map_err(io)?;
            }
            InnerNode::File(file) => {
                let size = file.file_len() as u64;
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(size);
                let mut data = Exact {
                    inner: fs.file(file).reader().take(size),
                    left: size,
                };
                b.append_data(&mut h, &rel, &mut data).map_err(io)?;
            }
            InnerNode::Symlink(s) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_size(0);
                b.append_link(&mut h, &rel, &s.link).map_err(io)?;
            }
            InnerNode::NamedPipe => {
                h.set_entry_type(tar::EntryType::Fifo);
                h.set_size(0);
                b.append_data(&mut h, &rel, io::empty()).map_err(io)?;
            }
            // A socket in an image is meaningless once unpacked.
            InnerNode::Socket => {}
            InnerNode::CharacterDevice(_) | InnerNode::BlockDevice(_) => {
                return Err(UnpackError::Unsafe {
                    path,
                    reason: "it is a device node (a container gets its devices from the runtime)",
                })
            }
        }
    }
    b.finish().map_err(UnpackError::Read)
}

/// A squashfs path (`/usr/bin/env`) relative to the image root; `..` is refused, as in layers.
fn relative(full: &Path) -> Result<PathBuf, UnpackError> {
    let mut out = PathBuf::new();
    for c in full.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(p) => out.push(p),
            _ => {
                return Err(UnpackError::Unsafe {
                    path: full.display().to_string(),
                    reason: "it contains `..`",
                })
            }
        }
    }
    Ok(out)
}

/// A file's data, which must be exactly as long as its inode says: tar has written the size
/// already, and a short file would shift every entry after it.
struct Exact<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Exact<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && self.left > 0 && !buf.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "the file's data ends {} bytes before its declared size",
                    self.left
                ),
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// A minimal SIF holding `squashfs` as its primary system partition (amd64), laid out as
/// Apptainer lays it out: header, one descriptor, the partition. For tests and tools that make
/// SIF images without Apptainer.
pub fn write_sif(squashfs: &[u8]) -> Vec<u8> {
    let desc_off = HEADER_LEN as usize;
    let data_off = desc_off + DESCRIPTOR_LEN;
    let mut out = vec![0u8; data_off];
    out[..32].copy_from_slice(b"#!/usr/bin/env run-singularity\n\0");
    out[32..42].copy_from_slice(MAGIC);
    out[42..45].copy_from_slice(b"01\0");
    out[45..48].copy_from_slice(b"02\0");
    let put =
        |out: &mut Vec<u8>, at: usize, v: i64| out[at..at + 8].copy_from_slice(&v.to_le_bytes());
    put(&mut out, 80, 0); // free descriptors
    put(&mut out, 88, 1); // total
    put(&mut out, 96, desc_off as i64);
    put(&mut out, 104, DESCRIPTOR_LEN as i64);
    put(&mut out, 112, data_off as i64);
    put(&mut out, 120, squashfs.len() as i64);
    let d = desc_off;
    out[d..d + 4].copy_from_slice(&DATA_PARTITION.to_le_bytes());
    out[d + 4] = 1; // used
    out[d + 5..d + 9].copy_from_slice(&1u32.to_le_bytes()); // id
    put(&mut out, d + 17, data_off as i64);
    put(&mut out, d + 25, squashfs.len() as i64);
    put(&mut out, d + 33, squashfs.len() as i64);
    out[d + 73..d + 73 + 8].copy_from_slice(b"rootfs\0\0");
    let extra = d + 201;
    out[extra..extra + 4].copy_from_slice(&FS_SQUASH.to_le_bytes());
    out[extra + 4..extra + 8].copy_from_slice(&PART_PRIM_SYS.to_le_bytes());
    out[extra + 8..extra + 11].copy_from_slice(b"02\0");
    out.extend_from_slice(squashfs);
    out
}

/// A squashfs of the directory `src` made by `mksquashfs` (Debian's squashfs-tools) at `out`,
/// with uncompressed metadata (so that tests can rewrite names in it) and every file owned by
/// root. For tests and tools that make SIF images; the agent itself never runs it.
pub fn mksquashfs(src: &Path, out: &Path, extra: &[&str]) -> io::Result<Vec<u8>> {
    let st = std::process::Command::new("mksquashfs")
        .arg(src)
        .arg(out)
        .args(["-noappend", "-quiet", "-no-progress", "-all-root"])
        .args(["-noI", "-noD", "-noF", "-noX"])
        .args(extra)
        .status()?;
    if !st.success() {
        return Err(io::Error::other(format!("mksquashfs exited {st}")));
    }
    fs::read(out)
}

/// The most of one environment file that is read.
const MAX_ENV_FILE: u64 = 256 * 1024;
const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What a container of an unpacked SIF starts with: the environment its
/// `/.singularity.d/env/*.sh` files set, and its runscript as the default command.
///
/// The files are shell scripts Apptainer sources; only their simple lines are read, in file
/// name order (later files win, as when sourced): `export NAME=VALUE` (the value unquoted
/// from `"..."` or `'...'`). A value that needs a shell (`$`, a backtick) is skipped: it is
/// never run. Files and directories are opened beneath the layer without following symlinks.
pub fn image_config(layer: &Path) -> ImageConfig {
    let mut env: Vec<(String, String)> = Vec::new();
    if let Ok(root) = Dir::open_root(layer) {
        if let Some(dir) = Rel::new(".singularity.d/env")
            .ok()
            .and_then(|r| root.open_dir(&r, Resolve::Beneath).ok())
        {
            let mut names: Vec<_> = fs::read_dir(dir.proc_path())
                .map(|rd| {
                    rd.flatten()
                        .map(|e| e.file_name())
                        .filter(|n| n.as_bytes().ends_with(b".sh"))
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            for n in names {
                let Ok(rel) = Rel::new(&n) else { continue };
                let Ok(file) = dir.open_file(&rel, Resolve::Beneath) else {
                    continue;
                };
                if !file.metadata().is_ok_and(|m| m.is_file()) {
                    continue;
                }
                let mut text = String::new();
                if file.take(MAX_ENV_FILE).read_to_string(&mut text).is_err() {
                    continue;
                }
                for (k, v) in text.lines().filter_map(export_line) {
                    env.retain(|(old, _)| *old != k);
                    env.push((k, v));
                }
            }
        }
    }
    let mut env: Vec<String> = env.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    if !env.iter().any(|e| e.starts_with("PATH=")) {
        env.insert(0, DEFAULT_PATH.to_string());
    }
    let runscript = Dir::open_root(layer).ok().and_then(|root| {
        let rel = Rel::new(".singularity.d/runscript").ok()?;
        let f = root.open_file(&rel, Resolve::Beneath).ok()?;
        f.metadata().ok().filter(|m| m.is_file())
    });
    ImageConfig {
        env,
        entrypoint: Vec::new(),
        cmd: runscript
            .map(|_| vec!["/.singularity.d/runscript".to_string()])
            .unwrap_or_default(),
        working_dir: None,
        user: None,
    }
}

/// `export NAME=VALUE` as (NAME, VALUE), when it needs no shell to mean what it says.
fn export_line(line: &str) -> Option<(String, String)> {
    let rest = line.trim().strip_prefix("export")?;
    if !rest.starts_with([' ', '\t']) {
        return None;
    }
    let (name, value) = rest.trim_start().split_once('=')?;
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let value = value.trim_end();
    if let Some(v) = value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
        // Single quotes: literal, whatever is inside.
        return (!v.contains('\'')).then(|| (name.to_string(), v.to_string()));
    }
    let (value, quoted) = match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
        Some(v) => (v, true),
        None => (value, false),
    };
    let shell = value.contains(['$', '`', '\\', '"', '\''])
        || (!quoted && value.contains(|c: char| c.is_whitespace() || ";&|<>()".contains(c)));
    (!shell).then(|| (name.to_string(), value.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;

    fn mksquashfs(src: &Path, extra: &[&str]) -> Vec<u8> {
        super::mksquashfs(src, &src.with_extension("sqfs"), extra)
            .expect("mksquashfs (squashfs-tools, scripts/install-deps.sh)")
    }

    fn replace_all(buf: &mut [u8], from: &[u8], to: &[u8]) -> usize {
        assert_eq!(from.len(), to.len());
        let mut n = 0;
        let mut i = 0;
        while i + from.len() <= buf.len() {
            if &buf[i..i + from.len()] == from {
                buf[i..i + from.len()].copy_from_slice(to);
                n += 1;
                i += from.len();
            } else {
                i += 1;
            }
        }
        n
    }

    struct Case {
        dir: tempfile::TempDir,
    }

    impl Case {
        fn new() -> Case {
            let dir = tempfile::tempdir().unwrap();
            fs::create_dir(dir.path().join("src")).unwrap();
            fs::create_dir(dir.path().join("layer")).unwrap();
            Case { dir }
        }
        fn src(&self) -> PathBuf {
            self.dir.path().join("src")
        }
        fn layer(&self) -> PathBuf {
            self.dir.path().join("layer")
        }
        fn unpack(&self, sif: &[u8]) -> Result<(), UnpackError> {
            let p = self.dir.path().join("image.sif");
            fs::write(&p, sif).unwrap();
            unpack_sif(&p, &self.layer())
        }
    }

    fn legit(c: &Case) {
        let s = c.src();
        fs::create_dir_all(s.join(".singularity.d/env")).unwrap();
        fs::write(s.join("hello.txt"), "hello from a SIF\n").unwrap();
        fs::write(
            s.join(".singularity.d/env/90-environment.sh"),
            "#!/bin/sh\nexport GREETING=\"hi there\"\nexport PATH=/opt/bin:/bin\nexport SKIP=$HOME\n",
        )
        .unwrap();
        fs::write(
            s.join(".singularity.d/env/10-base.sh"),
            "export GREETING=early\nexport BASE=1\n",
        )
        .unwrap();
        std::os::unix::fs::symlink("/etc", s.join("abs")).unwrap();
    }

    #[test]
    fn a_sif_unpacks_with_its_environment() {
        let c = Case::new();
        legit(&c);
        c.unpack(&write_sif(&mksquashfs(&c.src(), &[]))).unwrap();
        let l = c.layer();
        assert_eq!(
            fs::read_to_string(l.join("hello.txt")).unwrap(),
            "hello from a SIF\n"
        );
        // An absolute symlink is data: it means /etc inside the container.
        assert_eq!(fs::read_link(l.join("abs")).unwrap(), Path::new("/etc"));
        let cfg = image_config(&l);
        assert_eq!(
            cfg.env,
            ["BASE=1", "GREETING=hi there", "PATH=/opt/bin:/bin"]
        );
        assert!(cfg.cmd.is_empty());
    }

    #[test]
    fn an_environment_file_that_is_a_symlink_is_not_read() {
        let c = Case::new();
        let s = c.src();
        fs::create_dir_all(s.join(".singularity.d/env")).unwrap();
        let secret = c.dir.path().join("host-secret.sh");
        fs::write(&secret, "export STOLEN=yes\n").unwrap();
        std::os::unix::fs::symlink(&secret, s.join(".singularity.d/env/50-x.sh")).unwrap();
        c.unpack(&write_sif(&mksquashfs(&s, &[]))).unwrap();
        let cfg = image_config(&c.layer());
        assert!(
            !cfg.env.iter().any(|e| e.starts_with("STOLEN")),
            "{:?}",
            cfg.env
        );
        assert!(
            cfg.env.iter().any(|e| e.starts_with("PATH=")),
            "a default PATH"
        );
    }

    #[test]
    fn a_name_with_dotdot_is_refused() {
        let c = Case::new();
        legit(&c);
        fs::write(c.src().join("zzzzzzz"), "escaped\n").unwrap();
        let mut sq = mksquashfs(&c.src(), &[]);
        assert_eq!(replace_all(&mut sq, b"zzzzzzz", b"../evil"), 1);
        let r = c.unpack(&write_sif(&sq));
        // backhand refuses such a name itself; `relative` would otherwise.
        assert!(r.is_err(), "{r:?}");
        assert!(!c.dir.path().join("evil").exists());
        assert!(relative(Path::new("/../evil")).is_err());
        assert!(relative(Path::new("/a/../../evil")).is_err());
        assert_eq!(relative(Path::new("/a/b")).unwrap(), Path::new("a/b"));
    }

    #[test]
    fn entries_through_an_absolute_symlink_stay_in_the_layer() {
        let c = Case::new();
        let outside = c.dir.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::create_dir(c.src().join("zzdir1")).unwrap();
        fs::write(c.src().join("zzdir1/pwned"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, c.src().join("zzlink")).unwrap();
        let mut sq = mksquashfs(&c.src(), &[]);
        // Two entries named `zzlink`: the symlink to the host directory and a directory
        // holding `pwned`, which would be written through the symlink if it were followed.
        assert_eq!(replace_all(&mut sq, b"zzdir1", b"zzlink"), 1);
        let r = c.unpack(&write_sif(&sq));
        assert!(
            !outside.join("pwned").exists(),
            "written through the symlink: {r:?}"
        );
        if r.is_ok() {
            let p = c.layer().join("zzlink/pwned");
            assert!(
                fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()),
                "contained"
            );
        }
    }

    #[test]
    fn a_device_node_is_refused() {
        let c = Case::new();
        legit(&c);
        let sq = mksquashfs(&c.src(), &["-p", "kmem c 600 0 0 1 2"]);
        let r = c.unpack(&write_sif(&sq));
        match r {
            Err(UnpackError::Unsafe { path, reason }) => {
                assert_eq!(path, "kmem");
                assert!(reason.contains("device"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        let kmem = fs::symlink_metadata(c.layer().join("kmem"));
        assert!(!kmem.is_ok_and(|m| m.file_type().is_char_device()));
    }

    #[test]
    fn descriptors_and_partitions_past_the_end_are_refused() {
        let c = Case::new();
        legit(&c);
        let good = write_sif(&mksquashfs(&c.src(), &[]));
        let set = |at: usize, v: i64| {
            let mut b = good.clone();
            b[at..at + 8].copy_from_slice(&v.to_le_bytes());
            b
        };
        let d = HEADER_LEN as usize;
        for (what, sif) in [
            ("descriptor table past the end", set(96, good.len() as i64)),
            ("negative descriptor offset", set(96, -1)),
            ("huge descriptor count", set(88, i64::MAX)),
            (
                "partition past the end",
                set(d + 17, good.len() as i64 - 10),
            ),
            ("huge partition size", set(d + 25, i64::MAX)),
            ("negative partition size", set(d + 25, -5)),
        ] {
            let r = c.unpack(&sif);
            let msg = format!("{r:?}");
            assert!(
                r.is_err() && msg.contains("not a usable SIF"),
                "{what}: {msg}"
            );
            assert_eq!(
                fs::read_dir(c.layer()).unwrap().count(),
                0,
                "{what}: nothing unpacked"
            );
        }
        let mut truncated = good.clone();
        truncated.truncate(100);
        assert!(c.unpack(&truncated).is_err());
        // The same image, untouched, unpacks.
        c.unpack(&good).unwrap();
    }

    #[test]
    fn an_encrypted_or_foreign_partition_is_refused_by_name() {
        let c = Case::new();
        legit(&c);
        let good = write_sif(&mksquashfs(&c.src(), &[]));
        let extra = HEADER_LEN as usize + 201;
        let mut enc = good.clone();
        enc[extra..extra + 4].copy_from_slice(&FS_ENCRYPTED_SQUASH.to_le_bytes());
        let msg = format!("{:?}", c.unpack(&enc));
        assert!(msg.contains("decryption-secret"), "{msg}");
        let mut arm = good.clone();
        arm[extra + 8..extra + 10].copy_from_slice(b"04");
        let msg = format!("{:?}", c.unpack(&arm));
        assert!(msg.contains("architecture 04"), "{msg}");
    }

    #[test]
    fn export_lines_read_and_shell_ones_skipped() {
        assert_eq!(
            export_line("export GREETING=hello"),
            Some(("GREETING".into(), "hello".into()))
        );
        assert_eq!(
            export_line("  export A=\"/opt/x:/usr/bin\""),
            Some(("A".into(), "/opt/x:/usr/bin".into()))
        );
        assert_eq!(
            export_line("export Q=\"a b\""),
            Some(("Q".into(), "a b".into()))
        );
        assert_eq!(
            export_line("export B='a b $c'"),
            Some(("B".into(), "a b $c".into()))
        );
        for skipped in [
            "export PATH=/x:$PATH",
            "export C=\"${C:-1}\"",
            "export D=`id`",
            "export E=$(id)",
            "export 1X=1",
            "exportF=1",
            "F=1",
            "export G=a; rm -rf /",
            "# export H=1",
        ] {
            assert_eq!(export_line(skipped), None, "{skipped}");
        }
    }
}
