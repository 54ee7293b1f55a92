-- One job's task without reading the workflow's others: the controller looks up each
-- endpoint's service task on every tick, and a workflow may also hold a large array.
CREATE INDEX tasks_job ON tasks(workflow_id, job, idx);
