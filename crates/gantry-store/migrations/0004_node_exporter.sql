-- Where the node's Prometheus Node Exporter listens (host:port), for service discovery.
ALTER TABLE nodes ADD COLUMN node_exporter TEXT;
