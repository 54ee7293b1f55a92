//! Container output. Agents ship chunks placed by byte offset (a resend is harmless); the server
//! keeps each attempt's stdout and stderr as files under `<data>/logs/<attempt>/` and records
//! the durable length in the store.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use base64::Engine;
use gantry_api::agent::{LogChunk, Stream};
use uuid::Uuid;

use gantry_store::Store;

fn stream_name(s: Stream) -> &'static str {
    match s {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
    }
}

/// An attempt's stream under the server's data directory.
pub(crate) fn path(data_dir: &Path, attempt: Uuid, stream: &str) -> PathBuf {
    data_dir.join("logs").join(attempt.to_string()).join(stream)
}

fn len_of(p: &std::path::Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// Stores a chunk; returns the durable lengths of (stdout, stderr) to acknowledge.
pub async fn append(
    store: &dyn Store,
    data_dir: &Path,
    chunk: &LogChunk,
) -> anyhow::Result<(u64, u64)> {
    let data = base64::engine::general_purpose::STANDARD.decode(&chunk.data)?;
    let name = stream_name(chunk.stream);
    let file = path(data_dir, chunk.attempt_id, name);
    let offset = chunk.offset;
    let written = tokio::task::spawn_blocking(move || -> std::io::Result<Option<u64>> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        if let Some(dir) = file.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(crate::private::DIR_MODE)
                .create(dir)?;
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(crate::private::FILE_MODE)
            .open(&file)?;
        let len = f.metadata()?.len();
        let end = offset + data.len() as u64;
        // A gap means chunks were lost in between: take nothing, the ack makes the agent resend.
        if offset > len || end <= len {
            return Ok(None);
        }
        f.write_all(&data[(len - offset) as usize..])?;
        f.sync_data()?;
        Ok(Some(end))
    })
    .await??;
    if let Some(end) = written {
        store.set_log_size(chunk.attempt_id, name, end).await?;
    }
    Ok((
        len_of(&path(data_dir, chunk.attempt_id, "stdout")),
        len_of(&path(data_dir, chunk.attempt_id, "stderr")),
    ))
}

pub(crate) fn read_range(
    file: &std::path::Path,
    offset: u64,
    limit: u64,
) -> std::io::Result<(Vec<u8>, u64)> {
    let mut f = match std::fs::File::open(file) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((vec![], offset)),
        Err(e) => return Err(e),
    };
    let len = f.metadata()?.len();
    if offset >= len {
        return Ok((vec![], offset));
    }
    f.seek(SeekFrom::Start(offset))?;
    let mut buf = Vec::new();
    f.take(limit.min(len - offset)).read_to_end(&mut buf)?;
    let next = offset + buf.len() as u64;
    Ok((buf, next))
}

/// The last non-empty line an attempt wrote to a stream (up to 4 KiB back): a failed build's
/// own explanation, for its events.
pub fn last_line(data_dir: &Path, attempt: Uuid, stream: &str) -> Option<String> {
    let file = path(data_dir, attempt, stream);
    let len = len_of(&file);
    let (bytes, _) = read_range(&file, len.saturating_sub(4096), 4096).ok()?;
    String::from_utf8_lossy(&bytes)
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| l.chars().take(300).collect())
}
