-- Secrets are sealed by the server (ChaCha20-Poly1305 with a key outside the database) before
-- they reach the store; `sealed` is opaque here.
CREATE TABLE secrets (
    scope TEXT NOT NULL,
    owner TEXT NOT NULL,
    name TEXT NOT NULL,
    sealed TEXT NOT NULL,
    updated_by TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (scope, owner, name)
);
