-- A number every hold change moves: a hold decision is made on what it read at one version,
-- and applied only if no other decision (another server's, behind the same load balancer)
-- was applied since, so that two cannot both take a pool's last slot under the cap.
CREATE TABLE hold_changes (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL
);
INSERT INTO hold_changes (id, version) VALUES (1, 0);
