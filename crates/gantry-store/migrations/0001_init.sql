-- Times are milliseconds since the Unix epoch; ids are UUID text.
CREATE TABLE users (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    grp TEXT NOT NULL,
    role TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

-- Only the SHA-256 of a token is stored.
CREATE TABLE tokens (
    hash TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id),
    purpose TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER
);

CREATE TABLE workflows (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    owner TEXT NOT NULL,
    grp TEXT NOT NULL,
    spec TEXT NOT NULL,
    -- The compiled plan (JSON) the controller works from; opaque to the store.
    plan TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    stop_requested INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    ended_at INTEGER
);
CREATE INDEX workflows_status ON workflows(status);

CREATE TABLE tasks (
    id TEXT PRIMARY KEY,
    workflow_id TEXT NOT NULL REFERENCES workflows(id),
    job TEXT NOT NULL,
    idx INTEGER,
    ord INTEGER NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    live_attempt TEXT,
    node TEXT,
    exit_code INTEGER,
    created_at INTEGER NOT NULL,
    ended_at INTEGER
);
CREATE INDEX tasks_workflow ON tasks(workflow_id, ord);

CREATE TABLE attempts (
    id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL REFERENCES tasks(id),
    workflow_id TEXT NOT NULL,
    number INTEGER NOT NULL,
    node TEXT NOT NULL,
    status TEXT NOT NULL,
    cause TEXT,
    exit_code INTEGER,
    reason TEXT,
    stop_sent TEXT,
    assignment TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    running_at INTEGER,
    ended_at INTEGER
);
CREATE INDEX attempts_task ON attempts(task_id, number);
CREATE INDEX attempts_live ON attempts(node) WHERE ended_at IS NULL;

CREATE TABLE nodes (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    pool TEXT NOT NULL,
    capacity TEXT NOT NULL,
    state TEXT NOT NULL,
    connected INTEGER NOT NULL,
    last_seen INTEGER,
    version TEXT,
    metrics_addr TEXT,
    created_at INTEGER NOT NULL
);

CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    time INTEGER NOT NULL,
    workflow_id TEXT,
    node TEXT,
    task TEXT,
    kind TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX events_workflow ON events(workflow_id, seq);
CREATE INDEX events_node ON events(node, seq);

-- Log bytes live in files; this records how much of each is durable.
CREATE TABLE logs (
    attempt_id TEXT NOT NULL,
    stream TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    PRIMARY KEY (attempt_id, stream)
);

-- Node-local housekeeping, e.g. removing an ephemeral volume; runs on a live agent of the pool.
CREATE TABLE chores (
    id TEXT PRIMARY KEY,
    pool TEXT NOT NULL,
    kind TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    sent_to TEXT,
    done_at INTEGER,
    error TEXT
);

CREATE TABLE settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
