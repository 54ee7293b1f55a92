-- The controller's snapshot lists a job's tasks that are in play, but of those still waiting
-- to start only the first (as many as could start at once): the rest of a big array are
-- counted (task_counts), so a tick's cost follows what can happen next, not the array's size.
-- Each half has its own partial index; the snapshot's queries name their status lists exactly.
CREATE INDEX tasks_live ON tasks(workflow_id) WHERE status IN ('STARTED', 'RUNNING');
CREATE INDEX tasks_pending ON tasks(workflow_id, job, idx) WHERE status = 'PENDING';
DROP INDEX tasks_open;
