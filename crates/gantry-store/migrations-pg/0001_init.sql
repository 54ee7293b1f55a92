-- The PostgreSQL schema: what `migrations/0001..0017` make of a SQLite database, in one step.
-- Every later schema change goes into both directories (see ARCHITECTURE.md).
--
-- Times are milliseconds since the Unix epoch (BIGINT); ids are UUID text, as in SQLite, so
-- that rows read back the same in both backends. Flags are BOOLEAN. Names, ids, keys and
-- words are `COLLATE "C"`: the store compares and orders them byte by byte as SQLite does (a
-- prefix of an id is a range of ids; `node list` sorts as on SQLite), whatever locale the
-- database was created with.

CREATE TABLE users (
    id TEXT COLLATE "C" PRIMARY KEY,
    name TEXT COLLATE "C" NOT NULL UNIQUE,
    grp TEXT COLLATE "C" NOT NULL,
    role TEXT COLLATE "C" NOT NULL,
    created_at BIGINT NOT NULL,
    disabled_at BIGINT
);

-- Only the SHA-256 of a token is stored; the id is random, shown, never derived from it.
CREATE TABLE tokens (
    hash TEXT COLLATE "C" PRIMARY KEY,
    user_id TEXT COLLATE "C" NOT NULL REFERENCES users(id),
    purpose TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT,
    id TEXT COLLATE "C"
);
CREATE UNIQUE INDEX tokens_id ON tokens(id);
CREATE INDEX tokens_user ON tokens(user_id);

CREATE TABLE workflows (
    id TEXT COLLATE "C" PRIMARY KEY,
    name TEXT COLLATE "C" NOT NULL,
    owner TEXT COLLATE "C" NOT NULL,
    grp TEXT COLLATE "C" NOT NULL,
    spec TEXT NOT NULL,
    -- The compiled plan (JSON) the controller works from; opaque to the store.
    plan TEXT NOT NULL,
    status TEXT COLLATE "C" NOT NULL,
    reason TEXT,
    stop_requested BOOLEAN NOT NULL DEFAULT FALSE,
    created_at BIGINT NOT NULL,
    ended_at BIGINT
);
CREATE INDEX workflows_status ON workflows(status);

CREATE TABLE tasks (
    id TEXT COLLATE "C" PRIMARY KEY,
    workflow_id TEXT COLLATE "C" NOT NULL REFERENCES workflows(id),
    job TEXT COLLATE "C" NOT NULL,
    idx BIGINT,
    ord BIGINT NOT NULL,
    status TEXT COLLATE "C" NOT NULL,
    reason TEXT,
    attempts BIGINT NOT NULL DEFAULT 0,
    live_attempt TEXT COLLATE "C",
    node TEXT COLLATE "C",
    exit_code BIGINT,
    created_at BIGINT NOT NULL,
    ended_at BIGINT,
    -- A task back in PENDING after a failed attempt waits out its retry backoff: no attempt
    -- starts before this time.
    not_before BIGINT
);
CREATE INDEX tasks_workflow ON tasks(workflow_id, ord);
-- One job's task without reading the workflow's others.
CREATE INDEX tasks_job ON tasks(workflow_id, job, idx);
-- The controller's snapshot: the tasks in play, and the first of those waiting.
CREATE INDEX tasks_live ON tasks(workflow_id) WHERE status IN ('STARTED', 'RUNNING');
CREATE INDEX tasks_pending ON tasks(workflow_id, job, idx) WHERE status = 'PENDING';

CREATE TABLE attempts (
    id TEXT COLLATE "C" PRIMARY KEY,
    task_id TEXT COLLATE "C" NOT NULL REFERENCES tasks(id),
    workflow_id TEXT COLLATE "C" NOT NULL,
    number BIGINT NOT NULL,
    node TEXT COLLATE "C" NOT NULL,
    status TEXT COLLATE "C" NOT NULL,
    cause TEXT COLLATE "C",
    exit_code BIGINT,
    reason TEXT,
    stop_sent TEXT COLLATE "C",
    assignment TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    running_at BIGINT,
    ended_at BIGINT,
    -- A running attempt's address on its node's bridge (services are reached there).
    address TEXT,
    -- What it holds on its node, as the controller placed it: the store re-checks a node's
    -- fit from these before it commits a placement.
    millicpus BIGINT NOT NULL DEFAULT 0,
    memory_bytes BIGINT NOT NULL DEFAULT 0,
    -- JSON object: device name -> count.
    devices TEXT NOT NULL DEFAULT '{}',
    exclusive BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX attempts_task ON attempts(task_id, number);
CREATE INDEX attempts_live ON attempts(node) WHERE ended_at IS NULL;

CREATE TABLE nodes (
    id TEXT COLLATE "C" PRIMARY KEY,
    name TEXT COLLATE "C" NOT NULL UNIQUE,
    pool TEXT COLLATE "C" NOT NULL,
    capacity TEXT NOT NULL,
    state TEXT COLLATE "C" NOT NULL,
    connected BOOLEAN NOT NULL,
    last_seen BIGINT,
    version TEXT,
    metrics_addr TEXT,
    created_at BIGINT NOT NULL,
    -- Where the node's Prometheus Node Exporter listens (host:port).
    node_exporter TEXT,
    -- A small number per node, stable for its life: the node's container subnet.
    seq BIGINT,
    -- The address other nodes reach it at, its exec service, its labels (JSON object).
    address TEXT,
    exec_addr TEXT,
    labels TEXT NOT NULL DEFAULT '{}'
);

-- `seq` numbers events in commit order: every writing transaction holds the store's
-- advisory lock when it inserts them (postgres/mod.rs).
CREATE TABLE events (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    time BIGINT NOT NULL,
    workflow_id TEXT COLLATE "C",
    node TEXT COLLATE "C",
    task TEXT COLLATE "C",
    kind TEXT COLLATE "C" NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX events_workflow ON events(workflow_id, seq);
CREATE INDEX events_node ON events(node, seq);

-- Log bytes live in files; this records how much of each is durable.
CREATE TABLE logs (
    attempt_id TEXT COLLATE "C" NOT NULL,
    stream TEXT COLLATE "C" NOT NULL,
    bytes BIGINT NOT NULL,
    PRIMARY KEY (attempt_id, stream)
);

-- Node-local housekeeping, e.g. removing an ephemeral volume; runs on a live agent of the pool.
CREATE TABLE chores (
    id TEXT COLLATE "C" PRIMARY KEY,
    pool TEXT COLLATE "C" NOT NULL,
    kind TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    sent_to TEXT COLLATE "C",
    done_at BIGINT,
    error TEXT
);

CREATE TABLE settings (
    key TEXT COLLATE "C" PRIMARY KEY,
    value TEXT NOT NULL
);

-- Sealed by the server before they reach the store; `sealed` is opaque here. `kind`: value,
-- s3, http, image.
CREATE TABLE secrets (
    scope TEXT COLLATE "C" NOT NULL,
    owner TEXT COLLATE "C" NOT NULL,
    name TEXT COLLATE "C" NOT NULL,
    sealed TEXT NOT NULL,
    updated_by TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    kind TEXT COLLATE "C" NOT NULL DEFAULT 'value',
    PRIMARY KEY (scope, owner, name)
);

-- Holds take nodes out of service: cordon (no new work) or evict (running work taken off too).
CREATE TABLE holds (
    id TEXT COLLATE "C" PRIMARY KEY,
    node TEXT COLLATE "C" NOT NULL,
    pool TEXT COLLATE "C" NOT NULL,
    kind TEXT COLLATE "C" NOT NULL,
    -- monitoring | admin
    source TEXT COLLATE "C" NOT NULL,
    -- ACTIVE | DEFERRED | RELEASED
    state TEXT COLLATE "C" NOT NULL,
    alertname TEXT,
    fingerprint TEXT COLLATE "C",
    episode TEXT COLLATE "C",
    -- auto | admin: who may release it when its alert resolves
    release_rule TEXT COLLATE "C" NOT NULL,
    reason TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    activated_at BIGINT,
    alert_resolved_at BIGINT,
    released_by TEXT,
    released_at BIGINT,
    release_reason TEXT
);
CREATE INDEX holds_node ON holds(node, state);
CREATE INDEX holds_alert ON holds(fingerprint, episode);

-- Alert episodes that have ended: a late or repeated firing post must not hold the node again.
CREATE TABLE alert_episodes (
    fingerprint TEXT COLLATE "C" NOT NULL,
    episode TEXT COLLATE "C" NOT NULL,
    ended_at BIGINT NOT NULL,
    ended_by TEXT NOT NULL,
    PRIMARY KEY (fingerprint, episode)
);

-- Persistent endpoints: a named URL that outlives the workflows serving it.
CREATE TABLE endpoints (
    name TEXT COLLATE "C" PRIMARY KEY,
    owner TEXT COLLATE "C" NOT NULL,
    grp TEXT COLLATE "C" NOT NULL,
    -- user | group | organization | public: who may call it
    scope TEXT COLLATE "C" NOT NULL,
    -- when-ready | stop-first
    mode TEXT COLLATE "C" NOT NULL,
    drain_timeout_ms BIGINT NOT NULL,
    -- takeovers wait for a person's approval
    confirm BOOLEAN NOT NULL,
    created_at BIGINT NOT NULL,
    -- what serves it now
    workflow_id TEXT COLLATE "C",
    service TEXT COLLATE "C",
    port BIGINT,
    since BIGINT
);

-- Every attach and switch of an endpoint, with its phase and outcome.
CREATE TABLE takeovers (
    id TEXT COLLATE "C" PRIMARY KEY,
    endpoint TEXT COLLATE "C" NOT NULL,
    from_workflow TEXT COLLATE "C",
    to_workflow TEXT COLLATE "C" NOT NULL,
    to_service TEXT COLLATE "C" NOT NULL,
    port BIGINT NOT NULL,
    requested_by TEXT NOT NULL,
    -- how it was asked for: cli | api | mcp
    channel TEXT COLLATE "C" NOT NULL,
    mode TEXT COLLATE "C" NOT NULL,
    phase TEXT COLLATE "C" NOT NULL,
    reason TEXT,
    confirmed_by TEXT,
    confirmed_via TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    switched_at BIGINT,
    ended_at BIGINT
);
CREATE INDEX takeovers_endpoint ON takeovers(endpoint, created_at);

-- Tokens that let a caller use an endpoint (only their SHA-256 is kept).
CREATE TABLE endpoint_tokens (
    hash TEXT COLLATE "C" PRIMARY KEY,
    endpoint TEXT COLLATE "C" NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT,
    id TEXT COLLATE "C"
);
CREATE UNIQUE INDEX endpoint_tokens_id ON endpoint_tokens(id);
CREATE INDEX endpoint_tokens_endpoint ON endpoint_tokens(endpoint);

-- The object cache (see migrations/0007_images.sql and 0011_blob_links.sql): every blob on
-- disk, the manifests among them and what they reference, the name index, and the
-- repositories that link each blob.
CREATE TABLE blobs (
    digest TEXT COLLATE "C" PRIMARY KEY,
    size BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    last_used_at BIGINT NOT NULL
);

CREATE TABLE manifests (
    digest TEXT COLLATE "C" PRIMARY KEY,
    media_type TEXT NOT NULL,
    size BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE manifest_refs (
    manifest TEXT COLLATE "C" NOT NULL,
    child TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (manifest, child)
);
CREATE INDEX manifest_refs_child ON manifest_refs(child);

CREATE TABLE images (
    -- user | group
    scope TEXT COLLATE "C" NOT NULL,
    owner TEXT COLLATE "C" NOT NULL,
    name TEXT COLLATE "C" NOT NULL,
    tag TEXT COLLATE "C" NOT NULL,
    digest TEXT COLLATE "C" NOT NULL,
    media_type TEXT NOT NULL,
    size BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    last_used_at BIGINT NOT NULL,
    -- the image build's cache key, when a build pushed it
    build_key TEXT COLLATE "C",
    PRIMARY KEY (scope, owner, name, tag)
);
CREATE INDEX images_digest ON images(digest);
CREATE INDEX images_last_used ON images(last_used_at);
CREATE INDEX images_build_key ON images(scope, owner, build_key);

CREATE TABLE blob_links (
    scope TEXT COLLATE "C" NOT NULL,
    owner TEXT COLLATE "C" NOT NULL,
    name TEXT COLLATE "C" NOT NULL,
    digest TEXT COLLATE "C" NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (scope, owner, name, digest)
);
CREATE INDEX blob_links_digest ON blob_links(digest);

-- Alerts naming a node Gantry does not know: one event per episode and status.
CREATE TABLE unknown_node_alerts (
    fingerprint TEXT COLLATE "C" NOT NULL,
    episode TEXT COLLATE "C" NOT NULL,
    status TEXT COLLATE "C" NOT NULL,
    seen_at BIGINT NOT NULL,
    PRIMARY KEY (fingerprint, episode, status)
);

-- Storage provisioners added by an administrator (the built-in `default` is not a row).
CREATE TABLE storages (
    name TEXT COLLATE "C" PRIMARY KEY,
    driver TEXT COLLATE "C" NOT NULL,
    path TEXT NOT NULL,
    -- NULL: every pool
    pool TEXT COLLATE "C",
    -- JSON array of the groups that may use it; NULL: every group
    groups TEXT,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

-- Persistent volumes, scoped like images; their directory is <storage path>/<id>.
CREATE TABLE volumes (
    id TEXT COLLATE "C" PRIMARY KEY,
    scope TEXT COLLATE "C" NOT NULL,
    owner TEXT COLLATE "C" NOT NULL,
    name TEXT COLLATE "C" NOT NULL,
    storage TEXT COLLATE "C" NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    UNIQUE (scope, owner, name)
);
CREATE INDEX volumes_storage ON volumes(storage);

-- Which workflows mount which persistent volume, written with the workflow.
CREATE TABLE volume_uses (
    volume_id TEXT COLLATE "C" NOT NULL,
    workflow_id TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (volume_id, workflow_id)
);
CREATE INDEX volume_uses_workflow ON volume_uses(workflow_id);

-- How many tasks of each job are in each status, kept by the triggers below in the same
-- transaction as the task rows they count (see migrations/0008_open_tasks.sql).
CREATE TABLE task_counts (
    workflow_id TEXT COLLATE "C" NOT NULL,
    job TEXT COLLATE "C" NOT NULL,
    status TEXT COLLATE "C" NOT NULL,
    n BIGINT NOT NULL,
    PRIMARY KEY (workflow_id, job, status)
);

CREATE FUNCTION task_counts_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        UPDATE task_counts SET n = n - 1
            WHERE workflow_id = OLD.workflow_id AND job = OLD.job AND status = OLD.status;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO task_counts (workflow_id, job, status, n)
            VALUES (NEW.workflow_id, NEW.job, NEW.status, 1)
            ON CONFLICT (workflow_id, job, status) DO UPDATE SET n = task_counts.n + 1;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER task_counts_insert AFTER INSERT ON tasks
    FOR EACH ROW EXECUTE FUNCTION task_counts_count();
CREATE TRIGGER task_counts_update AFTER UPDATE OF workflow_id, job, status ON tasks
    FOR EACH ROW
    WHEN (OLD.workflow_id IS DISTINCT FROM NEW.workflow_id OR OLD.job IS DISTINCT FROM NEW.job
          OR OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION task_counts_count();
CREATE TRIGGER task_counts_delete AFTER DELETE ON tasks
    FOR EACH ROW EXECUTE FUNCTION task_counts_count();
