-- What each server replica's endpoint proxy does with each persistent endpoint: the backend
-- (workflow, attempt) new requests go to, and how many requests still run on the backends it
-- pointed at before. Each replica replaces its rows when they change and marks them seen
-- as its heartbeat; a takeover's old backend has drained once every replica seen lately
-- routes to the new one with nothing left on the old.
CREATE TABLE proxy_views (
    replica TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    workflow_id TEXT,
    attempt_id TEXT,
    old_in_flight INTEGER NOT NULL,
    seen_at INTEGER NOT NULL,
    PRIMARY KEY (replica, endpoint)
);
