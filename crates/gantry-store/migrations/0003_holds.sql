-- Holds take nodes out of service: cordon (no new work) or evict (running work taken off too).
CREATE TABLE holds (
    id TEXT PRIMARY KEY,
    node TEXT NOT NULL,
    pool TEXT NOT NULL,
    kind TEXT NOT NULL,
    -- monitoring | admin
    source TEXT NOT NULL,
    -- ACTIVE | DEFERRED | RELEASED
    state TEXT NOT NULL,
    alertname TEXT,
    fingerprint TEXT,
    episode TEXT,
    -- auto | admin: who may release it when its alert resolves
    release_rule TEXT NOT NULL,
    reason TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    activated_at INTEGER,
    alert_resolved_at INTEGER,
    released_by TEXT,
    released_at INTEGER,
    release_reason TEXT
);
CREATE INDEX holds_node ON holds(node, state);
CREATE INDEX holds_alert ON holds(fingerprint, episode);

-- Alert episodes that have ended (resolved, or released by an administrator): a late or
-- repeated firing post for one of them must not hold the node again.
CREATE TABLE alert_episodes (
    fingerprint TEXT NOT NULL,
    episode TEXT NOT NULL,
    ended_at INTEGER NOT NULL,
    ended_by TEXT NOT NULL,
    PRIMARY KEY (fingerprint, episode)
);
