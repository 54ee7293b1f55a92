-- The placement guard's "no live attempt of this task": the live attempts by task, a small
-- index however many attempts have ended, so that a plan placing a thousand tasks checks
-- them in it rather than reading every attempt ever made.
CREATE INDEX attempts_live_task ON attempts(task_id) WHERE ended_at IS NULL;
