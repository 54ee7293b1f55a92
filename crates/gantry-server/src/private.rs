//! The server's files are private to it: the store holds every user's workflows, token hashes
//! and sealed secrets, `secret.key` opens those secrets, job output is the users' data, and the
//! object cache holds their private images. Directories are 0700 and files 0600, and a start
//! fixes what an older version left readable.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

pub const DIR_MODE: u32 = 0o700;
pub const FILE_MODE: u32 = 0o600;

/// Makes `path` (and what is missing above it) a directory only the server can enter.
pub fn dir(path: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(path)?;
    set_mode(path, DIR_MODE)
}

/// Takes group and other permissions off a file that exists.
pub fn file(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o077 != 0 => {
            set_mode(path, m.permissions().mode() & 0o700)
        }
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Makes a tree private: every directory 0700 and every file without group or other bits.
/// A tree whose top is private already was made so by an earlier start (or made private from
/// the first), so it is not walked again: a big log tree costs a start nothing.
pub fn tree(top: &Path) -> io::Result<()> {
    match fs::symlink_metadata(top) {
        Ok(m) if m.is_dir() && m.permissions().mode() & 0o7777 == DIR_MODE => return Ok(()),
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return dir(top),
        Err(e) => return Err(e),
    }
    let mut stack = vec![top.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d)? {
            let e = e?;
            let m = fs::symlink_metadata(e.path())?;
            if m.is_dir() {
                set_mode(&e.path(), DIR_MODE)?;
                stack.push(e.path());
            } else if m.is_file() {
                file(&e.path())?;
            }
        }
    }
    // Last: it is what says the walk is done.
    set_mode(top, DIR_MODE)
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn mode(p: &Path) -> u32 {
        fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn a_tree_left_readable_is_made_private_once() {
        let d = tempfile::tempdir().unwrap();
        let top = d.path().join("logs");
        fs::create_dir_all(top.join("a/b")).unwrap();
        fs::write(top.join("a/stdout"), "x").unwrap();
        fs::write(top.join("a/b/stderr"), "y").unwrap();
        for (p, m) in [(&top, 0o755), (&top.join("a"), 0o755)] {
            fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
        }
        fs::set_permissions(top.join("a/stdout"), fs::Permissions::from_mode(0o644)).unwrap();
        let outside = d.path().join("outside");
        fs::write(&outside, "z").unwrap();
        fs::set_permissions(&outside, fs::Permissions::from_mode(0o644)).unwrap();
        std::os::unix::fs::symlink(&outside, top.join("a/link")).unwrap();
        tree(&top).unwrap();
        assert_eq!(mode(&top), 0o700);
        assert_eq!(mode(&top.join("a")), 0o700);
        assert_eq!(mode(&top.join("a/b")), 0o700);
        assert_eq!(mode(&top.join("a/stdout")), 0o600);
        assert_eq!(mode(&top.join("a/b/stderr")) & 0o077, 0);
        assert_eq!(
            mode(&outside),
            0o644,
            "a symlink's target is not ours to change"
        );
        // Private at the top: not walked again.
        fs::set_permissions(top.join("a/stdout"), fs::Permissions::from_mode(0o644)).unwrap();
        tree(&top).unwrap();
        assert_eq!(mode(&top.join("a/stdout")), 0o644);
        // Missing: made, private.
        tree(&d.path().join("new")).unwrap();
        assert_eq!(mode(&d.path().join("new")), 0o700);
    }
}
