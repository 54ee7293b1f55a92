-- A big task array's members past the first ones a submit stores as rows: one range per job,
-- counted in task_counts with the rest and given rows as the array's earlier tasks are
-- placed (see src/unborn.rs). `next_idx` is the next index to get a row; none are left past
-- `last_idx`. `status` is PENDING while they wait, or what ended them all (a stop, a failed
-- dependency), with `reason` and `ended_at`.
CREATE TABLE unborn_tasks (
    workflow_id TEXT NOT NULL REFERENCES workflows(id),
    job TEXT NOT NULL,
    ord INTEGER NOT NULL,
    next_idx INTEGER NOT NULL,
    last_idx INTEGER NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    created_at INTEGER NOT NULL,
    ended_at INTEGER,
    PRIMARY KEY (workflow_id, job)
);
