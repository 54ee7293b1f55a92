-- Web UI sessions signed out before their cookie expires: a cookie is sealed, not stored, so
-- every server replica must find here that its session ended (kept until it would expire).
CREATE TABLE web_signouts (
    sid TEXT PRIMARY KEY,
    expires_at INTEGER NOT NULL
);
