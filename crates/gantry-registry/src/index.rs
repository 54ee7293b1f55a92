//! What the registry asks of the store: exactly the calls it makes, with the store's own types,
//! so that a reader knows from here which rows it may read and write. Every `Store` is one
//! ([`ImageIndex`] for `Arc<S>`, as the server holds its store).

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use gantry_store::{
    BlobRow, ImageKey, ImageRow, ManifestRow, Millis, NewManifest, Repository, Result, Store, User,
};

/// The object cache's index: images (tags), manifests and what they reference, blob rows and
/// their links. See [`Store`] for what each call does.
#[async_trait]
pub trait ImageIndex: Send + Sync {
    async fn images(&self, repo: Option<Repository<'_>>) -> Result<Vec<ImageRow>>;
    async fn image(&self, key: &ImageKey) -> Result<Option<ImageRow>>;
    async fn touch_image(&self, key: &ImageKey, now: Millis) -> Result<()>;
    async fn put_image(
        &self,
        repo: Repository<'_>,
        manifest: &NewManifest,
        image: Option<&ImageRow>,
        by: &str,
        now: Millis,
    ) -> Result<()>;
    async fn delete_images(
        &self,
        keys: &[ImageKey],
        by: &str,
        why: &str,
        now: Millis,
    ) -> Result<u64>;
    async fn manifest(&self, digest: &str) -> Result<Option<ManifestRow>>;
    async fn manifest_refs(&self, manifests: Option<&[String]>) -> Result<Vec<(String, String)>>;
    async fn blob(&self, digest: &str) -> Result<Option<BlobRow>>;
    async fn blobs(&self) -> Result<Vec<BlobRow>>;
    async fn put_blob(
        &self,
        digest: &str,
        size: i64,
        link: Option<Repository<'_>>,
        now: Millis,
    ) -> Result<()>;
    async fn touch_blob(&self, digest: &str, now: Millis) -> Result<()>;
    async fn link_blobs(
        &self,
        repo: Repository<'_>,
        digests: &[String],
        now: Millis,
    ) -> Result<u64>;
    async fn linked_blobs(
        &self,
        repo: Repository<'_>,
        digests: &[String],
    ) -> Result<HashSet<String>>;
    async fn delete_blobs(&self, digests: &[String], now: Millis) -> Result<()>;
    /// The administrator's settings: the cache's size limit ([`super::CACHE_BYTES_KEY`]).
    async fn setting(&self, key: &str) -> Result<Option<String>>;
    /// A user, for the group of a user's repository (what an agent may mount into it).
    async fn user_by_name(&self, name: &str) -> Result<Option<User>>;
}

#[async_trait]
impl<S: Store + ?Sized> ImageIndex for Arc<S> {
    async fn images(&self, repo: Option<Repository<'_>>) -> Result<Vec<ImageRow>> {
        Store::images(&**self, repo).await
    }
    async fn image(&self, key: &ImageKey) -> Result<Option<ImageRow>> {
        Store::image(&**self, key).await
    }
    async fn touch_image(&self, key: &ImageKey, now: Millis) -> Result<()> {
        Store::touch_image(&**self, key, now).await
    }
    async fn put_image(
        &self,
        repo: Repository<'_>,
        manifest: &NewManifest,
        image: Option<&ImageRow>,
        by: &str,
        now: Millis,
    ) -> Result<()> {
        Store::put_image(&**self, repo, manifest, image, by, now).await
    }
    async fn delete_images(
        &self,
        keys: &[ImageKey],
        by: &str,
        why: &str,
        now: Millis,
    ) -> Result<u64> {
        Store::delete_images(&**self, keys, by, why, now).await
    }
    async fn manifest(&self, digest: &str) -> Result<Option<ManifestRow>> {
        Store::manifest(&**self, digest).await
    }
    async fn manifest_refs(&self, manifests: Option<&[String]>) -> Result<Vec<(String, String)>> {
        Store::manifest_refs(&**self, manifests).await
    }
    async fn blob(&self, digest: &str) -> Result<Option<BlobRow>> {
        Store::blob(&**self, digest).await
    }
    async fn blobs(&self) -> Result<Vec<BlobRow>> {
        Store::blobs(&**self).await
    }
    async fn put_blob(
        &self,
        digest: &str,
        size: i64,
        link: Option<Repository<'_>>,
        now: Millis,
    ) -> Result<()> {
        Store::put_blob(&**self, digest, size, link, now).await
    }
    async fn touch_blob(&self, digest: &str, now: Millis) -> Result<()> {
        Store::touch_blob(&**self, digest, now).await
    }
    async fn link_blobs(
        &self,
        repo: Repository<'_>,
        digests: &[String],
        now: Millis,
    ) -> Result<u64> {
        Store::link_blobs(&**self, repo, digests, now).await
    }
    async fn linked_blobs(
        &self,
        repo: Repository<'_>,
        digests: &[String],
    ) -> Result<HashSet<String>> {
        Store::linked_blobs(&**self, repo, digests).await
    }
    async fn delete_blobs(&self, digests: &[String], now: Millis) -> Result<()> {
        Store::delete_blobs(&**self, digests, now).await
    }
    async fn setting(&self, key: &str) -> Result<Option<String>> {
        Store::setting(&**self, key).await
    }
    async fn user_by_name(&self, name: &str) -> Result<Option<User>> {
        Store::user_by_name(&**self, name).await
    }
}
