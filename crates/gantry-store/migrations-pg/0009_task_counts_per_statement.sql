-- task_counts kept per statement, not per row: a statement that moves a thousand tasks (a
-- plan's placements, a batch of reports) adds its changes to the counts in one aggregate
-- rather than two statements a row. Same trigger names as SQLite's row triggers, which
-- SQLite has no statement-level form of; the counts are the same either way.
DROP TRIGGER task_counts_insert ON tasks;
DROP TRIGGER task_counts_update ON tasks;
DROP TRIGGER task_counts_delete ON tasks;
DROP FUNCTION task_counts_count();

CREATE FUNCTION task_counts_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO task_counts (workflow_id, job, status, n)
            SELECT workflow_id, job, status, COUNT(*) FROM new_rows GROUP BY 1, 2, 3
            ON CONFLICT (workflow_id, job, status) DO UPDATE SET n = task_counts.n + excluded.n;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO task_counts (workflow_id, job, status, n)
            SELECT workflow_id, job, status, -COUNT(*) FROM old_rows GROUP BY 1, 2, 3
            ON CONFLICT (workflow_id, job, status) DO UPDATE SET n = task_counts.n + excluded.n;
    ELSE
        -- Only the rows whose counted columns changed, each moved from its old key to its
        -- new one (rows are matched by id, which no statement changes).
        INSERT INTO task_counts (workflow_id, job, status, n)
            SELECT workflow_id, job, status, SUM(d) FROM (
                SELECT o.workflow_id, o.job, o.status, -1 AS d
                FROM old_rows o JOIN new_rows n ON n.id = o.id
                WHERE (o.workflow_id, o.job, o.status) IS DISTINCT FROM (n.workflow_id, n.job, n.status)
                UNION ALL
                SELECT n.workflow_id, n.job, n.status, 1
                FROM old_rows o JOIN new_rows n ON n.id = o.id
                WHERE (o.workflow_id, o.job, o.status) IS DISTINCT FROM (n.workflow_id, n.job, n.status)
            ) c
            GROUP BY 1, 2, 3 HAVING SUM(d) <> 0
            ON CONFLICT (workflow_id, job, status) DO UPDATE SET n = task_counts.n + excluded.n;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER task_counts_insert AFTER INSERT ON tasks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION task_counts_add();
CREATE TRIGGER task_counts_update AFTER UPDATE ON tasks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION task_counts_add();
CREATE TRIGGER task_counts_delete AFTER DELETE ON tasks
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION task_counts_add();
