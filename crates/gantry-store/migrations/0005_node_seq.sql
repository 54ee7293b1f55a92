-- A small number per node, stable for its life: the server derives the node's container
-- subnet from it.
ALTER TABLE nodes ADD COLUMN seq INTEGER;
UPDATE nodes SET seq = rowid;
