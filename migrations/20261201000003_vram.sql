-- VRAM truth on shared cards (issue 12): what each job really holds on each card it was given.

-- One row per (job, card), written by the sampler of the card's node while the job runs and kept
-- afterwards as the job's record. `used_mib` is the latest reading (what the job's processes hold
-- now), `peak_mib` the most seen over the run, `accounting_peak_mib` NVML accounting's per-process
-- peak where the driver keeps it (NULL: unknown, never 0). `committed_mib` is what the job's
-- reservation holds on the card. `over_samples` counts consecutive readings above the commitment;
-- `warned_at` is when it first stayed above for `--vram-overuse-samples` readings.
CREATE TABLE job_vram (
    job_id              uuid NOT NULL REFERENCES jobs (id),
    gpu_uuid            uuid NOT NULL REFERENCES gpus (uuid) ON DELETE CASCADE,
    committed_mib       bigint NOT NULL CHECK (committed_mib >= 0),
    used_mib            bigint NOT NULL CHECK (used_mib >= 0),
    peak_mib            bigint NOT NULL CHECK (peak_mib >= used_mib),
    accounting_peak_mib bigint CHECK (accounting_peak_mib >= 0),
    over_samples        integer NOT NULL DEFAULT 0 CHECK (over_samples >= 0),
    warned_at           timestamptz,
    sampled_at          timestamptz NOT NULL,
    PRIMARY KEY (job_id, gpu_uuid)
);
CREATE INDEX job_vram_gpu ON job_vram (gpu_uuid);

-- Simulated cards have no driver to ask: admins and tests say what each job on one uses
-- (`PUT /api/v1/gpus/{uuid}/sim`), and the same sampler and policing read it.
CREATE TABLE sim_job_vram (
    gpu_uuid uuid NOT NULL REFERENCES gpus (uuid) ON DELETE CASCADE,
    job_id   uuid NOT NULL REFERENCES jobs (id),
    used_mib bigint NOT NULL CHECK (used_mib >= 0),
    PRIMARY KEY (gpu_uuid, job_id)
);

-- Why gpuq itself asked a running job to stop (e.g. `vram_overuse: …`), set with
-- `cancel_requested_at`; the runner ends such a job `failed` with this reason instead of
-- `cancelled`.
ALTER TABLE jobs ADD COLUMN stop_reason text;
