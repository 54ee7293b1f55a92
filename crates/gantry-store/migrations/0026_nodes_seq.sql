-- A registration numbers its node one past the greatest `seq`: without an index that read
-- every node, so registering a fleet took time in the square of its size. Unique too, as the
-- numbers are (each node's container subnet is derived from its own).
CREATE UNIQUE INDEX nodes_seq ON nodes(seq);
