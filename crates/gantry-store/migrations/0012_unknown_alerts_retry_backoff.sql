-- Alerts naming a node Gantry does not know are recorded as events: one per alert episode
-- (fingerprint, startsAt) and status, however often Alertmanager repeats the post.
CREATE TABLE unknown_node_alerts (
    fingerprint TEXT NOT NULL,
    episode TEXT NOT NULL,
    status TEXT NOT NULL,
    seen_at INTEGER NOT NULL,
    PRIMARY KEY (fingerprint, episode, status)
);
