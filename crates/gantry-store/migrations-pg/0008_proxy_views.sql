-- As migrations/0024_proxy_views.sql: each server replica's endpoint proxy, per persistent
-- endpoint, as the replica last published it (a takeover drains across every replica).
CREATE TABLE proxy_views (
    replica TEXT COLLATE "C" NOT NULL,
    endpoint TEXT COLLATE "C" NOT NULL,
    workflow_id TEXT COLLATE "C",
    attempt_id TEXT COLLATE "C",
    old_in_flight BIGINT NOT NULL,
    seen_at BIGINT NOT NULL,
    PRIMARY KEY (replica, endpoint)
);
