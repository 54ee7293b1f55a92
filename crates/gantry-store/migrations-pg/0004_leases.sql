-- Leases: one holder at a time for what only one server process may do (the controller).
-- `token` grows by one each time the holder changes: the fencing token that every applying
-- transaction of the holder names, so that a deposed holder's late commit is refused.
CREATE TABLE leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    token BIGINT NOT NULL,
    acquired_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
