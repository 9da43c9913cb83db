-- Layer 1: cards, the manifest, the queue, the ledger and the audit trails.

-- One row per physical card. `reserved_mib` is the sum of the card's live reservations, kept in the
-- same transaction as they change; the CHECK refuses overcommit even if a lock ever failed.
CREATE TABLE gpus (
    uuid         uuid PRIMARY KEY,
    node         text NOT NULL,
    idx          integer NOT NULL CHECK (idx >= 0),
    model        text NOT NULL,
    total_mib    bigint NOT NULL CHECK (total_mib > 0),
    reserved_mib bigint NOT NULL DEFAULT 0,
    used_mib     bigint,
    external_mib bigint NOT NULL DEFAULT 0 CHECK (external_mib >= 0),
    state        text NOT NULL DEFAULT 'online' CHECK (state IN ('online', 'draining', 'offline')),
    simulated    boolean NOT NULL DEFAULT false,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT gpus_no_overcommit CHECK (reserved_mib BETWEEN 0 AND total_mib)
);
CREATE INDEX gpus_node ON gpus (node, idx);

CREATE TABLE workload_types (
    name        text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'),
    description text NOT NULL DEFAULT '',
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- A missing entry means the workload does not run on that model.
CREATE TABLE manifest_entries (
    workload_type text NOT NULL REFERENCES workload_types (name) ON DELETE CASCADE ON UPDATE CASCADE,
    gpu_model     text NOT NULL CHECK (length(gpu_model) BETWEEN 1 AND 96),
    vram_mib      bigint NOT NULL CHECK (vram_mib > 0),
    PRIMARY KEY (workload_type, gpu_model)
);

CREATE SEQUENCE job_seq;

CREATE TABLE jobs (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq           bigint NOT NULL UNIQUE DEFAULT nextval('job_seq'),
    owner_id      uuid NOT NULL REFERENCES users (id),
    name          text NOT NULL,
    spec          jsonb NOT NULL,
    image         text NOT NULL,
    command       text[] NOT NULL,
    gpu_count     integer NOT NULL CHECK (gpu_count >= 0),
    workload      text,
    min_vram_mib  bigint,
    exclusive     boolean NOT NULL DEFAULT false,
    priority      integer NOT NULL DEFAULT 0,
    timeout_s     bigint NOT NULL CHECK (timeout_s > 0),
    status        text NOT NULL CHECK (status IN ('queued', 'admitted', 'starting', 'running',
                      'succeeded', 'failed', 'cancelled', 'timed_out', 'rejected')),
    status_reason text,
    node          text,
    container_id  text,
    exit_code     integer,
    cancel_requested_at timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    admitted_at   timestamptz,
    started_at    timestamptz,
    finished_at   timestamptz,
    released_at   timestamptz,
    deadline_at   timestamptz,
    log_path      text
);
CREATE INDEX jobs_queue ON jobs (priority DESC, seq) WHERE status = 'queued';
CREATE INDEX jobs_owner ON jobs (owner_id, seq DESC);
CREATE INDEX jobs_status_seq ON jobs (status, seq DESC);
-- Finished jobs whose capacity has not been given back yet: what a pass reclaims.
CREATE INDEX jobs_to_release ON jobs (id)
    WHERE released_at IS NULL AND status IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'rejected');

-- The ledger. One live row per (job, card); `released_at` set when the capacity is given back.
CREATE TABLE reservations (
    id          bigserial PRIMARY KEY,
    job_id      uuid NOT NULL REFERENCES jobs (id),
    gpu_uuid    uuid NOT NULL REFERENCES gpus (uuid),
    vram_mib    bigint NOT NULL CHECK (vram_mib >= 0),
    exclusive   boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    released_at timestamptz
);
CREATE UNIQUE INDEX reservations_live ON reservations (job_id, gpu_uuid) WHERE released_at IS NULL;
CREATE INDEX reservations_live_gpu ON reservations (gpu_uuid) WHERE released_at IS NULL;
-- At most one live exclusive reservation per card.
CREATE UNIQUE INDEX reservations_one_exclusive ON reservations (gpu_uuid)
    WHERE released_at IS NULL AND exclusive;

-- Append-only audit trails: the application can insert, never change or remove.
CREATE TABLE job_events (
    id     bigserial PRIMARY KEY,
    job_id uuid NOT NULL REFERENCES jobs (id),
    at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    actor  text NOT NULL,
    kind   text NOT NULL,
    detail jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX job_events_job ON job_events (job_id, id);

CREATE TABLE audit_events (
    id      bigserial PRIMARY KEY,
    at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    actor   text NOT NULL,
    kind    text NOT NULL,
    subject text NOT NULL,
    detail  jsonb NOT NULL DEFAULT '{}'
);

CREATE FUNCTION refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only', TG_TABLE_NAME;
END $$;
CREATE TRIGGER job_events_append_only BEFORE UPDATE OR DELETE ON job_events
    FOR EACH ROW EXECUTE FUNCTION refuse_change();
CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION refuse_change();

-- Launch policy and limits, edited by admins (one JSON document per key).
CREATE TABLE settings (
    key        text PRIMARY KEY,
    value      jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
