-- As migrations/0019_tasks_page.sql.
CREATE INDEX tasks_page ON tasks(workflow_id, ord, COALESCE(idx, -1));
