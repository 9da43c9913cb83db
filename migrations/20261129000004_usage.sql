-- Usage: what each card held and used over time, for the charts and the CSV export.
-- One row per card every few seconds, written by the sampler of the card's node and pruned after the
-- retention. An unknown figure (no driver reading, a simulated card) is NULL, never 0.
CREATE TABLE gpu_samples (
    id              bigserial PRIMARY KEY,
    gpu_uuid        uuid NOT NULL REFERENCES gpus (uuid) ON DELETE CASCADE,
    node            text NOT NULL,
    at              timestamptz NOT NULL,
    total_mib       bigint NOT NULL CHECK (total_mib > 0),
    reserved_mib    bigint NOT NULL CHECK (reserved_mib >= 0),
    used_mib        bigint CHECK (used_mib >= 0),
    external_mib    bigint CHECK (external_mib >= 0),
    utilization_pct integer CHECK (utilization_pct BETWEEN 0 AND 100)
);
-- Pruning and range scans by time; per-card series.
CREATE INDEX gpu_samples_at ON gpu_samples (at);
CREATE INDEX gpu_samples_gpu_at ON gpu_samples (gpu_uuid, at);
