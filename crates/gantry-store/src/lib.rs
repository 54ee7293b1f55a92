//! Gantry's persistence: one trait, [`Store`], and its two implementations: SQLite
//! ([`SqliteStore`], the embedded default) and PostgreSQL ([`PgStore`], a database several
//! servers may share). Invariants: this is the only code that writes the database; every state
//! change is one transaction that also writes an event row; a call returns only after its
//! transaction is durable (SQLite: WAL with `synchronous = FULL`; PostgreSQL: a synchronous
//! commit). The trait's types are backend-neutral (no sqlx type in [`StoreError`], states as
//! enums); SQL lives in `sqlite/` and `migrations/`, `postgres/` and `migrations-pg/` only,
//! and what the backends share is in `rows.rs` (row decoding) and `shared.rs`.
//! `testkit` (feature `testkit`) is the contract every backend passes, the guards of
//! [`Store::apply`] and [`Store::end_attempt`] included.

mod postgres;
mod rows;
mod shared;
mod sqlite;
#[cfg(feature = "testkit")]
pub mod testkit;
mod text;
mod types;
mod unborn;

pub use postgres::PgStore;
pub use sqlite::SqliteStore;
pub use text::{cap_text, MAX_TEXT_BYTES};
pub use types::*;
pub use unborn::{unborn_task_id, NewUnborn, BORN_AHEAD};

use async_trait::async_trait;
use uuid::Uuid;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    #[error("{0} is ambiguous: it matches more than one id")]
    Ambiguous(String),
    #[error("conflict: {0}")]
    Conflict(String),
    /// The backend failed (I/O, a lost connection, a failed migration): its error, boxed so
    /// that no backend's types are part of the trait.
    #[error("database: {0}")]
    Backend(Box<dyn std::error::Error + Send + Sync>),
    /// A guard refused a plan: its task is not waiting, already has a live attempt, or its
    /// node is not READY or would be overfilled. Nothing of the call was applied; the
    /// controller decides again from a fresh snapshot.
    #[error("refused: {0}")]
    Refused(String),
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// A plan's fence names a token the lease no longer has: another process took the lease,
    /// and nothing of the call was applied. The caller is no longer the holder.
    #[error("deposed: {0}")]
    Deposed(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Everything the control plane persists, whichever backend holds it: no backend's types leak
/// out, and every multi-row change is one call. The object cache's rows
/// are its supertrait [`ImageIndex`], which is all the registry is handed.
#[async_trait]
pub trait Store: ImageIndex + Send + Sync + 'static {
    // --- users and tokens -------------------------------------------------------------
    /// The user and their first token, which expires at `expires_at` (never when `None`).
    async fn create_user(
        &self,
        user: &User,
        token_hash: &str,
        expires_at: Option<Millis>,
        now: Millis,
    ) -> Result<()>;
    /// The user a token names, unless it expired or its user is disabled.
    async fn user_by_token(&self, token_hash: &str, now: Millis) -> Result<Option<User>>;
    async fn user_by_name(&self, name: &str) -> Result<Option<User>>;
    /// Returns the new token's id.
    async fn add_token(
        &self,
        user_id: Uuid,
        token_hash: &str,
        purpose: &str,
        expires_at: Option<Millis>,
        now: Millis,
    ) -> Result<String>;
    /// Why a token that [`Store::user_by_token`] (or [`Store::endpoint_token`]) refused was
    /// refused, when it is one we know; `None` for an unknown one.
    async fn token_refusal(&self, token_hash: &str, now: Millis) -> Result<Option<TokenRefusal>>;
    async fn users(&self) -> Result<Vec<UserRow>>;
    /// Refused ([`StoreError::Conflict`]) when it would leave no enabled administrator.
    async fn set_user_disabled(
        &self,
        name: &str,
        disabled: bool,
        by: &str,
        now: Millis,
    ) -> Result<()>;
    /// Deletes the user and their tokens. Refused ([`StoreError::Conflict`]) for the last
    /// administrator, and, unless `force`, while workflows they own have not ended (those are
    /// left running either way).
    async fn delete_user(&self, name: &str, force: bool, by: &str, now: Millis) -> Result<()>;
    /// Every user's tokens, or one user's.
    async fn tokens(&self, user: Option<&str>) -> Result<Vec<TokenRow>>;
    async fn revoke_token(&self, id: &str, by: &str, now: Millis) -> Result<TokenRow>;
    /// Gives the token a new secret (its hash) and expiry; the old secret stops at once.
    async fn rotate_token(
        &self,
        id: &str,
        token_hash: &str,
        expires_at: Option<Millis>,
        by: &str,
        now: Millis,
    ) -> Result<TokenRow>;
    async fn count_users(&self) -> Result<u64>;

    // --- workflows ----------------------------------------------------------------------
    /// Stores a submitted workflow whole, in one transaction: its tasks, the volumes it
    /// mounts, its endpoint takeovers (and their confirmations), the tasks that end at once.
    async fn create_workflow(&self, wf: &NewWorkflow, now: Millis) -> Result<()>;
    async fn list_workflows(&self, filter: &Visibility) -> Result<Vec<WorkflowRow>>;
    /// Resolves a full id or a unique prefix of 8 or more characters.
    async fn resolve_workflow(&self, id_or_prefix: &str) -> Result<WorkflowRow>;
    /// Workflows whose id starts with `prefix` (lower-case hex and '-'), at most `limit`.
    async fn workflows_by_prefix(&self, prefix: &str, limit: u32) -> Result<Vec<WorkflowRow>>;
    async fn workflow(&self, id: Uuid) -> Result<WorkflowRow>;
    /// A workflow's tasks that have rows: a big array's members not yet born are not listed
    /// (see [`BORN_AHEAD`]); [`Store::tasks_page`] shows them too.
    async fn tasks(&self, workflow_id: Uuid) -> Result<Vec<TaskRow>>;
    /// A page of a workflow's tasks ([`TaskPage`]): what `describe` shows of an array of a
    /// million, an index range read rather than the whole. Members of an array not yet born
    /// are shown with the id they will have ([`unborn_task_id`]). `NotFound` when `after` is
    /// no task of this workflow.
    async fn tasks_page(&self, workflow_id: Uuid, page: &TaskPage) -> Result<Vec<TaskRow>>;
    /// How many tasks of each workflow are in each status (counts above zero), from the
    /// counts the store keeps: `workflow list` reads no task.
    async fn task_counts(&self, workflow_ids: &[Uuid]) -> Result<StatusCounts>;
    /// The attempts of these tasks, each task's in order.
    async fn attempts_of(&self, task_ids: &[Uuid]) -> Result<Vec<AttemptRow>>;
    /// The first task of one job (a service has exactly one), without reading the others.
    async fn job_task(&self, workflow_id: Uuid, job: &str) -> Result<Option<TaskRow>>;
    /// One job's tasks with rows, by index from `from` on (a job's one task without an index
    /// first), at most `limit`: a gang's members or one array member, without the workflow's
    /// other tasks.
    async fn job_tasks(
        &self,
        workflow_id: Uuid,
        job: &str,
        from: Option<u32>,
        limit: u32,
    ) -> Result<Vec<TaskRow>>;
    /// The nodes any attempt of the workflow ran on, each once.
    async fn attempt_nodes(&self, workflow_id: Uuid) -> Result<Vec<String>>;
    async fn attempts(&self, workflow_id: Uuid) -> Result<Vec<AttemptRow>>;
    async fn request_stop(&self, workflow_id: Uuid, by: &str, now: Millis) -> Result<bool>;
    /// Workflows that are not terminal, with their tasks in play and the first waiting ones
    /// ([`PENDING_WINDOW`] per job), counts of the waiting and ended ones, and their live
    /// attempts: one consistent snapshot, whose cost grows with neither the tasks that have
    /// ended nor those that wait.
    async fn active(&self) -> Result<Vec<ActiveWorkflow>> {
        self.active_with(PENDING_WINDOW).await
    }
    /// [`Store::active`] listing each job's first `window` waiting tasks (never fewer than
    /// [`PENDING_WINDOW`]): the controller widens it while the fleet has room for more.
    async fn active_with(&self, window: usize) -> Result<Vec<ActiveWorkflow>>;

    // --- the controller's plans -----------------------------------------------------------
    /// Applies a plan in one transaction, or nothing of it. The store is the plan's last
    /// check (as Nomad's plan applier): a [`Change::CreateAttempt`] whose task is not PENDING
    /// or has a live attempt, or whose node is not READY or would not fit the node's live
    /// attempts and the new ones (cores, memory, each device; an exclusive attempt alone), is
    /// refused with [`StoreError::Refused`] and the whole call rolled back.
    async fn apply(&self, changes: &[Change], now: Millis) -> Result<()>;

    // --- leases ------------------------------------------------------------------------------
    /// Takes or renews the lease `name` for `holder` until `now + ttl`: the holder's fencing
    /// token, or None while another holder's lease has not expired. The token stays while one
    /// holder renews and grows by one when the lease changes hands (each change an event).
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Millis,
        now: Millis,
    ) -> Result<Option<i64>>;
    /// Gives the lease up at once if `holder` has it (a clean shutdown), so that another
    /// takes it without waiting for it to expire; its token is kept, and fences on.
    async fn release_lease(&self, name: &str, holder: &str, now: Millis) -> Result<()>;
    async fn lease(&self, name: &str) -> Result<Option<LeaseRow>>;

    // --- attempts ----------------------------------------------------------------------------
    async fn attempt(&self, id: Uuid) -> Result<AttemptRow>;
    async fn task(&self, id: Uuid) -> Result<TaskRow>;
    /// The attempt's process runs. Returns false when nothing changed (stale or repeated).
    async fn attempt_running(&self, id: Uuid, now: Millis) -> Result<bool> {
        Ok(self.attempts_running(&[(id, now)]).await?[0])
    }
    /// [`Store::attempt_running`] for several attempts (each at its own time), in one
    /// transaction: the server commits the reports that arrived together as a group.
    async fn attempts_running(&self, ids: &[(Uuid, Millis)]) -> Result<Vec<bool>>;
    /// The attempt ended; its task moves on as `end.task` says. An end of an attempt that
    /// ended already, or that is not its task's current attempt, changes nothing and says so
    /// ([`EndOutcome`]): only the current attempt's first end is applied. An unknown attempt
    /// is [`StoreError::NotFound`].
    async fn end_attempt(&self, end: &AttemptEnd, now: Millis) -> Result<EndOutcome> {
        match self.end_attempts(&[(end.clone(), now)]).await?[0] {
            EndOutcome::Unknown => Err(StoreError::NotFound),
            o => Ok(o),
        }
    }
    /// [`Store::end_attempt`] for several ends (each at its own time), in one transaction,
    /// each applied or found stale as it would be alone, in the order given; an unknown
    /// attempt is [`EndOutcome::Unknown`] and changes nothing.
    async fn end_attempts(&self, ends: &[(AttemptEnd, Millis)]) -> Result<Vec<EndOutcome>>;
    /// Attempts not yet ended on a node.
    async fn live_attempts_on(&self, node: &str) -> Result<Vec<AttemptRow>>;
    /// What the live attempts hold on each node that has one (or on `node` alone): how many,
    /// and the sum of their needs (`exclusive` when any is). One read for the whole cluster,
    /// for `node list`.
    async fn node_usage(&self, node: Option<&str>) -> Result<Vec<NodeUsage>>;

    // --- nodes -----------------------------------------------------------------------------
    async fn register_node(&self, reg: &NodeRegistration, now: Millis) -> Result<NodeRow>;
    /// When each node was last heard from, all in one transaction: the agents' sessions
    /// gather what they hear and write it about once a second, not once per heartbeat. A
    /// node's `last_seen` only moves forward; unknown names are ignored.
    async fn nodes_seen(&self, seen: &[(String, Millis)]) -> Result<()>;
    /// The agent's connection closed or its heartbeats stopped.
    async fn node_disconnected(&self, name: &str, now: Millis) -> Result<()>;
    async fn set_node_state(
        &self,
        name: &str,
        state: NodeState,
        reason: &str,
        now: Millis,
    ) -> Result<()>;
    async fn nodes(&self) -> Result<Vec<NodeRow>>;
    /// A number that changes whenever any node's row changes, except by [`Store::nodes_seen`]:
    /// whoever keeps a copy of [`Store::nodes`] reads it again only when this moved.
    async fn nodes_version(&self) -> Result<i64>;

    // --- servers sharing the store -----------------------------------------------------------
    /// Tells the other servers on this store that something changed that may unblock work (a
    /// submit or a stop through a standby replica), so that the controller's leader wakes at
    /// once rather than at its timer. Nothing where one server has the store (SQLite).
    async fn announce_change(&self) -> Result<()> {
        Ok(())
    }
    /// What the other servers announce ([`Store::announce_change`]): one `()` each, coalesced
    /// while unread. None where no other server shares the store.
    async fn announcements(&self) -> Result<Option<tokio::sync::mpsc::Receiver<()>>> {
        Ok(None)
    }
    /// The nodes not DOWN that were last heard from before `before` (or never): what the
    /// controller checks for lost nodes, without reading the whole fleet.
    async fn silent_nodes(&self, before: Millis) -> Result<Vec<NodeRow>>;
    async fn node(&self, name: &str) -> Result<NodeRow>;

    // --- events and logs -------------------------------------------------------------------
    async fn events(&self, q: &EventQuery) -> Result<Vec<EventRow>>;
    /// A node's newest `limit` events at or after `since`, oldest first, each with its
    /// workflow's name; events about workflows outside `vis` are left out. The flag says
    /// whether older ones (at or after `since`) exist beyond the page.
    async fn node_events(
        &self,
        node: &str,
        since: Millis,
        limit: u32,
        vis: &Visibility,
    ) -> Result<(Vec<EventRow>, bool)>;
    async fn record_event(&self, ev: &NewEvent, now: Millis) -> Result<()>;
    async fn log_size(&self, attempt_id: Uuid, stream: &str) -> Result<u64>;
    async fn set_log_size(&self, attempt_id: Uuid, stream: &str, bytes: u64) -> Result<()>;

    // --- chores -----------------------------------------------------------------------------
    async fn add_chore(&self, chore: &ChoreRow) -> Result<()>;
    async fn pending_chores(&self) -> Result<Vec<ChoreRow>>;
    async fn chore_sent(&self, id: Uuid, node: &str) -> Result<()>;
    async fn chore_done(&self, id: Uuid, error: Option<&str>, now: Millis) -> Result<()>;

    // --- secrets (sealed by the server; the store never sees a plaintext) ------------------
    async fn put_secret(
        &self,
        key: &SecretKey,
        kind: SecretType,
        sealed: &str,
        by: &str,
        now: Millis,
    ) -> Result<()>;
    async fn secret(&self, key: &SecretKey) -> Result<Option<SealedSecret>>;
    async fn list_secrets(&self, owners: &[(SecretScope, String)]) -> Result<Vec<SecretRow>>;
    async fn delete_secret(&self, key: &SecretKey, by: &str, now: Millis) -> Result<bool>;

    // --- holds ------------------------------------------------------------------------------
    /// Holds on `node` (every node when `None`); released ones only when asked.
    async fn holds(&self, node: Option<&str>, include_released: bool) -> Result<Vec<HoldRow>>;
    async fn hold(&self, id: Uuid) -> Result<HoldRow>;
    /// The ended episodes (fingerprint, startsAt) of these fingerprints.
    async fn ended_episodes(
        &self,
        fingerprints: &[String],
    ) -> Result<std::collections::HashSet<(String, String)>>;
    /// Applies a hold decision in one transaction; each call moves [`Store::holds_version`].
    async fn apply_holds(&self, changes: &[HoldChange], now: Millis) -> Result<()>;
    /// A number every [`Store::apply_holds`] moves: read before a decision, named by its
    /// [`HoldChange::Expect`].
    async fn holds_version(&self) -> Result<i64>;
    /// Records each alert's event unless one was recorded for its (fingerprint, episode,
    /// status) already, in one transaction; returns how many were recorded.
    async fn record_unknown_node_alerts(
        &self,
        alerts: &[UnknownNodeAlert],
        now: Millis,
    ) -> Result<usize>;

    // --- services and endpoints --------------------------------------------------------------
    /// Records a running attempt's address on its node's bridge.
    async fn set_attempt_address(&self, attempt: Uuid, address: &str) -> Result<()>;
    async fn create_endpoint(&self, e: &EndpointRow, now: Millis) -> Result<()>;
    async fn endpoint(&self, name: &str) -> Result<EndpointRow>;
    async fn endpoints(&self) -> Result<Vec<EndpointRow>>;
    async fn delete_endpoint(&self, name: &str, by: &str, now: Millis) -> Result<()>;
    async fn create_takeover(&self, t: &TakeoverRow, now: Millis) -> Result<()>;
    async fn takeovers(&self, endpoint: Option<&str>, open_only: bool) -> Result<Vec<TakeoverRow>>;
    async fn takeover(&self, id: Uuid) -> Result<TakeoverRow>;
    async fn apply_endpoints(&self, changes: &[EndpointChange], now: Millis) -> Result<()>;
    async fn add_endpoint_token(
        &self,
        endpoint: &str,
        hash: &str,
        by: &str,
        expires_at: Option<Millis>,
        now: Millis,
    ) -> Result<String>;
    async fn endpoint_token(&self, hash: &str, now: Millis) -> Result<Option<String>>;
    /// The tokens of one endpoint, or of every endpoint.
    async fn endpoint_tokens(&self, endpoint: Option<&str>) -> Result<Vec<EndpointTokenRow>>;
    async fn endpoint_token_by_id(&self, id: &str) -> Result<EndpointTokenRow>;
    async fn revoke_endpoint_token(&self, id: &str, by: &str, now: Millis) -> Result<()>;

    // --- web sessions ------------------------------------------------------------------------
    /// A web session signed out: refused by every server until `expires_at`, when its cookie
    /// would have expired anyway (sign-outs past theirs are dropped on the way).
    async fn sign_out_session(&self, sid: &str, expires_at: Millis, now: Millis) -> Result<()>;
    async fn session_signed_out(&self, sid: &str, now: Millis) -> Result<bool>;

    // --- MCP confirmations -------------------------------------------------------------------
    /// Keeps a single-use confirmation until it expires (those expired by `now` are dropped
    /// on the way), for every server replica.
    async fn put_confirmation(&self, c: &NewConfirmation, now: Millis) -> Result<()>;
    /// Takes a confirmation: true once, and only for its kind, user and action before it
    /// expires; one that is another user's or another action's stays theirs.
    async fn take_confirmation(
        &self,
        kind: ConfirmationKind,
        id_hash: &str,
        user_id: Uuid,
        action: &str,
        now: Millis,
    ) -> Result<bool>;

    // --- endpoint proxies' views ----------------------------------------------------------
    /// `replica`'s proxy as it is now: its view of each persistent endpoint, replacing what it
    /// published before (an endpoint it no longer lists goes), seen at `now`. Views of any
    /// replica not seen since `forget_before` (replicas long gone) are dropped on the way.
    async fn publish_proxy_views(
        &self,
        replica: &str,
        views: &[ProxyView],
        forget_before: Millis,
        now: Millis,
    ) -> Result<()>;
    /// `replica`'s views are still as it last published them, seen at `now` (its heartbeat).
    /// False when it has none stored (never published, or dropped as long gone): it should
    /// publish them again.
    async fn touch_proxy_views(&self, replica: &str, now: Millis) -> Result<bool>;
    /// Every replica's views seen at or after `since`, by replica, then endpoint.
    async fn proxy_views(&self, since: Millis) -> Result<Vec<ProxyViewRow>>;

    // --- settings ----------------------------------------------------------------------------
    async fn setting(&self, key: &str) -> Result<Option<String>>;
    async fn set_setting(&self, key: &str, value: &str, by: &str, now: Millis) -> Result<()>;

    // --- storage provisioners and persistent volumes -----------------------------------------
    async fn add_storage(&self, s: &StorageRow, now: Millis) -> Result<()>;
    async fn storages(&self) -> Result<Vec<StorageRow>>;
    /// Refused ([`StoreError::Conflict`]) while a volume lives on it.
    async fn delete_storage(&self, name: &str, by: &str, now: Millis) -> Result<()>;
    /// [`StoreError::Conflict`] when the scope holds a volume of that name already.
    async fn create_volume(&self, v: &VolumeRow, now: Millis) -> Result<()>;
    /// The volume of that name, made as `v` says when there is none (first use).
    async fn ensure_volume(&self, v: &VolumeRow, now: Millis) -> Result<VolumeRow>;
    async fn volume(
        &self,
        scope: VolumeScope,
        owner: &str,
        name: &str,
    ) -> Result<Option<VolumeRow>>;
    /// The volumes of these (scope, owner) pairs; every volume when `None`.
    async fn volumes(&self, owners: Option<&[(VolumeScope, String)]>) -> Result<Vec<VolumeRow>>;
    /// Refused ([`StoreError::Conflict`], naming them) while a workflow not yet ended mounts it.
    async fn delete_volume(&self, id: Uuid, by: &str, now: Millis) -> Result<()>;
    /// The workflows not yet ended that mount the volume.
    async fn volume_users(&self, id: Uuid) -> Result<Vec<Uuid>>;
}

/// The object cache's index: images (tags), manifests and what they reference, blob rows and
/// the repositories that link them. A part of every [`Store`], and the part the registry
/// (`gantry-registry`) may use: it is handed an `Arc<dyn ImageIndex>`, never the store.
#[async_trait]
pub trait ImageIndex: Send + Sync {
    /// Records a blob now on disk, or refreshes its last use when it is known. With `link`,
    /// the repository whose upload proved the blob's content links it, in the same
    /// transaction (a second upload of the same content adds only its link).
    async fn put_blob(
        &self,
        digest: &str,
        size: i64,
        link: Option<Repository<'_>>,
        now: Millis,
    ) -> Result<()>;
    /// Links recorded blobs into a repository (a cross-repository mount). Digests without a
    /// blob row are not linked. Returns how many links are new.
    async fn link_blobs(
        &self,
        repo: Repository<'_>,
        digests: &[String],
        now: Millis,
    ) -> Result<u64>;
    /// Those of `digests` that `repo` links: one indexed lookup per digest, never a scan.
    async fn linked_blobs(
        &self,
        repo: Repository<'_>,
        digests: &[String],
    ) -> Result<std::collections::HashSet<String>>;
    async fn blob(&self, digest: &str) -> Result<Option<BlobRow>>;
    async fn blobs(&self) -> Result<Vec<BlobRow>>;
    async fn touch_blob(&self, digest: &str, now: Millis) -> Result<()>;
    /// Records a manifest pushed to `repo` (its blob row, its references, its link in `repo`)
    /// and, when `image` is given, points that tag at it, in one transaction. Untagged rows of
    /// the same repository that the new manifest references are dropped: they are reachable
    /// through the tag now. Every reference must be linked in `repo` already; otherwise
    /// nothing changes and the error is [`StoreError::Conflict`].
    async fn put_image(
        &self,
        repo: Repository<'_>,
        manifest: &NewManifest,
        image: Option<&ImageRow>,
        by: &str,
        now: Millis,
    ) -> Result<()>;
    async fn manifest(&self, digest: &str) -> Result<Option<ManifestRow>>;
    /// Edges (manifest, referenced digest) of these manifests; of every manifest when `None`.
    async fn manifest_refs(&self, manifests: Option<&[String]>) -> Result<Vec<(String, String)>>;
    async fn image(&self, key: &ImageKey) -> Result<Option<ImageRow>>;
    /// Every image row, or those of one repository `(scope, owner, name)`.
    async fn images(&self, repo: Option<(&str, &str, &str)>) -> Result<Vec<ImageRow>>;
    /// The newest image a build pushed under this key in a scope.
    async fn image_by_build_key(
        &self,
        scope: &str,
        owner: &str,
        build_key: &str,
    ) -> Result<Option<ImageRow>>;
    async fn touch_image(&self, key: &ImageKey, now: Millis) -> Result<()>;
    /// Removes image rows (tags); `why` goes into the event. Returns how many were removed.
    async fn delete_images(
        &self,
        keys: &[ImageKey],
        by: &str,
        why: &str,
        now: Millis,
    ) -> Result<u64>;
    /// Forgets blobs (and the manifests among them, and every repository's links to them)
    /// that are about to be deleted from disk.
    async fn delete_blobs(&self, digests: &[String], now: Millis) -> Result<()>;
    /// Records the build cache key of a pushed tag (clients like oci-client cannot send the
    /// `Gantry-Build-Key` header). Returns false when there is no such tag.
    async fn set_image_build_key(&self, key: &ImageKey, build_key: Option<&str>) -> Result<bool>;
}
