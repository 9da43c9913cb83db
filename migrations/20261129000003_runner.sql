-- Layer 2: launch attempts (container names are gpuq-<job>-<attempt>, so a retried launch never
-- collides with an earlier one).
ALTER TABLE jobs ADD COLUMN attempt integer NOT NULL DEFAULT 0 CHECK (attempt >= 0);
CREATE INDEX jobs_node_active ON jobs (node, status) WHERE status IN ('admitted', 'starting', 'running');
