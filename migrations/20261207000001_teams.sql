-- Teams, share weights and budgets (fair share, docs/admission.md#fair-share).
--
-- Every user belongs to exactly one team; a team nobody named is `default`. A team's weight says
-- what part of the cards its members are owed against the other teams; a user's weight says what
-- part of their team's share is theirs. Both default to 1 (equal). An optional budget caps the
-- GPU-hours a team or a user may use per week or per month: soft (past it, the owner's jobs go
-- after the others of their priority) or hard (past it, their jobs wait, `budget_exhausted`).

CREATE TABLE teams (
    name                text PRIMARY KEY
                        CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'),
    weight              double precision NOT NULL DEFAULT 1
                        CHECK (weight > 0 AND weight <= 1000000),
    budget_gpu_hours    double precision
                        CHECK (budget_gpu_hours IS NULL OR (budget_gpu_hours >= 0 AND budget_gpu_hours <= 100000000)),
    budget_period       text CHECK (budget_period IN ('week', 'month')),
    budget_kind         text CHECK (budget_kind IN ('soft', 'hard')),
    created_at          timestamptz NOT NULL DEFAULT now(),
    -- A budget is all three or none.
    CHECK ((budget_gpu_hours IS NULL) = (budget_period IS NULL)
           AND (budget_period IS NULL) = (budget_kind IS NULL))
);
INSERT INTO teams (name) VALUES ('default');

ALTER TABLE users
    ADD COLUMN team text NOT NULL DEFAULT 'default'
        REFERENCES teams (name) ON UPDATE CASCADE,
    ADD COLUMN weight double precision NOT NULL DEFAULT 1
        CHECK (weight > 0 AND weight <= 1000000),
    ADD COLUMN budget_gpu_hours double precision
        CHECK (budget_gpu_hours IS NULL OR (budget_gpu_hours >= 0 AND budget_gpu_hours <= 100000000)),
    ADD COLUMN budget_period text CHECK (budget_period IN ('week', 'month')),
    ADD COLUMN budget_kind text CHECK (budget_kind IN ('soft', 'hard')),
    ADD CONSTRAINT users_budget_whole
        CHECK ((budget_gpu_hours IS NULL) = (budget_period IS NULL)
               AND (budget_period IS NULL) = (budget_kind IS NULL));
CREATE INDEX users_team ON users (team);
