-- As migrations/0026_nodes_seq.sql: the greatest `seq` read from an index, not from every node.
CREATE UNIQUE INDEX nodes_seq ON nodes(seq);
