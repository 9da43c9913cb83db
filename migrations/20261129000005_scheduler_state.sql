-- When the last admission pass committed, so the UI can show that an edit (manifest, card state,
-- launch policy) has been seen by a pass. One row, updated inside every pass under its lock.
CREATE TABLE scheduler_state (
    id            smallint PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    last_pass_at  timestamptz NOT NULL DEFAULT '-infinity',
    passes        bigint NOT NULL DEFAULT 0
);
INSERT INTO scheduler_state DEFAULT VALUES;
