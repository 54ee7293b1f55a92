-- What an agent reports of its node at each hello: the address other nodes reach it at (a
-- host-network container's, a multinode member's), its exec service (how a multinode job's
-- members start processes in each other's containers), and its labels (JSON object: GPU model
-- and architecture, CPU model, the administrator's `--label KEY=VALUE`), matched against
-- `resource.annotations`.
ALTER TABLE nodes ADD COLUMN address TEXT;
ALTER TABLE nodes ADD COLUMN exec_addr TEXT;
ALTER TABLE nodes ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
