-- What each attempt holds on its node, as the controller placed it: the store re-checks a
-- node's fit from these before it commits a placement (the controller's snapshot may be stale).
ALTER TABLE attempts ADD COLUMN millicpus INTEGER NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN memory_bytes INTEGER NOT NULL DEFAULT 0;
-- JSON object: device name -> count.
ALTER TABLE attempts ADD COLUMN devices TEXT NOT NULL DEFAULT '{}';
ALTER TABLE attempts ADD COLUMN exclusive INTEGER NOT NULL DEFAULT 0;

-- Attempts live at the upgrade hold what their assignment says (ended ones count for nothing).
-- The exclusive marker is a device in the assignment; it is kept apart here.
UPDATE attempts SET
    millicpus = CAST(ROUND(COALESCE(json_extract(assignment, '$.resources.cpus'), 0) * 1000) AS INTEGER),
    memory_bytes = COALESCE(json_extract(assignment, '$.resources.memory_bytes'), 0),
    devices = COALESCE(json_remove(json_extract(assignment, '$.resources.devices'), '$."gantry.io/exclusive"'), '{}'),
    exclusive = json_extract(assignment, '$.resources.devices."gantry.io/exclusive"') IS NOT NULL
WHERE ended_at IS NULL AND json_valid(assignment);
