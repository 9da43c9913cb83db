-- Notifications: what each user hears about and where, and the outbox of deliveries.
--
-- The outbox row of a status change is written by a trigger on jobs.status, so it is in the same
-- transaction as the change whichever lifecycle statement made it: committed together or not at
-- all. The delivery workers (one per node) send it afterwards and mark it; see docs/operate.md.

CREATE TABLE notification_settings (
    user_id      uuid PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    email        text,
    events       text[] NOT NULL DEFAULT '{}'
                 CHECK (events <@ ARRAY['succeeded', 'failed', 'timed_out', 'cancelled',
                                        'vram_overuse', 'started_after_wait']::text[]),
    -- started_after_wait: a start after waiting longer than this many minutes.
    wait_minutes integer NOT NULL DEFAULT 30 CHECK (wait_minutes BETWEEN 1 AND 10080),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE notification_webhooks (
    user_id  uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    position integer NOT NULL CHECK (position >= 0),
    url      text NOT NULL,
    format   text NOT NULL CHECK (format IN ('generic', 'slack')),
    secret   text,
    PRIMARY KEY (user_id, position)
);

CREATE TABLE notification_outbox (
    id              bigserial PRIMARY KEY,
    -- Sent with every attempt (Idempotency-Key, the mail's Message-ID): a receiver drops repeats.
    idempotency_key uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(),
    job_id          uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    user_id         uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    event           text NOT NULL CHECK (event IN ('succeeded', 'failed', 'timed_out', 'cancelled',
                                                   'vram_overuse', 'started_after_wait')),
    channel         text NOT NULL CHECK (channel IN ('email', 'webhook')),
    -- The address or URL as the user had it when the job changed.
    target          text NOT NULL,
    format          text CHECK (format IN ('generic', 'slack')),
    secret          text,
    state           text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'sent', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    -- When a worker may take it: now for a new row, after the backoff for a retry, and after the
    -- claim's lease while a worker is sending it (a worker killed mid-send leaves it to another).
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    -- The message, composed at the first attempt and sent the same at every later one.
    body            jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz
);
CREATE INDEX notification_outbox_due ON notification_outbox (next_attempt_at) WHERE state = 'pending';
CREATE INDEX notification_outbox_user ON notification_outbox (user_id, id DESC);

CREATE FUNCTION notification_outbox_on_status() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ev   text;
    s    notification_settings%ROWTYPE;
BEGIN
    IF NEW.status IN ('succeeded', 'failed', 'timed_out', 'cancelled') THEN
        ev := CASE WHEN NEW.status = 'failed' AND NEW.stop_cause = 'vram_overuse'
                   THEN 'vram_overuse' ELSE NEW.status END;
    ELSIF NEW.status = 'running' THEN
        ev := 'started_after_wait';
    ELSE
        RETURN NULL;
    END IF;
    SELECT * INTO s FROM notification_settings WHERE user_id = NEW.owner_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- A stop for VRAM overuse is a failure too: who asked for either hears of it.
    IF NOT (ev = ANY (s.events) OR (ev = 'vram_overuse' AND 'failed' = ANY (s.events))) THEN
        RETURN NULL;
    END IF;
    IF ev = 'started_after_wait' AND (NEW.started_at IS NULL
            OR NEW.started_at - NEW.created_at <= make_interval(mins => s.wait_minutes)) THEN
        RETURN NULL;
    END IF;
    IF s.email IS NOT NULL THEN
        INSERT INTO notification_outbox (job_id, user_id, event, channel, target)
        VALUES (NEW.id, NEW.owner_id, ev, 'email', s.email);
    END IF;
    INSERT INTO notification_outbox (job_id, user_id, event, channel, target, format, secret)
    SELECT NEW.id, NEW.owner_id, ev, 'webhook', w.url, w.format, w.secret
    FROM notification_webhooks w WHERE w.user_id = NEW.owner_id ORDER BY w.position;
    -- Wakes the delivery workers when the change commits (a notification, not a poll): the
    -- job-change event the lifecycle announces, spelled as it does (an identical notification in
    -- one transaction is delivered once), for the changes it does not announce itself.
    PERFORM pg_notify('gpuq_events',
        format('{"kind":"job","job_id":"%s","status":"%s"}', NEW.id, NEW.status));
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_notification_outbox
    AFTER UPDATE OF status ON jobs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION notification_outbox_on_status();
