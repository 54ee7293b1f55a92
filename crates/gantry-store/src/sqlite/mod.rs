//! The SQLite backend: the embedded default for `gantry up` and small clusters.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use gantry_api::TaskStatus;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{Row, Sqlite, SqlitePool, Transaction};
use uuid::Uuid;

use crate::shared::*;
use crate::text::cap_opt;
use crate::*;

mod attempts;
mod endpoints;
mod events;
mod holds;
mod images;
mod leases;
mod nodes;
mod rows;
mod secrets;
mod users;
mod volumes;
mod workflows;

use rows::*;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

#[derive(Clone)]
pub struct SqliteStore {
    /// Readers: WAL lets them run beside the writer.
    pool: SqlitePool,
    /// One connection for every write. SQLite has one writer at a time anyway; queueing here
    /// instead of in SQLite avoids SQLITE_BUSY when a read transaction upgrades to a write.
    writer: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating if needed) the database file and brings its schema up to date.
    /// Opens (creating if needed) the database at `path`. The file and its `-wal` and `-shm`
    /// are the owner's alone (0600): they hold every user's workflows, token hashes and
    /// sealed secrets. SQLite gives the `-wal` and `-shm` files the database file's mode, so
    /// it is made private before SQLite first opens it; files an older version left readable
    /// are made private here too.
    pub async fn open(path: &Path) -> Result<Self> {
        {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| StoreError::Backend(Box::new(e)))?;
        }
        let private = || -> Result<()> {
            use std::os::unix::fs::PermissionsExt;
            for suffix in ["", "-wal", "-shm"] {
                let mut name = path.as_os_str().to_owned();
                name.push(suffix);
                let p = std::path::PathBuf::from(name);
                match std::fs::metadata(&p) {
                    Ok(m) if m.permissions().mode() & 0o077 != 0 => {
                        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))
                            .map_err(|e| StoreError::Backend(Box::new(e)))?;
                    }
                    _ => {}
                }
            }
            Ok(())
        };
        private()?;
        let opts = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: a commit is on disk before we acknowledge it, even across power loss.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(opts.clone())
            .await?;
        MIGRATOR.run(&writer).await?;
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(opts)
            .await?;
        // An older version's `-wal` and `-shm` live on while SQLite has the database open.
        private()?;
        Ok(Self { pool, writer })
    }
}

async fn event(tx: &mut Transaction<'_, Sqlite>, ev: &NewEvent, now: Millis) -> Result<()> {
    sqlx::query(
        "INSERT INTO events (time, workflow_id, node, task, kind, message) VALUES (?, ?, ?, ?, ?, ?)",
    )
    .bind(now)
    .bind(ev.workflow_id.map(|u| u.to_string()))
    .bind(&ev.node)
    .bind(&ev.task)
    .bind(&ev.kind)
    .bind(cap_text(&ev.message))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// An event row about no workflow, node or task.
async fn plain_event(
    tx: &mut Transaction<'_, Sqlite>,
    kind: &str,
    message: String,
    now: Millis,
) -> Result<()> {
    event(tx, &ev(None, None, None, kind, message), now).await
}

// Each method lives in the file of its area (`workflows.rs`, `attempts.rs`, ...) as an
// inherent method of the same name; this impl is the index.
#[async_trait]
impl Store for SqliteStore {
    async fn create_user(
        &self,
        user: &User,
        token_hash: &str,
        expires_at: Option<Millis>,
        now: Millis,
    ) -> Result<()> {
        SqliteStore::create_user(self, user, token_hash, expires_at, now).await
    }

    async fn user_by_token(&self, token_hash: &str, now: Millis) -> Result<Option<User>> {
        SqliteStore::user_by_token(self, token_hash, now).await
    }

    async fn user_by_name(&self, name: &str) -> Result<Option<User>> {
        SqliteStore::user_by_name(self, name).await
    }

    async fn add_token(
        &self,
        user_id: Uuid,
        token_hash: &str,
        purpose: &str,
        expires_at: Option<Millis>,
        now: Millis,
    ) -> Result<String> {
        SqliteStore::add_token(self, user_id, token_hash, purpose, expires_at, now).await
    }

    async fn token_refusal(&self, token_hash: &str, now: Millis) -> Result<Option<TokenRefusal>> {
        SqliteStore::token_refusal(self, token_hash, now).await
    }

    async fn users(&self) -> Result<Vec<UserRow>> {
        SqliteStore::users(self).await
    }

    async fn set_user_disabled(
        &self,
        name: &str,
        disabled: bool,
        by: &str,
        now: Millis,
    ) -> Result<()> {
        SqliteStore::set_user_disabled(self, name, disabled, by, now).await
    }

    async fn delete_user(&self, name: &str, force: bool, by: &str, now: Millis) -> Result<()> {
        SqliteStore::delete_user(self, name, force, by, now).await
    }

    async fn tokens(&self, user: Option<&str>) -> Result<Vec<TokenRow>> {
        SqliteStore::tokens(self, user).await
    }

    async fn revoke_token(&self, id: &str, by: &str, now: Millis) -> Result<TokenRow> {
        SqliteStore::revoke_token(self, id, by, now).await
    }

    async fn rotate_token(
        &self,
        id: &str,
        token_hash: &str,
        expires_at: Option<Millis>,
        by: &str,
        now: Millis,
    ) -> Result<TokenRow> {
        SqliteStore::rotate_token(self, id, token_hash, expires_at, by, now).await
    }

    async fn count_users(&self) -> Result<u64> {
        SqliteStore::count_users(self).await
    }

    async fn create_workflow(&self, wf: &NewWorkflow, now: Millis) -> Result<()> {
        SqliteStore::create_workflow(self, wf, now).await
    }

    async fn list_workflows(&self, filter: &Visibility) -> Result<Vec<WorkflowRow>> {
        SqliteStore::list_workflows(self, filter).await
    }

    async fn resolve_workflow(&self, id_or_prefix: &str) -> Result<WorkflowRow> {
        SqliteStore::resolve_workflow(self, id_or_prefix).await
    }

    async fn workflows_by_prefix(&self, prefix: &str, limit: u32) -> Result<Vec<WorkflowRow>> {
        SqliteStore::workflows_by_prefix(self, prefix, limit).await
    }

    async fn workflow(&self, id: Uuid) -> Result<WorkflowRow> {
        SqliteStore::workflow(self, id).await
    }

    async fn tasks(&self, workflow_id: Uuid) -> Result<Vec<TaskRow>> {
        SqliteStore::tasks(self, workflow_id).await
    }

    async fn tasks_page(&self, workflow_id: Uuid, page: &TaskPage) -> Result<Vec<TaskRow>> {
        SqliteStore::tasks_page(self, workflow_id, page).await
    }

    async fn task_counts(&self, workflow_ids: &[Uuid]) -> Result<StatusCounts> {
        SqliteStore::task_counts(self, workflow_ids).await
    }

    async fn attempts_of(&self, task_ids: &[Uuid]) -> Result<Vec<AttemptRow>> {
        SqliteStore::attempts_of(self, task_ids).await
    }

    async fn job_task(&self, workflow_id: Uuid, job: &str) -> Result<Option<TaskRow>> {
        SqliteStore::job_task(self, workflow_id, job).await
    }
    async fn job_tasks(
        &self,
        workflow_id: Uuid,
        job: &str,
        from: Option<u32>,
        limit: u32,
    ) -> Result<Vec<TaskRow>> {
        SqliteStore::job_tasks(self, workflow_id, job, from, limit).await
    }
    async fn attempt_nodes(&self, workflow_id: Uuid) -> Result<Vec<String>> {
        SqliteStore::attempt_nodes(self, workflow_id).await
    }

    async fn attempts(&self, workflow_id: Uuid) -> Result<Vec<AttemptRow>> {
        SqliteStore::attempts(self, workflow_id).await
    }

    async fn request_stop(&self, workflow_id: Uuid, by: &str, now: Millis) -> Result<bool> {
        SqliteStore::request_stop(self, workflow_id, by, now).await
    }

    async fn active_with(&self, window: usize) -> Result<Vec<ActiveWorkflow>> {
        SqliteStore::active_with(self, window).await
    }

    async fn apply(&self, changes: &[Change], now: Millis) -> Result<()> {
        SqliteStore::apply(self, changes, now).await
    }

    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Millis,
        now: Millis,
    ) -> Result<Option<i64>> {
        SqliteStore::acquire_lease(self, name, holder, ttl, now).await
    }

    async fn release_lease(&self, name: &str, holder: &str, now: Millis) -> Result<()> {
        SqliteStore::release_lease(self, name, holder, now).await
    }

    async fn lease(&self, name: &str) -> Result<Option<LeaseRow>> {
        SqliteStore::lease(self, name).await
    }

    async fn attempt(&self, id: Uuid) -> Result<AttemptRow> {
        SqliteStore::attempt(self, id).await
    }

    async fn task(&self, id: Uuid) -> Result<TaskRow> {
        SqliteStore::task(self, id).await
    }

    async fn attempts_running(&self, ids: &[(Uuid, Millis)]) -> Result<Vec<bool>> {
        SqliteStore::attempts_running(self, ids).await
    }

    async fn end_attempts(&self, ends: &[(AttemptEnd, Millis)]) -> Result<Vec<EndOutcome>> {
        SqliteStore::end_attempts(self, ends).await
    }

    async fn live_attempts_on(&self, node: &str) -> Result<Vec<AttemptRow>> {
        SqliteStore::live_attempts_on(self, node).await
    }

    async fn node_usage(&self, node: Option<&str>) -> Result<Vec<NodeUsage>> {
        SqliteStore::node_usage(self, node).await
    }

    async fn register_node(&self, reg: &NodeRegistration, now: Millis) -> Result<NodeRow> {
        SqliteStore::register_node(self, reg, now).await
    }

    async fn nodes_seen(&self, seen: &[(String, Millis)]) -> Result<()> {
        SqliteStore::nodes_seen(self, seen).await
    }

    async fn node_disconnected(&self, name: &str, now: Millis) -> Result<()> {
        SqliteStore::node_disconnected(self, name, now).await
    }

    async fn set_node_state(
        &self,
        name: &str,
        state: NodeState,
        reason: &str,
        now: Millis,
    ) -> Result<()> {
        SqliteStore::set_node_state(self, name, state, reason, now).await
    }

    async fn silent_nodes(&self, before: Millis) -> Result<Vec<NodeRow>> {
        SqliteStore::silent_nodes(self, before).await
    }

    async fn nodes(&self) -> Result<Vec<NodeRow>> {
        SqliteStore::nodes(self).await
    }

    async fn nodes_version(&self) -> Result<i64> {
        Ok(sqlx::query_scalar("SELECT version FROM node_changes")
            .fetch_one(&self.pool)
            .await?)
    }

    async fn node(&self, name: &str) -> Result<NodeRow> {
        SqliteStore::node(self, name).await
    }

    async fn events(&self, q: &EventQuery) -> Result<Vec<EventRow>> {
        SqliteStore::events(self, q).await
    }

    async fn node_events(
        &self,
        node: &str,
        since: Millis,
        limit: u32,
        vis: &Visibility,
    ) -> Result<(Vec<EventRow>, bool)> {
        SqliteStore::node_events(self, node, since, limit, vis).await
    }

    async fn record_unknown_node_alerts(
        &self,
        alerts: &[UnknownNodeAlert],
        now: Millis,
    ) -> Result<usize> {
        SqliteStore::record_unknown_node_alerts(self, alerts, now).await
    }

    async fn record_event(&self, e: &NewEvent, now: Millis) -> Result<()> {
        SqliteStore::record_event(self, e, now).await
    }

    async fn log_size(&self, attempt_id: Uuid, stream: &str) -> Result<u64> {
        SqliteStore::log_size(self, attempt_id, stream).await
    }

    async fn set_log_size(&self, attempt_id: Uuid, stream: &str, bytes: u64) -> Result<()> {
        SqliteStore::set_log_size(self, attempt_id, stream, bytes).await
    }

    async fn add_chore(&self, c: &ChoreRow) -> Result<()> {
        SqliteStore::add_chore(self, c).await
    }

    async fn pending_chores(&self) -> Result<Vec<ChoreRow>> {
        SqliteStore::pending_chores(self).await
    }

    async fn chore_sent(&self, id: Uuid, node: &str) -> Result<()> {
        SqliteStore::chore_sent(self, id, node).await
    }

    async fn chore_done(&self, id: Uuid, error: Option<&str>, now: Millis) -> Result<()> {
        SqliteStore::chore_done(self, id, error, now).await
    }

    async fn put_secret(
        &self,
        key: &SecretKey,
        kind: SecretType,
        sealed: &str,
        by: &str,
        now: Millis,
    ) -> Result<()> {
        SqliteStore::put_secret(self, key, kind, sealed, by, now).await
    }

    async fn secret(&self, key: &SecretKey) -> Result<Option<SealedSecret>> {
        SqliteStore::secret(self, key).await
    }

    async fn list_secrets(&self, owners: &[(SecretScope, String)]) -> Result<Vec<SecretRow>> {
        SqliteStore::list_secrets(self, owners).await
    }

    async fn delete_secret(&self, key: &SecretKey, by: &str, now: Millis) -> Result<bool> {
        SqliteStore::delete_secret(self, key, by, now).await
    }

    async fn holds(&self, node: Option<&str>, include_released: bool) -> Result<Vec<HoldRow>> {
        SqliteStore::holds(self, node, include_released).await
    }

    async fn hold(&self, id: Uuid) -> Result<HoldRow> {
        SqliteStore::hold(self, id).await
    }

    async fn ended_episodes(
        &self,
        fingerprints: &[String],
    ) -> Result<std::collections::HashSet<(String, String)>> {
        SqliteStore::ended_episodes(self, fingerprints).await
    }

    async fn apply_holds(&self, changes: &[HoldChange], now: Millis) -> Result<()> {
        SqliteStore::apply_holds(self, changes, now).await
    }

    async fn publish_proxy_views(
        &self,
        replica: &str,
        views: &[ProxyView],
        forget_before: Millis,
        now: Millis,
    ) -> Result<()> {
        SqliteStore::publish_proxy_views(self, replica, views, forget_before, now).await
    }

    async fn touch_proxy_views(&self, replica: &str, now: Millis) -> Result<bool> {
        SqliteStore::touch_proxy_views(self, replica, now).await
    }

    async fn proxy_views(&self, since: Millis) -> Result<Vec<ProxyViewRow>> {
        SqliteStore::proxy_views(self, since).await
    }

    async fn sign_out_session(&self, sid: &str, expires_at: Millis, now: Millis) -> Result<()> {
        SqliteStore::sign_out_session(self, sid, expires_at, now).await
    }

    async fn session_signed_out(&self, sid: &str, now: Millis) -> Result<bool> {
        SqliteStore::session_signed_out(self, sid, now).await
    }
    async fn put_confirmation(&self, c: &NewConfirmation, now: Millis) -> Result<()> {
        SqliteStore::put_confirmation(self, c, now).await
    }
    async fn take_confirmation(
        &self,
        kind: ConfirmationKind,
        id_hash: &str,
        user_id: Uuid,
        action: &str,
        now: Millis,
    ) -> Result<bool> {
        SqliteStore::take_confirmation(self, kind, id_hash, user_id, action, now).await
    }

    async fn holds_version(&self) -> Result<i64> {
        SqliteStore::holds_version(self).await
    }

    async fn set_attempt_address(&self, attempt: Uuid, address: &str) -> Result<()> {
        SqliteStore::set_attempt_address(self, attempt, address).await
    }

    async fn create_endpoint(&self, e: &EndpointRow, now: Millis) -> Result<()> {
        SqliteStore::create_endpoint(self, e, now).await
    }

    async fn endpoint(&self, name: &str) -> Result<EndpointRow> {
        SqliteStore::endpoint(self, name).await
    }

    async fn endpoints(&self) -> Result<Vec<EndpointRow>> {
        SqliteStore::endpoints(self).await
    }

    async fn delete_endpoint(&self, name: &str, by: &str, now: Millis) -> Result<()> {
        SqliteStore::delete_endpoint(self, name, by, now).await
    }

    async fn create_takeover(&self, t: &TakeoverRow, now: Millis) -> Result<()> {
        SqliteStore::create_takeover(self, t, now).await
    }

    async fn takeovers(&self, endpoint: Option<&str>, open_only: bool) -> Result<Vec<TakeoverRow>> {
        SqliteStore::takeovers(self, endpoint, open_only).await
    }

    async fn takeover(&self, id: Uuid) -> Result<TakeoverRow> {
        SqliteStore::takeover(self, id).await
    }

    async fn apply_endpoints(&self, changes: &[EndpointChange], now: Millis) -> Result<()> {
        SqliteStore::apply_endpoints(self, changes, now).await
    }

    async fn add_endpoint_token(
        &self,
        endpoint: &str,
        hash: &str,
        by: &str,
        expires_at: Option<Millis>,
        now: Millis,
    ) -> Result<String> {
        SqliteStore::add_endpoint_token(self, endpoint, hash, by, expires_at, now).await
    }

    async fn endpoint_token(&self, hash: &str, now: Millis) -> Result<Option<String>> {
        SqliteStore::endpoint_token(self, hash, now).await
    }

    async fn endpoint_tokens(&self, endpoint: Option<&str>) -> Result<Vec<EndpointTokenRow>> {
        SqliteStore::endpoint_tokens(self, endpoint).await
    }

    async fn endpoint_token_by_id(&self, id: &str) -> Result<EndpointTokenRow> {
        SqliteStore::endpoint_token_by_id(self, id).await
    }

    async fn revoke_endpoint_token(&self, id: &str, by: &str, now: Millis) -> Result<()> {
        SqliteStore::revoke_endpoint_token(self, id, by, now).await
    }

    async fn setting(&self, key: &str) -> Result<Option<String>> {
        SqliteStore::setting(self, key).await
    }

    async fn set_setting(&self, key: &str, value: &str, by: &str, now: Millis) -> Result<()> {
        SqliteStore::set_setting(self, key, value, by, now).await
    }

    async fn add_storage(&self, s: &StorageRow, now: Millis) -> Result<()> {
        SqliteStore::add_storage(self, s, now).await
    }

    async fn storages(&self) -> Result<Vec<StorageRow>> {
        SqliteStore::storages(self).await
    }

    async fn delete_storage(&self, name: &str, by: &str, now: Millis) -> Result<()> {
        SqliteStore::delete_storage(self, name, by, now).await
    }

    async fn create_volume(&self, v: &VolumeRow, now: Millis) -> Result<()> {
        SqliteStore::create_volume(self, v, now).await
    }

    async fn ensure_volume(&self, v: &VolumeRow, now: Millis) -> Result<VolumeRow> {
        SqliteStore::ensure_volume(self, v, now).await
    }

    async fn volume(
        &self,
        scope: VolumeScope,
        owner: &str,
        name: &str,
    ) -> Result<Option<VolumeRow>> {
        SqliteStore::volume(self, scope, owner, name).await
    }

    async fn volumes(&self, owners: Option<&[(VolumeScope, String)]>) -> Result<Vec<VolumeRow>> {
        SqliteStore::volumes(self, owners).await
    }

    async fn volume_users(&self, id: Uuid) -> Result<Vec<Uuid>> {
        SqliteStore::volume_users(self, id).await
    }

    async fn delete_volume(&self, id: Uuid, by: &str, now: Millis) -> Result<()> {
        SqliteStore::delete_volume(self, id, by, now).await
    }
}

#[async_trait]
impl ImageIndex for SqliteStore {
    async fn put_blob(
        &self,
        digest: &str,
        size: i64,
        link: Option<Repository<'_>>,
        now: Millis,
    ) -> Result<()> {
        SqliteStore::put_blob(self, digest, size, link, now).await
    }

    async fn link_blobs(
        &self,
        repo: Repository<'_>,
        digests: &[String],
        now: Millis,
    ) -> Result<u64> {
        SqliteStore::link_blobs(self, repo, digests, now).await
    }

    async fn linked_blobs(
        &self,
        repo: Repository<'_>,
        digests: &[String],
    ) -> Result<std::collections::HashSet<String>> {
        SqliteStore::linked_blobs(self, repo, digests).await
    }

    async fn blob(&self, digest: &str) -> Result<Option<BlobRow>> {
        SqliteStore::blob(self, digest).await
    }

    async fn blobs(&self) -> Result<Vec<BlobRow>> {
        SqliteStore::blobs(self).await
    }

    async fn touch_blob(&self, digest: &str, now: Millis) -> Result<()> {
        SqliteStore::touch_blob(self, digest, now).await
    }

    async fn put_image(
        &self,
        repo: Repository<'_>,
        m: &NewManifest,
        image: Option<&ImageRow>,
        by: &str,
        now: Millis,
    ) -> Result<()> {
        SqliteStore::put_image(self, repo, m, image, by, now).await
    }

    async fn manifest(&self, digest: &str) -> Result<Option<ManifestRow>> {
        SqliteStore::manifest(self, digest).await
    }

    async fn manifest_refs(&self, manifests: Option<&[String]>) -> Result<Vec<(String, String)>> {
        SqliteStore::manifest_refs(self, manifests).await
    }

    async fn image(&self, key: &ImageKey) -> Result<Option<ImageRow>> {
        SqliteStore::image(self, key).await
    }

    async fn images(&self, repo: Option<(&str, &str, &str)>) -> Result<Vec<ImageRow>> {
        SqliteStore::images(self, repo).await
    }

    async fn image_by_build_key(
        &self,
        scope: &str,
        owner: &str,
        build_key: &str,
    ) -> Result<Option<ImageRow>> {
        SqliteStore::image_by_build_key(self, scope, owner, build_key).await
    }

    async fn touch_image(&self, key: &ImageKey, now: Millis) -> Result<()> {
        SqliteStore::touch_image(self, key, now).await
    }

    async fn delete_images(
        &self,
        keys: &[ImageKey],
        by: &str,
        why: &str,
        now: Millis,
    ) -> Result<u64> {
        SqliteStore::delete_images(self, keys, by, why, now).await
    }

    async fn delete_blobs(&self, digests: &[String], now: Millis) -> Result<()> {
        SqliteStore::delete_blobs(self, digests, now).await
    }

    async fn set_image_build_key(&self, key: &ImageKey, build_key: Option<&str>) -> Result<bool> {
        SqliteStore::set_image_build_key(self, key, build_key).await
    }
}
