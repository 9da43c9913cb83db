-- Interactive sessions (server::sessions, docs/sessions.md): a job with a `port` is reached
-- through gpuq's proxy on a session origin of its own, never on gpuq's.

-- Where the proxy reaches a running session (the container's address on the job network and the
-- job's port), written by the runner once the container started; when it last carried HTTP or
-- WebSocket traffic (written coarsely by the proxy); when its page was warned that it is idle.
ALTER TABLE jobs ADD COLUMN session_addr text;
ALTER TABLE jobs ADD COLUMN session_active_at timestamptz;
ALTER TABLE jobs ADD COLUMN session_warned_at timestamptz;

-- The one-time codes (`code`: single use, a minute) that carry a signed-in owner from gpuq's
-- origin to the session origin, and the session origin's cookies (`cookie`: until the job's
-- deadline), each bound to one job and one user. Only the SHA-256 of either is kept.
CREATE TABLE session_grants (
    digest     bytea PRIMARY KEY CHECK (length(digest) = 32),
    kind       text NOT NULL CHECK (kind IN ('code', 'cookie')),
    job_id     uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    user_id    uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX session_grants_job ON session_grants (job_id);
CREATE INDEX session_grants_expiry ON session_grants (expires_at);

-- An idle session is stopped for a cause of its own.
ALTER TABLE jobs DROP CONSTRAINT jobs_stop_cause_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_stop_cause_check CHECK (stop_cause IN ('owner', 'admin',
    'timeout', 'vram_overuse', 'node_lost', 'user_disabled', 'runtime_restart', 'dependency',
    'idle', 'session_idle'));
