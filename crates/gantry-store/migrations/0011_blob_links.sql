-- Blobs belong to the repositories that link them, as in CNCF distribution's linked blob
-- store: knowing a digest is not enough to read a blob through a repository of one's own.
-- A repository links a blob when an upload into it proved the content (its digest checked),
-- when a cross-repository mount from a repository the caller may read succeeded, or, for a
-- manifest, when it was pushed there. Files stay shared on disk (deduplicated); only these
-- rows are per repository. A link goes when its blob is collected, not when an image goes.
CREATE TABLE blob_links (
    -- user | group, as in images
    scope TEXT NOT NULL,
    owner TEXT NOT NULL,
    name TEXT NOT NULL,
    digest TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (scope, owner, name, digest)
) WITHOUT ROWID;
-- Dropping the links of a collected blob.
CREATE INDEX blob_links_digest ON blob_links(digest);

-- What each repository's tags reach today is what it links: its manifests, their configs and
-- layers, an index's manifests and theirs. (Digests cannot form a cycle.)
WITH RECURSIVE reach(scope, owner, name, digest) AS (
    SELECT scope, owner, name, digest FROM images
    UNION
    SELECT reach.scope, reach.owner, reach.name, manifest_refs.child
    FROM reach JOIN manifest_refs ON manifest_refs.manifest = reach.digest
)
INSERT OR IGNORE INTO blob_links (scope, owner, name, digest, created_at)
SELECT reach.scope, reach.owner, reach.name, reach.digest, blobs.created_at
FROM reach JOIN blobs ON blobs.digest = reach.digest;
