-- GPU-hours charged to each user, per UTC day: what fair share decays and budgets sum.
--
-- A running job is charged continuously the share of each card it holds (its reservation over the
-- card's memory, or the whole card if exclusive) × time. When its run ends, a trigger folds the run
-- into these buckets, split at UTC midnights; a running job's part so far is read from the ledger
-- live (server::db::gpu_hours). `hour_epoch` is Σ gpu_hours × the middle of each charged piece
-- (seconds since the epoch): over `gpu_hours`, the moment the day's use is centred on, from which
-- decay is counted.
CREATE TABLE gpu_hours_daily (
    user_id    uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    day        date NOT NULL,
    gpu_hours  double precision NOT NULL CHECK (gpu_hours >= 0),
    hour_epoch double precision NOT NULL,
    PRIMARY KEY (user_id, day)
);
CREATE INDEX gpu_hours_daily_day ON gpu_hours_daily (day);

-- The cards' share a job held while it ran: Σ over the reservations live during [started, finished)
-- of 1 (exclusive) or its memory over the card's.
CREATE FUNCTION job_card_share(job uuid, started timestamptz, finished timestamptz)
RETURNS double precision LANGUAGE sql STABLE AS $$
    SELECT coalesce(sum(CASE WHEN r.exclusive THEN 1.0
                             ELSE least(1.0, r.vram_mib::float8 / g.total_mib) END), 0)
      FROM reservations r JOIN gpus g ON g.uuid = r.gpu_uuid
     WHERE r.job_id = job
       AND r.created_at < finished
       AND (r.released_at IS NULL OR r.released_at > started)
$$;

CREATE FUNCTION charge_gpu_hours() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    share double precision;
    d date;
    a timestamptz;
    b timestamptz;
    h double precision;
BEGIN
    IF NEW.started_at IS NULL OR NEW.finished_at IS NULL OR OLD.finished_at IS NOT NULL
       OR NEW.finished_at <= NEW.started_at THEN
        RETURN NEW;
    END IF;
    share := job_card_share(NEW.id, NEW.started_at, NEW.finished_at);
    IF share <= 0 THEN
        RETURN NEW;
    END IF;
    d := (NEW.started_at AT TIME ZONE 'UTC')::date;
    LOOP
        a := greatest(NEW.started_at, d::timestamp AT TIME ZONE 'UTC');
        EXIT WHEN a >= NEW.finished_at;
        b := least(NEW.finished_at, (d + 1)::timestamp AT TIME ZONE 'UTC');
        h := share * extract(epoch FROM b - a) / 3600.0;
        IF h > 0 THEN
            INSERT INTO gpu_hours_daily AS x (user_id, day, gpu_hours, hour_epoch)
            VALUES (NEW.owner_id, d, h, h * extract(epoch FROM a + (b - a) / 2))
            ON CONFLICT (user_id, day) DO UPDATE
                SET gpu_hours = x.gpu_hours + EXCLUDED.gpu_hours,
                    hour_epoch = x.hour_epoch + EXCLUDED.hour_epoch;
        END IF;
        d := d + 1;
    END LOOP;
    RETURN NEW;
END
$$;

CREATE TRIGGER jobs_charge_gpu_hours AFTER UPDATE OF finished_at ON jobs
    FOR EACH ROW EXECUTE FUNCTION charge_gpu_hours();
