-- Idle reclaim (docs/admission.md#idle-cards): gpuq stops a job whose cards stayed idle, with the
-- stop cause `idle`; a user may hear of the flag before the stop (notification event `idle`).
-- The flag itself is recorded as job events (`idle_flagged`, `idle_cleared`, `idle`), which the
-- job page reads; the GPU-hours reclaimed are worked out from the stopped jobs (usage report).

ALTER TABLE jobs DROP CONSTRAINT jobs_stop_cause_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_stop_cause_check CHECK (stop_cause IN ('owner', 'admin',
    'timeout', 'vram_overuse', 'node_lost', 'user_disabled', 'runtime_restart', 'dependency',
    'idle'));

ALTER TABLE notification_settings DROP CONSTRAINT notification_settings_events_check;
ALTER TABLE notification_settings ADD CONSTRAINT notification_settings_events_check
    CHECK (events <@ ARRAY['succeeded', 'failed', 'timed_out', 'cancelled', 'vram_overuse',
                           'started_after_wait', 'idle']::text[]);
ALTER TABLE notification_outbox DROP CONSTRAINT notification_outbox_event_check;
ALTER TABLE notification_outbox ADD CONSTRAINT notification_outbox_event_check
    CHECK (event IN ('succeeded', 'failed', 'timed_out', 'cancelled', 'vram_overuse',
                     'started_after_wait', 'idle'));

CREATE INDEX jobs_idle_stopped ON jobs (finished_at) WHERE stop_cause = 'idle';
