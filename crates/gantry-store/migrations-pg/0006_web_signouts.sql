-- As migrations/0022_web_signouts.sql: web UI sessions signed out before their cookie expires.
CREATE TABLE web_signouts (
    sid TEXT PRIMARY KEY,
    expires_at BIGINT NOT NULL
);
