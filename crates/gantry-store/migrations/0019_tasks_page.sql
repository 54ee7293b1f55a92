-- A workflow's tasks in its order, for paging `describe` through an array of a million: a
-- page is a range of this index from the previous page's last task.
CREATE INDEX tasks_page ON tasks(workflow_id, ord, COALESCE(idx, -1));
