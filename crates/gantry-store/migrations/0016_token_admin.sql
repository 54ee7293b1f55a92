-- Administrators disable users, and list, revoke and rotate tokens by an id that can be shown
-- (the secret's hash stays the key; the id is random, never derived from the secret).
ALTER TABLE users ADD COLUMN disabled_at INTEGER;

ALTER TABLE tokens ADD COLUMN id TEXT;
UPDATE tokens SET id = lower(hex(randomblob(8)));
CREATE UNIQUE INDEX tokens_id ON tokens(id);
CREATE INDEX tokens_user ON tokens(user_id);

ALTER TABLE endpoint_tokens ADD COLUMN id TEXT;
UPDATE endpoint_tokens SET id = lower(hex(randomblob(8)));
CREATE UNIQUE INDEX endpoint_tokens_id ON endpoint_tokens(id);
CREATE INDEX endpoint_tokens_endpoint ON endpoint_tokens(endpoint);
