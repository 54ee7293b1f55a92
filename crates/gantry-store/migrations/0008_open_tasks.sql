-- The controller reads its snapshot on every tick. Ended tasks of an active workflow only
-- matter to it as numbers (how many of a job's tasks finished, failed, were stopped), so it
-- reads the tasks not yet ended through this index and the rest as counts: a tick's cost
-- follows the work in flight, not the size of the array.
CREATE INDEX tasks_open ON tasks(workflow_id) WHERE status IN ('PENDING', 'STARTED', 'RUNNING');

-- How many tasks of each job are in each status. Kept by the triggers below in the same
-- transaction as the task rows they count, so the counts can never disagree with the rows.
CREATE TABLE task_counts (
    workflow_id TEXT NOT NULL,
    job TEXT NOT NULL,
    status TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (workflow_id, job, status)
) WITHOUT ROWID;

INSERT INTO task_counts (workflow_id, job, status, n)
    SELECT workflow_id, job, status, COUNT(*) FROM tasks GROUP BY workflow_id, job, status;

CREATE TRIGGER task_counts_insert AFTER INSERT ON tasks
BEGIN
    INSERT INTO task_counts (workflow_id, job, status, n)
        VALUES (NEW.workflow_id, NEW.job, NEW.status, 1)
        ON CONFLICT (workflow_id, job, status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER task_counts_update AFTER UPDATE OF workflow_id, job, status ON tasks
    WHEN OLD.workflow_id IS NOT NEW.workflow_id OR OLD.job IS NOT NEW.job
        OR OLD.status IS NOT NEW.status
BEGIN
    UPDATE task_counts SET n = n - 1
        WHERE workflow_id = OLD.workflow_id AND job = OLD.job AND status = OLD.status;
    INSERT INTO task_counts (workflow_id, job, status, n)
        VALUES (NEW.workflow_id, NEW.job, NEW.status, 1)
        ON CONFLICT (workflow_id, job, status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER task_counts_delete AFTER DELETE ON tasks
BEGIN
    UPDATE task_counts SET n = n - 1
        WHERE workflow_id = OLD.workflow_id AND job = OLD.job AND status = OLD.status;
END;
