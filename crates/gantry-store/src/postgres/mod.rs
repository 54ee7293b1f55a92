//! The PostgreSQL backend: one database that several servers may share, or one that an
//! operator already runs and backs up.
//!
//! It keeps the SQLite backend's guarantees with the same SQL, written in PostgreSQL's
//! dialect, and one rule SQLite gets for free: every writing transaction first takes the
//! store's advisory lock ([`PgStore::write_tx`]). SQLite has one writer at a time; here
//! writers on other connections and in other server processes queue on that lock, so that
//!
//! - the guards read the latest committed state: a transaction at READ COMMITTED (the default)
//!   takes a fresh snapshot for each statement, and every statement after the lock sees every
//!   write committed before it (the placement guard in `apply`, `end_attempt`'s staleness
//!   check, `register_node`'s next sequence number, the last administrator);
//! - event sequence numbers are commit order: an identity column hands out numbers as rows
//!   are inserted, and with one writer at a time a number is never handed out before an
//!   earlier one is committed (or rolled back, leaving a gap), so a reader following the log
//!   by `seq > last` misses nothing. PostgreSQL releases the lock only once the commit is
//!   visible to others.
//!
//! Reads that must be one consistent snapshot ([`Store::active`]) run in a REPEATABLE READ
//! READ ONLY transaction; single-statement reads go straight to the pool.

use std::borrow::Cow;
use std::str::FromStr;

use async_trait::async_trait;
use gantry_api::TaskStatus;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{Connection, PgPool, Postgres, Row, Transaction};
use uuid::Uuid;

use crate::shared::*;
use crate::*;

mod attempts;
mod endpoints;
mod events;
mod holds;
mod images;
mod leases;
mod nodes;
mod secrets;
mod users;
mod volumes;
mod workflows;

use crate::rows::*;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations-pg");

/// The key of the store's write lock ("gantry" in ASCII). Any session that writes the
/// store's tables must hold it; nothing else in a database should use this key.
const WRITE_LOCK: i64 = 0x6761_6e74_7279;

#[derive(Clone)]
pub struct PgStore {
    /// Readers: never queued behind writers waiting for the write lock.
    pool: PgPool,
    /// Every write. A few connections, so that the next writer's transaction is open and
    /// waiting on the lock when the last one commits; more would only wait there too.
    writer: PgPool,
}

/// See [`PgStore::connect`].
const IDLE_IN_TRANSACTION: &str = "5s";
/// The channel of [`Store::announce_change`].
const ANNOUNCE_CHANNEL: &str = "gantry_changes";

impl PgStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/database`, any
    /// libpq-style parameter sqlx knows) and brings its schema up to date. Servers starting
    /// at once are safe: sqlx migrates under an advisory lock of its own.
    pub async fn connect(url: &str) -> Result<Self> {
        // A server paused or cut off inside a transaction would hold the write lock, and every
        // other replica's writes (the lease's renewal and takeover among them) with it:
        // PostgreSQL ends such a session after a few seconds idle in its transaction (ours
        // are milliseconds between statements), which rolls it back and frees the lock.
        let opts = PgConnectOptions::from_str(url)?
            .application_name("gantry")
            .options([("idle_in_transaction_session_timeout", IDLE_IN_TRANSACTION)]);
        // One connection first, for its error: a pool retries a refused connection until its
        // timeout and then says only that it timed out.
        sqlx::PgConnection::connect_with(&opts)
            .await?
            .close()
            .await?;
        let writer = PgPoolOptions::new()
            .max_connections(4)
            .connect_with(opts.clone())
            .await?;
        MIGRATOR.run(&writer).await?;
        let pool = PgPoolOptions::new()
            .max_connections(12)
            .connect_with(opts)
            .await?;
        Ok(Self { pool, writer })
    }

    /// A transaction for a writing call, holding the store's write lock (see the module's
    /// documentation for why). It is taken first, before any read of the transaction, and
    /// lasts until commit or rollback. Writers must stay at READ COMMITTED: at REPEATABLE
    /// READ the snapshot would be taken before the lock was granted.
    async fn write_tx(&self) -> Result<Transaction<'static, Postgres>> {
        let mut tx = self.writer.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(WRITE_LOCK)
            .execute(&mut *tx)
            .await?;
        Ok(tx)
    }

    /// A read-only transaction whose statements all see the same committed state.
    async fn snapshot(&self) -> Result<Transaction<'static, Postgres>> {
        Ok(self
            .pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await?)
    }
}

/// Free text as stored here: capped as in every backend ([`cap_text`]), and with each NUL
/// character, which PostgreSQL's text cannot hold (SQLite's can), made U+FFFD: an agent's or
/// an alert's words must not fail the write they belong to.
fn pg_text(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(cap_text(&text.replace('\0', "\u{FFFD}")).into_owned())
    } else {
        cap_text(text)
    }
}

/// [`pg_text`] for an optional field.
fn pg_opt(text: &Option<String>) -> Option<Cow<'_, str>> {
    text.as_deref().map(pg_text)
}

async fn event(tx: &mut Transaction<'_, Postgres>, ev: &NewEvent, now: Millis) -> Result<()> {
    sqlx::query(
        "INSERT INTO events (time, workflow_id, node, task, kind, message)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(now)
    .bind(ev.workflow_id.map(|u| u.to_string()))
    .bind(&ev.node)
    .bind(&ev.task)
    .bind(&ev.kind)
    .bind(pg_text(&ev.message))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// An event row about no workflow, node or task.
async fn plain_event(
    tx: &mut Transaction<'_, Postgres>,
    kind: &str,
    message: String,
    now: Millis,
) -> Result<()> {
    event(tx, &ev(None, None, None, kind, message), now).await
}

// Each method lives in the file of its area (`workflows.rs`, `attempts.rs`, ...) as an
// inherent method of the same name; this impl is the index.
#[async_trait]
impl Store for PgStore {
    async fn create_user(
        &self,
        user: &User,
        token_hash: &str,
        expires_at: Option<Millis>,
        now: Millis,
    ) -> Result<()> {
        PgStore::create_user(self, user, token_hash, expires_at, now).await
    }

    async fn user_by_token(&self, token_hash: &str, now: Millis) -> Result<Option<User>> {
        PgStore::user_by_token(self, token_hash, now).await
    }

    async fn user_by_name(&self, name: &str) -> Result<Option<User>> {
        PgStore::user_by_name(self, name).await
    }

    async fn add_token(
        &self,
        user_id: Uuid,
        token_hash: &str,
        purpose: &str,
        expires_at: Option<Millis>,
        now: Millis,
    ) -> Result<String> {
        PgStore::add_token(self, user_id, token_hash, purpose, expires_at, now).await
    }

    async fn token_refusal(&self, token_hash: &str, now: Millis) -> Result<Option<TokenRefusal>> {
        PgStore::token_refusal(self, token_hash, now).await
    }

    async fn users(&self) -> Result<Vec<UserRow>> {
        PgStore::users(self).await
    }

    async fn set_user_disabled(
        &self,
        name: &str,
        disabled: bool,
        by: &str,
        now: Millis,
    ) -> Result<()> {
        PgStore::set_user_disabled(self, name, disabled, by, now).await
    }

    async fn delete_user(&self, name: &str, force: bool, by: &str, now: Millis) -> Result<()> {
        PgStore::delete_user(self, name, force, by, now).await
    }

    async fn tokens(&self, user: Option<&str>) -> Result<Vec<TokenRow>> {
        PgStore::tokens(self, user).await
    }

    async fn revoke_token(&self, id: &str, by: &str, now: Millis) -> Result<TokenRow> {
        PgStore::revoke_token(self, id, by, now).await
    }

    async fn rotate_token(
        &self,
        id: &str,
        token_hash: &str,
        expires_at: Option<Millis>,
        by: &str,
        now: Millis,
    ) -> Result<TokenRow> {
        PgStore::rotate_token(self, id, token_hash, expires_at, by, now).await
    }

    async fn count_users(&self) -> Result<u64> {
        PgStore::count_users(self).await
    }

    async fn create_workflow(&self, wf: &NewWorkflow, now: Millis) -> Result<()> {
        PgStore::create_workflow(self, wf, now).await
    }

    async fn list_workflows(&self, filter: &Visibility) -> Result<Vec<WorkflowRow>> {
        PgStore::list_workflows(self, filter).await
    }

    async fn resolve_workflow(&self, id_or_prefix: &str) -> Result<WorkflowRow> {
        PgStore::resolve_workflow(self, id_or_prefix).await
    }

    async fn workflows_by_prefix(&self, prefix: &str, limit: u32) -> Result<Vec<WorkflowRow>> {
        PgStore::workflows_by_prefix(self, prefix, limit).await
    }

    async fn workflow(&self, id: Uuid) -> Result<WorkflowRow> {
        PgStore::workflow(self, id).await
    }

    async fn tasks(&self, workflow_id: Uuid) -> Result<Vec<TaskRow>> {
        PgStore::tasks(self, workflow_id).await
    }

    async fn tasks_page(&self, workflow_id: Uuid, page: &TaskPage) -> Result<Vec<TaskRow>> {
        PgStore::tasks_page(self, workflow_id, page).await
    }

    async fn task_counts(&self, workflow_ids: &[Uuid]) -> Result<StatusCounts> {
        PgStore::task_counts(self, workflow_ids).await
    }

    async fn attempts_of(&self, task_ids: &[Uuid]) -> Result<Vec<AttemptRow>> {
        PgStore::attempts_of(self, task_ids).await
    }

    async fn job_task(&self, workflow_id: Uuid, job: &str) -> Result<Option<TaskRow>> {
        PgStore::job_task(self, workflow_id, job).await
    }
    async fn job_tasks(
        &self,
        workflow_id: Uuid,
        job: &str,
        from: Option<u32>,
        limit: u32,
    ) -> Result<Vec<TaskRow>> {
        PgStore::job_tasks(self, workflow_id, job, from, limit).await
    }
    async fn attempt_nodes(&self, workflow_id: Uuid) -> Result<Vec<String>> {
        PgStore::attempt_nodes(self, workflow_id).await
    }

    async fn attempts(&self, workflow_id: Uuid) -> Result<Vec<AttemptRow>> {
        PgStore::attempts(self, workflow_id).await
    }

    async fn request_stop(&self, workflow_id: Uuid, by: &str, now: Millis) -> Result<bool> {
        PgStore::request_stop(self, workflow_id, by, now).await
    }

    async fn active_with(&self, window: usize) -> Result<Vec<ActiveWorkflow>> {
        PgStore::active_with(self, window).await
    }

    async fn apply(&self, changes: &[Change], now: Millis) -> Result<()> {
        PgStore::apply(self, changes, now).await
    }

    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Millis,
        now: Millis,
    ) -> Result<Option<i64>> {
        PgStore::acquire_lease(self, name, holder, ttl, now).await
    }

    async fn release_lease(&self, name: &str, holder: &str, now: Millis) -> Result<()> {
        PgStore::release_lease(self, name, holder, now).await
    }

    async fn lease(&self, name: &str) -> Result<Option<LeaseRow>> {
        PgStore::lease(self, name).await
    }

    async fn attempt(&self, id: Uuid) -> Result<AttemptRow> {
        PgStore::attempt(self, id).await
    }

    async fn task(&self, id: Uuid) -> Result<TaskRow> {
        PgStore::task(self, id).await
    }

    async fn attempts_running(&self, ids: &[(Uuid, Millis)]) -> Result<Vec<bool>> {
        PgStore::attempts_running(self, ids).await
    }

    async fn end_attempts(&self, ends: &[(AttemptEnd, Millis)]) -> Result<Vec<EndOutcome>> {
        PgStore::end_attempts(self, ends).await
    }

    async fn live_attempts_on(&self, node: &str) -> Result<Vec<AttemptRow>> {
        PgStore::live_attempts_on(self, node).await
    }

    async fn node_usage(&self, node: Option<&str>) -> Result<Vec<NodeUsage>> {
        PgStore::node_usage(self, node).await
    }

    async fn register_node(&self, reg: &NodeRegistration, now: Millis) -> Result<NodeRow> {
        PgStore::register_node(self, reg, now).await
    }

    async fn nodes_seen(&self, seen: &[(String, Millis)]) -> Result<()> {
        PgStore::nodes_seen(self, seen).await
    }

    async fn node_disconnected(&self, name: &str, now: Millis) -> Result<()> {
        PgStore::node_disconnected(self, name, now).await
    }

    async fn set_node_state(
        &self,
        name: &str,
        state: NodeState,
        reason: &str,
        now: Millis,
    ) -> Result<()> {
        PgStore::set_node_state(self, name, state, reason, now).await
    }

    async fn silent_nodes(&self, before: Millis) -> Result<Vec<NodeRow>> {
        PgStore::silent_nodes(self, before).await
    }

    async fn nodes(&self) -> Result<Vec<NodeRow>> {
        PgStore::nodes(self).await
    }

    async fn nodes_version(&self) -> Result<i64> {
        Ok(sqlx::query_scalar("SELECT version FROM node_changes")
            .fetch_one(&self.pool)
            .await?)
    }

    async fn node(&self, name: &str) -> Result<NodeRow> {
        PgStore::node(self, name).await
    }

    async fn events(&self, q: &EventQuery) -> Result<Vec<EventRow>> {
        PgStore::events(self, q).await
    }

    async fn node_events(
        &self,
        node: &str,
        since: Millis,
        limit: u32,
        vis: &Visibility,
    ) -> Result<(Vec<EventRow>, bool)> {
        PgStore::node_events(self, node, since, limit, vis).await
    }

    async fn record_unknown_node_alerts(
        &self,
        alerts: &[UnknownNodeAlert],
        now: Millis,
    ) -> Result<usize> {
        PgStore::record_unknown_node_alerts(self, alerts, now).await
    }

    async fn record_event(&self, e: &NewEvent, now: Millis) -> Result<()> {
        PgStore::record_event(self, e, now).await
    }

    async fn log_size(&self, attempt_id: Uuid, stream: &str) -> Result<u64> {
        PgStore::log_size(self, attempt_id, stream).await
    }

    async fn set_log_size(&self, attempt_id: Uuid, stream: &str, bytes: u64) -> Result<()> {
        PgStore::set_log_size(self, attempt_id, stream, bytes).await
    }

    async fn add_chore(&self, c: &ChoreRow) -> Result<()> {
        PgStore::add_chore(self, c).await
    }

    async fn pending_chores(&self) -> Result<Vec<ChoreRow>> {
        PgStore::pending_chores(self).await
    }

    async fn chore_sent(&self, id: Uuid, node: &str) -> Result<()> {
        PgStore::chore_sent(self, id, node).await
    }

    async fn chore_done(&self, id: Uuid, error: Option<&str>, now: Millis) -> Result<()> {
        PgStore::chore_done(self, id, error, now).await
    }

    async fn put_secret(
        &self,
        key: &SecretKey,
        kind: SecretType,
        sealed: &str,
        by: &str,
        now: Millis,
    ) -> Result<()> {
        PgStore::put_secret(self, key, kind, sealed, by, now).await
    }

    async fn secret(&self, key: &SecretKey) -> Result<Option<SealedSecret>> {
        PgStore::secret(self, key).await
    }

    async fn list_secrets(&self, owners: &[(SecretScope, String)]) -> Result<Vec<SecretRow>> {
        PgStore::list_secrets(self, owners).await
    }

    async fn delete_secret(&self, key: &SecretKey, by: &str, now: Millis) -> Result<bool> {
        PgStore::delete_secret(self, key, by, now).await
    }

    async fn holds(&self, node: Option<&str>, include_released: bool) -> Result<Vec<HoldRow>> {
        PgStore::holds(self, node, include_released).await
    }

    async fn hold(&self, id: Uuid) -> Result<HoldRow> {
        PgStore::hold(self, id).await
    }

    async fn ended_episodes(
        &self,
        fingerprints: &[String],
    ) -> Result<std::collections::HashSet<(String, String)>> {
        PgStore::ended_episodes(self, fingerprints).await
    }

    async fn apply_holds(&self, changes: &[HoldChange], now: Millis) -> Result<()> {
        PgStore::apply_holds(self, changes, now).await
    }

    async fn publish_proxy_views(
        &self,
        replica: &str,
        views: &[ProxyView],
        forget_before: Millis,
        now: Millis,
    ) -> Result<()> {
        PgStore::publish_proxy_views(self, replica, views, forget_before, now).await
    }

    async fn touch_proxy_views(&self, replica: &str, now: Millis) -> Result<bool> {
        PgStore::touch_proxy_views(self, replica, now).await
    }

    async fn proxy_views(&self, since: Millis) -> Result<Vec<ProxyViewRow>> {
        PgStore::proxy_views(self, since).await
    }

    async fn sign_out_session(&self, sid: &str, expires_at: Millis, now: Millis) -> Result<()> {
        PgStore::sign_out_session(self, sid, expires_at, now).await
    }

    async fn session_signed_out(&self, sid: &str, now: Millis) -> Result<bool> {
        PgStore::session_signed_out(self, sid, now).await
    }
    async fn put_confirmation(&self, c: &NewConfirmation, now: Millis) -> Result<()> {
        PgStore::put_confirmation(self, c, now).await
    }
    async fn take_confirmation(
        &self,
        kind: ConfirmationKind,
        id_hash: &str,
        user_id: Uuid,
        action: &str,
        now: Millis,
    ) -> Result<bool> {
        PgStore::take_confirmation(self, kind, id_hash, user_id, action, now).await
    }

    async fn announce_change(&self) -> Result<()> {
        sqlx::query("SELECT pg_notify($1, '')")
            .bind(ANNOUNCE_CHANNEL)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn announcements(&self) -> Result<Option<tokio::sync::mpsc::Receiver<()>>> {
        let mut listener = sqlx::postgres::PgListener::connect_with(&self.pool).await?;
        listener.listen(ANNOUNCE_CHANNEL).await?;
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tokio::spawn(async move {
            loop {
                // A lost connection is made again by the listener, which says so as an error
                // (what was announced meanwhile is lost: the leader's timer still ticks).
                match listener.recv().await {
                    Ok(_) => {
                        if let Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) =
                            tx.try_send(())
                        {
                            return;
                        }
                    }
                    Err(_) => tokio::time::sleep(std::time::Duration::from_millis(500)).await,
                }
            }
        });
        Ok(Some(rx))
    }

    async fn holds_version(&self) -> Result<i64> {
        PgStore::holds_version(self).await
    }

    async fn set_attempt_address(&self, attempt: Uuid, address: &str) -> Result<()> {
        PgStore::set_attempt_address(self, attempt, address).await
    }

    async fn create_endpoint(&self, e: &EndpointRow, now: Millis) -> Result<()> {
        PgStore::create_endpoint(self, e, now).await
    }

    async fn endpoint(&self, name: &str) -> Result<EndpointRow> {
        PgStore::endpoint(self, name).await
    }

    async fn endpoints(&self) -> Result<Vec<EndpointRow>> {
        PgStore::endpoints(self).await
    }

    async fn delete_endpoint(&self, name: &str, by: &str, now: Millis) -> Result<()> {
        PgStore::delete_endpoint(self, name, by, now).await
    }

    async fn create_takeover(&self, t: &TakeoverRow, now: Millis) -> Result<()> {
        PgStore::create_takeover(self, t, now).await
    }

    async fn takeovers(&self, endpoint: Option<&str>, open_only: bool) -> Result<Vec<TakeoverRow>> {
        PgStore::takeovers(self, endpoint, open_only).await
    }

    async fn takeover(&self, id: Uuid) -> Result<TakeoverRow> {
        PgStore::takeover(self, id).await
    }

    async fn apply_endpoints(&self, changes: &[EndpointChange], now: Millis) -> Result<()> {
        PgStore::apply_endpoints(self, changes, now).await
    }

    async fn add_endpoint_token(
        &self,
        endpoint: &str,
        hash: &str,
        by: &str,
        expires_at: Option<Millis>,
        now: Millis,
    ) -> Result<String> {
        PgStore::add_endpoint_token(self, endpoint, hash, by, expires_at, now).await
    }

    async fn endpoint_token(&self, hash: &str, now: Millis) -> Result<Option<String>> {
        PgStore::endpoint_token(self, hash, now).await
    }

    async fn endpoint_tokens(&self, endpoint: Option<&str>) -> Result<Vec<EndpointTokenRow>> {
        PgStore::endpoint_tokens(self, endpoint).await
    }

    async fn endpoint_token_by_id(&self, id: &str) -> Result<EndpointTokenRow> {
        PgStore::endpoint_token_by_id(self, id).await
    }

    async fn revoke_endpoint_token(&self, id: &str, by: &str, now: Millis) -> Result<()> {
        PgStore::revoke_endpoint_token(self, id, by, now).await
    }

    async fn setting(&self, key: &str) -> Result<Option<String>> {
        PgStore::setting(self, key).await
    }

    async fn set_setting(&self, key: &str, value: &str, by: &str, now: Millis) -> Result<()> {
        PgStore::set_setting(self, key, value, by, now).await
    }

    async fn add_storage(&self, s: &StorageRow, now: Millis) -> Result<()> {
        PgStore::add_storage(self, s, now).await
    }

    async fn storages(&self) -> Result<Vec<StorageRow>> {
        PgStore::storages(self).await
    }

    async fn delete_storage(&self, name: &str, by: &str, now: Millis) -> Result<()> {
        PgStore::delete_storage(self, name, by, now).await
    }

    async fn create_volume(&self, v: &VolumeRow, now: Millis) -> Result<()> {
        PgStore::create_volume(self, v, now).await
    }

    async fn ensure_volume(&self, v: &VolumeRow, now: Millis) -> Result<VolumeRow> {
        PgStore::ensure_volume(self, v, now).await
    }

    async fn volume(
        &self,
        scope: VolumeScope,
        owner: &str,
        name: &str,
    ) -> Result<Option<VolumeRow>> {
        PgStore::volume(self, scope, owner, name).await
    }

    async fn volumes(&self, owners: Option<&[(VolumeScope, String)]>) -> Result<Vec<VolumeRow>> {
        PgStore::volumes(self, owners).await
    }

    async fn volume_users(&self, id: Uuid) -> Result<Vec<Uuid>> {
        PgStore::volume_users(self, id).await
    }

    async fn delete_volume(&self, id: Uuid, by: &str, now: Millis) -> Result<()> {
        PgStore::delete_volume(self, id, by, now).await
    }
}

#[async_trait]
impl ImageIndex for PgStore {
    async fn put_blob(
        &self,
        digest: &str,
        size: i64,
        link: Option<Repository<'_>>,
        now: Millis,
    ) -> Result<()> {
        PgStore::put_blob(self, digest, size, link, now).await
    }

    async fn link_blobs(
        &self,
        repo: Repository<'_>,
        digests: &[String],
        now: Millis,
    ) -> Result<u64> {
        PgStore::link_blobs(self, repo, digests, now).await
    }

    async fn linked_blobs(
        &self,
        repo: Repository<'_>,
        digests: &[String],
    ) -> Result<std::collections::HashSet<String>> {
        PgStore::linked_blobs(self, repo, digests).await
    }

    async fn blob(&self, digest: &str) -> Result<Option<BlobRow>> {
        PgStore::blob(self, digest).await
    }

    async fn blobs(&self) -> Result<Vec<BlobRow>> {
        PgStore::blobs(self).await
    }

    async fn touch_blob(&self, digest: &str, now: Millis) -> Result<()> {
        PgStore::touch_blob(self, digest, now).await
    }

    async fn put_image(
        &self,
        repo: Repository<'_>,
        m: &NewManifest,
        image: Option<&ImageRow>,
        by: &str,
        now: Millis,
    ) -> Result<()> {
        PgStore::put_image(self, repo, m, image, by, now).await
    }

    async fn manifest(&self, digest: &str) -> Result<Option<ManifestRow>> {
        PgStore::manifest(self, digest).await
    }

    async fn manifest_refs(&self, manifests: Option<&[String]>) -> Result<Vec<(String, String)>> {
        PgStore::manifest_refs(self, manifests).await
    }

    async fn image(&self, key: &ImageKey) -> Result<Option<ImageRow>> {
        PgStore::image(self, key).await
    }

    async fn images(&self, repo: Option<(&str, &str, &str)>) -> Result<Vec<ImageRow>> {
        PgStore::images(self, repo).await
    }

    async fn image_by_build_key(
        &self,
        scope: &str,
        owner: &str,
        build_key: &str,
    ) -> Result<Option<ImageRow>> {
        PgStore::image_by_build_key(self, scope, owner, build_key).await
    }

    async fn touch_image(&self, key: &ImageKey, now: Millis) -> Result<()> {
        PgStore::touch_image(self, key, now).await
    }

    async fn delete_images(
        &self,
        keys: &[ImageKey],
        by: &str,
        why: &str,
        now: Millis,
    ) -> Result<u64> {
        PgStore::delete_images(self, keys, by, why, now).await
    }

    async fn delete_blobs(&self, digests: &[String], now: Millis) -> Result<()> {
        PgStore::delete_blobs(self, digests, now).await
    }

    async fn set_image_build_key(&self, key: &ImageKey, build_key: Option<&str>) -> Result<bool> {
        PgStore::set_image_build_key(self, key, build_key).await
    }
}
