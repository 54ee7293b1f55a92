-- Alerts naming a node Gantry does not know are recorded as events: one per alert episode
-- (fingerprint, startsAt) and status, however often Alertmanager repeats the post.
CREATE TABLE unknown_node_alerts (
    fingerprint TEXT NOT NULL,
    episode TEXT NOT NULL,
    status TEXT NOT NULL,
    seen_at INTEGER NOT NULL,
    PRIMARY KEY (fingerprint, episode, status)
);

-- A task back in PENDING after a failed attempt waits out its retry backoff: no attempt
-- starts before this time (ms since the epoch).
ALTER TABLE tasks ADD COLUMN not_before INTEGER;
