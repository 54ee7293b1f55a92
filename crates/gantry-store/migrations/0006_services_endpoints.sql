-- A running attempt's address on its node's bridge (services are reached there).
ALTER TABLE attempts ADD COLUMN address TEXT;

-- Persistent endpoints: a named URL that outlives the workflows serving it.
CREATE TABLE endpoints (
    name TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    grp TEXT NOT NULL,
    -- user | group | organization | public: who may call it
    scope TEXT NOT NULL,
    -- when-ready | stop-first
    mode TEXT NOT NULL,
    drain_timeout_ms INTEGER NOT NULL,
    -- takeovers wait for a person's approval
    confirm INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    -- what serves it now
    workflow_id TEXT,
    service TEXT,
    port INTEGER,
    since INTEGER
);

-- Every attach and switch of an endpoint, with its phase and outcome.
CREATE TABLE takeovers (
    id TEXT PRIMARY KEY,
    endpoint TEXT NOT NULL,
    from_workflow TEXT,
    to_workflow TEXT NOT NULL,
    to_service TEXT NOT NULL,
    port INTEGER NOT NULL,
    requested_by TEXT NOT NULL,
    -- how it was asked for: cli | api | mcp
    channel TEXT NOT NULL,
    mode TEXT NOT NULL,
    phase TEXT NOT NULL,
    reason TEXT,
    confirmed_by TEXT,
    confirmed_via TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    switched_at INTEGER,
    ended_at INTEGER
);
CREATE INDEX takeovers_endpoint ON takeovers(endpoint, created_at);

-- Tokens that let a caller use an endpoint (only their SHA-256 is kept).
CREATE TABLE endpoint_tokens (
    hash TEXT PRIMARY KEY,
    endpoint TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER
);
