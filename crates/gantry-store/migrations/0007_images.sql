-- The object cache: an OCI registry served by the control plane. Blob contents live in files
-- under <data>/objects/blobs/sha256/<hex>, shared by everyone (deduplicated globally); only the
-- name index (images) is scoped to a user or a group.

-- Every blob on disk: layers, configs, and manifests too.
CREATE TABLE blobs (
    digest TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    last_used_at INTEGER NOT NULL
);

-- The blobs that are manifests (or indexes), with the media type they were pushed as.
CREATE TABLE manifests (
    digest TEXT PRIMARY KEY,
    media_type TEXT NOT NULL,
    size INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);

-- What each manifest references: its config and layers, or an index's manifests.
CREATE TABLE manifest_refs (
    manifest TEXT NOT NULL,
    child TEXT NOT NULL,
    PRIMARY KEY (manifest, child)
);
CREATE INDEX manifest_refs_child ON manifest_refs(child);

-- The name index: user/<owner>/<name>:<tag> or group/<owner>/<name>:<tag>. A manifest pushed
-- by digest alone (and not reachable from a tag of its repository) is kept under its digest as
-- the tag; real tags cannot contain ':'.
CREATE TABLE images (
    -- user | group
    scope TEXT NOT NULL,
    owner TEXT NOT NULL,
    name TEXT NOT NULL,
    tag TEXT NOT NULL,
    digest TEXT NOT NULL,
    media_type TEXT NOT NULL,
    -- manifest, config and layers (an index: with every platform's), each blob counted once
    size INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    last_used_at INTEGER NOT NULL,
    -- the image build's cache key, when a build pushed it
    build_key TEXT,
    PRIMARY KEY (scope, owner, name, tag)
);
CREATE INDEX images_digest ON images(digest);
CREATE INDEX images_last_used ON images(last_used_at);
CREATE INDEX images_build_key ON images(scope, owner, build_key);
