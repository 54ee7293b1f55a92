-- As migrations/0027_attempts_live_task.sql: the live attempts by task, for the placement
-- guard (PostgreSQL checked a plan's thousand placements against every attempt's row).
CREATE INDEX attempts_live_task ON attempts(task_id) WHERE ended_at IS NULL;
