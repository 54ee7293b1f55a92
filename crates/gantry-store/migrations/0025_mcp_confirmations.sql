-- The MCP server's single-use confirmations: tokens handed to clients that cannot ask the
-- person, and questions whose answer comes back with the next call. Kept here so that the
-- call that uses one may reach any server replica; only the SHA-256 of each secret is kept,
-- as for API tokens, bound to its user and to a digest of exactly what it confirms.
CREATE TABLE mcp_confirmations (
    id_hash TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    user_id TEXT NOT NULL,
    action TEXT NOT NULL,
    expires_at INTEGER NOT NULL
);
