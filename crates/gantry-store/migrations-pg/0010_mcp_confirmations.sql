-- As migrations/0025_mcp_confirmations.sql: the MCP server's single-use confirmations, by the
-- hash of their secret, for any replica.
CREATE TABLE mcp_confirmations (
    id_hash TEXT COLLATE "C" PRIMARY KEY,
    kind TEXT COLLATE "C" NOT NULL,
    user_id TEXT COLLATE "C" NOT NULL,
    action TEXT COLLATE "C" NOT NULL,
    expires_at BIGINT NOT NULL
);
