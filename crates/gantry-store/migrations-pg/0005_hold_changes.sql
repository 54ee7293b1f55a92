-- As migrations/0021_hold_changes.sql: a number every hold change moves, so that a hold
-- decision read at one version is applied only if no other (another server's) came first.
CREATE TABLE hold_changes (
    id BIGINT PRIMARY KEY CHECK (id = 1),
    version BIGINT NOT NULL
);
INSERT INTO hold_changes (id, version) VALUES (1, 0);
