-- Dependencies between jobs, and arrays of jobs (server::jobs::submit_many, admission::gates).

-- An array (or sweep): its elements are jobs with `array_id` and `array_index`. `running_limit`
-- bounds how many of them are admitted, starting or running at once (NULL: no bound).
CREATE TABLE job_arrays (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    owner_id      uuid NOT NULL REFERENCES users (id),
    name          text NOT NULL,
    size          integer NOT NULL CHECK (size > 0),
    running_limit integer CHECK (running_limit > 0),
    created_at    timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE jobs ADD COLUMN array_id uuid REFERENCES job_arrays (id) ON DELETE SET NULL,
    ADD COLUMN array_index integer CHECK (array_index >= 0),
    ADD CONSTRAINT jobs_array_both CHECK ((array_id IS NULL) = (array_index IS NULL));
CREATE INDEX jobs_array ON jobs (array_id, array_index) WHERE array_id IS NOT NULL;

-- `child` starts only once `parent` ended as `kind` asks: `ok` (succeeded), `any` (any end),
-- `failed` (failed or timed out). Parents exist before their children (checked at submit), so
-- no cycle can be written.
CREATE TABLE job_deps (
    child  uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    parent uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    kind   text NOT NULL CHECK (kind IN ('ok', 'any', 'failed')),
    PRIMARY KEY (child, parent, kind),
    CHECK (child <> parent)
);
CREATE INDEX job_deps_parent ON job_deps (parent);

-- A dependency that can no longer hold cancels its dependent: a cause of its own.
ALTER TABLE jobs DROP CONSTRAINT jobs_stop_cause_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_stop_cause_check CHECK (stop_cause IN ('owner', 'admin',
    'timeout', 'vram_overuse', 'node_lost', 'user_disabled', 'runtime_restart', 'dependency'));
