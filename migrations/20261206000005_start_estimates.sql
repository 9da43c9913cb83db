-- The start estimate of each queued job (server::admission::estimate): when it is expected to
-- start, when at the latest, or why it cannot start as things stand. Rewritten whole by one node
-- at a time every few seconds; a job's row goes when it leaves the queue.
CREATE TABLE job_estimates (
    job_id             uuid PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    estimated_start_at timestamptz,
    latest_start_at    timestamptz,
    cannot_start       text,
    computed_at        timestamptz NOT NULL DEFAULT now()
);

-- The run times the estimate learns from: the newest finished runs of each workload type.
CREATE INDEX jobs_runs_by_workload ON jobs (workload, finished_at DESC)
    WHERE workload IS NOT NULL AND started_at IS NOT NULL AND finished_at IS NOT NULL
      AND status IN ('succeeded', 'failed', 'timed_out');
