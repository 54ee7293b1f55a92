-- As migrations/0018_node_changes.sql: a number that moves whenever a node's row changes,
-- except by its last_seen alone, so that the controller reads the fleet again only then.
-- Statement triggers: one bump per statement, however many rows it touched.
CREATE TABLE node_changes (
    id BIGINT PRIMARY KEY CHECK (id = 1),
    version BIGINT NOT NULL
);
INSERT INTO node_changes (id, version) VALUES (1, 0);

CREATE FUNCTION node_changes_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE node_changes SET version = version + 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER nodes_inserted AFTER INSERT ON nodes
    FOR EACH STATEMENT EXECUTE FUNCTION node_changes_bump();
CREATE TRIGGER nodes_deleted AFTER DELETE ON nodes
    FOR EACH STATEMENT EXECUTE FUNCTION node_changes_bump();
CREATE TRIGGER nodes_updated AFTER UPDATE OF id, name, pool, capacity, state, connected, version,
    metrics_addr, created_at, node_exporter, seq, address, exec_addr, labels ON nodes
    FOR EACH STATEMENT EXECUTE FUNCTION node_changes_bump();
