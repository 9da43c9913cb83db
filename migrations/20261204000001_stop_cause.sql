-- Who or what stopped a job (or ended it before it ran), set when the stop is asked for, so the
-- end it leads to says so without a second look (server::db::lifecycle, model::StopCause).
ALTER TABLE jobs ADD COLUMN stop_cause text CHECK (stop_cause IN ('owner', 'admin', 'timeout',
    'vram_overuse', 'node_lost', 'user_disabled', 'runtime_restart'));
