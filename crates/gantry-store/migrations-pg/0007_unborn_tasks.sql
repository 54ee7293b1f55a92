-- As migrations/0023_unborn_tasks.sql: a big task array's members not yet given rows, one
-- range per job.
CREATE TABLE unborn_tasks (
    workflow_id TEXT COLLATE "C" NOT NULL REFERENCES workflows(id),
    job TEXT COLLATE "C" NOT NULL,
    ord BIGINT NOT NULL,
    next_idx BIGINT NOT NULL,
    last_idx BIGINT NOT NULL,
    status TEXT COLLATE "C" NOT NULL,
    reason TEXT,
    created_at BIGINT NOT NULL,
    ended_at BIGINT,
    PRIMARY KEY (workflow_id, job)
);
