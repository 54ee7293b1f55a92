//! Blob files: `<data>/objects/blobs/sha256/<hex>`, content-addressed and shared by everyone;
//! uploads in progress under `<data>/objects/uploads/<uuid>`. A blob becomes visible only by a
//! rename of a complete, fsynced file whose digest was checked.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use futures_util::{Stream, StreamExt};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uuid::Uuid;

use super::auth::Principal;
use super::errors::OciError;
use super::names::Repo;
use super::Private;

pub struct BlobStore {
    root: PathBuf,
    /// What the blob and upload files are created with.
    file_mode: u32,
}

/// Bytes gathered before each write to an upload file.
const WRITE_BUF: usize = 1 << 20;

impl BlobStore {
    /// Makes the directories. Uploads cannot survive a restart (their state is in memory), so
    /// leftovers are removed.
    pub fn open(data_dir: &Path, private: Private) -> BlobStore {
        let root = data_dir.join("objects");
        let uploads = root.join("uploads");
        if let Ok(dir) = std::fs::read_dir(&uploads) {
            for e in dir.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        for d in [root.join("blobs/sha256"), uploads] {
            // Reported again, with the path, by the first request that needs it.
            if let Err(e) = (private.dir)(&d) {
                tracing::error!("object cache: creating {}: {e}", d.display());
            }
        }
        BlobStore {
            root,
            file_mode: private.file_mode,
        }
    }

    pub fn blob_path(&self, hex: &str) -> PathBuf {
        self.root.join("blobs/sha256").join(hex)
    }

    pub fn upload_path(&self, id: Uuid) -> PathBuf {
        self.root.join("uploads").join(id.to_string())
    }

    pub fn has(&self, hex: &str) -> bool {
        self.blob_path(hex).is_file()
    }

    /// Moves a complete upload (already fsynced) into place. Returns false when the blob was
    /// there already (the upload is dropped: blobs are deduplicated).
    pub async fn commit(&self, tmp: &Path, hex: &str) -> io::Result<bool> {
        let dest = self.blob_path(hex);
        if dest.is_file() {
            tokio::fs::remove_file(tmp).await?;
            return Ok(false);
        }
        tokio::fs::rename(tmp, &dest).await?;
        // The rename is durable once its directory is.
        let dir = self.root.join("blobs/sha256");
        tokio::task::spawn_blocking(move || std::fs::File::open(dir)?.sync_all())
            .await
            .map_err(io::Error::other)??;
        Ok(true)
    }

    /// Writes a small blob (a manifest) whose digest the caller computed.
    pub async fn write(&self, bytes: &[u8], hex: &str) -> io::Result<()> {
        if self.has(hex) {
            return Ok(());
        }
        let tmp = self.upload_path(Uuid::new_v4());
        let mut f = private_file(&tmp, self.file_mode).await?;
        f.write_all(bytes).await?;
        f.sync_all().await?;
        drop(f);
        self.commit(&tmp, hex).await.map(|_| ())
    }

    pub async fn read(&self, hex: &str) -> io::Result<Vec<u8>> {
        tokio::fs::read(self.blob_path(hex)).await
    }

    pub async fn remove(&self, hex: &str) -> io::Result<()> {
        match tokio::fs::remove_file(self.blob_path(hex)).await {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// A blob's bytes as a stream, for a response body.
    pub async fn stream(
        &self,
        hex: &str,
    ) -> io::Result<(
        u64,
        impl Stream<Item = io::Result<Vec<u8>>> + Send + 'static,
    )> {
        let f = tokio::fs::File::open(self.blob_path(hex)).await?;
        let len = f.metadata().await?.len();
        let s = futures_util::stream::unfold(Some(f), |f| async move {
            let mut f = f?;
            let mut buf = vec![0u8; 256 << 10];
            match f.read(&mut buf).await {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok(buf), Some(f)))
                }
                Err(e) => Some((Err(e), None)),
            }
        });
        Ok((len, s))
    }

    /// Upload files not written to for `age`: abandoned sessions.
    pub fn stale_uploads(&self, age: Duration) -> Vec<PathBuf> {
        old_files(&self.root.join("uploads"), age)
    }

    /// Blob files not changed for `age` (`sha256:<hex>` → path), to find those the store
    /// lost track of (a crash between writing a file and recording it).
    pub fn old_blobs(&self, age: Duration) -> Vec<(String, PathBuf)> {
        old_files(&self.root.join("blobs/sha256"), age)
            .into_iter()
            .filter_map(|p| {
                let name = p.file_name()?.to_str()?.to_string();
                Some((format!("sha256:{name}"), p))
            })
            .collect()
    }
}

fn old_files(dir: &Path, age: Duration) -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let now = SystemTime::now();
    dir.flatten()
        .filter(|e| {
            e.metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| now.duration_since(t).ok())
                .is_some_and(|d| d > age)
        })
        .map(|e| e.path())
        .collect()
}

/// An upload's file and the running hash of what it holds.
pub struct Upload {
    /// The repository it was started in, and by whom: no one else may continue it.
    pub repo: String,
    pub user: String,
    pub path: PathBuf,
    pub len: u64,
    pub hasher: Sha256,
    /// Finished or cancelled: a request that waited for it finds it gone.
    pub done: bool,
}

impl Upload {
    /// A new upload's file, `id`'s in `blobs`.
    pub async fn create(
        blobs: &BlobStore,
        id: Uuid,
        repo: String,
        user: String,
    ) -> io::Result<Upload> {
        let path = blobs.upload_path(id);
        private_file(&path, blobs.file_mode).await?;
        Ok(Upload {
            repo,
            user,
            path,
            len: 0,
            hasher: Sha256::new(),
            done: false,
        })
    }

    /// Whether this caller may go on with it in this repository.
    pub fn continues(&self, repo: &Repo, caller: &Principal) -> bool {
        !self.done && self.repo == repo.to_string() && self.user == caller.user
    }

    /// Appends a request body. On any failure the upload is as it was before the request.
    pub async fn append(&mut self, body: axum::body::Body) -> Result<u64, OciError> {
        let (len0, hasher0) = (self.len, self.hasher.clone());
        let res = self.append_inner(body).await;
        if res.is_err() {
            self.len = len0;
            self.hasher = hasher0;
            if let Ok(f) = tokio::fs::OpenOptions::new()
                .write(true)
                .open(&self.path)
                .await
            {
                let _ = f.set_len(len0).await;
            }
        }
        res
    }

    async fn append_inner(&mut self, body: axum::body::Body) -> Result<u64, OciError> {
        let mut f = tokio::fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .await?;
        let mut stream = body.into_data_stream();
        let mut buf: Vec<u8> = Vec::with_capacity(WRITE_BUF);
        let mut added = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                OciError::upload_invalid(format!("the upload's body was cut short: {e}"))
            })?;
            self.hasher.update(&chunk);
            added += chunk.len() as u64;
            buf.extend_from_slice(&chunk);
            if buf.len() >= WRITE_BUF {
                f.write_all(&buf).await?;
                buf.clear();
            }
        }
        f.write_all(&buf).await?;
        f.flush().await?;
        self.len += added;
        Ok(added)
    }

    /// The digest of what was uploaded, as `sha256:<hex>`.
    pub fn digest(&self) -> String {
        format!("sha256:{}", hex::encode(self.hasher.clone().finalize()))
    }

    pub async fn sync(&self) -> io::Result<()> {
        tokio::fs::File::open(&self.path).await?.sync_all().await
    }
}

/// A new file (truncated if it exists) only the server may read: the blobs of private images.
async fn private_file(path: &Path, mode: u32) -> io::Result<tokio::fs::File> {
    tokio::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(mode)
        .open(path)
        .await
}
