-- Storage provisioners added by an administrator. The built-in `default` (hostpath beneath
-- each agent's storage root) is not a row: it always exists and is open to every group.
CREATE TABLE storages (
    name TEXT PRIMARY KEY,
    -- hostpath: a directory every node of the pool sees (a Lustre, GPFS or NFS mount)
    driver TEXT NOT NULL,
    path TEXT NOT NULL,
    -- NULL: every pool
    pool TEXT,
    -- JSON array of the groups that may use it; NULL: every group
    groups TEXT,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

-- Persistent volumes, scoped like images: user/<owner>/<name> or group/<owner>/<name>. Their
-- directory is <storage path>/<id>: a name never becomes a path.
CREATE TABLE volumes (
    id TEXT PRIMARY KEY,
    scope TEXT NOT NULL,
    owner TEXT NOT NULL,
    name TEXT NOT NULL,
    storage TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (scope, owner, name)
);
CREATE INDEX volumes_storage ON volumes(storage);

-- Which workflows mount which persistent volume, written with the workflow: a volume is not
-- removed while a workflow not yet ended mounts it, and a workflow is not stored mounting a
-- volume removed meanwhile.
CREATE TABLE volume_uses (
    volume_id TEXT NOT NULL,
    workflow_id TEXT NOT NULL,
    PRIMARY KEY (volume_id, workflow_id)
);
CREATE INDEX volume_uses_workflow ON volume_uses(workflow_id);
