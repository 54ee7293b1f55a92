-- A number that moves whenever a node's row changes, except by its last_seen alone (which
-- moves for the whole fleet at every heartbeat flush): the controller reads the fleet again
-- only when it moved, instead of 10,000 rows at every placement.
CREATE TABLE node_changes (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL
);
INSERT INTO node_changes (id, version) VALUES (1, 0);
CREATE TRIGGER nodes_inserted AFTER INSERT ON nodes
BEGIN UPDATE node_changes SET version = version + 1; END;
CREATE TRIGGER nodes_deleted AFTER DELETE ON nodes
BEGIN UPDATE node_changes SET version = version + 1; END;
CREATE TRIGGER nodes_updated AFTER UPDATE OF id, name, pool, capacity, state, connected, version,
    metrics_addr, created_at, node_exporter, seq, address, exec_addr, labels ON nodes
BEGIN UPDATE node_changes SET version = version + 1; END;
