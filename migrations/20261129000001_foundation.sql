-- Users, API tokens and login throttling: the foundation every later table refers to.

CREATE TABLE users (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    username      text NOT NULL UNIQUE
                  CHECK (username ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'),
    password_hash text NOT NULL,
    role          text NOT NULL CHECK (role IN ('member', 'manager', 'admin')),
    disabled_at   timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- Only the SHA-256 of a token is kept: a leaked table does not leak usable tokens.
CREATE TABLE api_tokens (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id      uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         text NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
    token_sha256 bytea NOT NULL UNIQUE CHECK (length(token_sha256) = 32),
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX api_tokens_user ON api_tokens (user_id);

-- Failed sign-ins, keyed by the name that was tried (existing or not), so throttling reveals nothing
-- about which users exist and holds across every gpuq process on this database.
CREATE TABLE login_failures (
    id       bigserial PRIMARY KEY,
    username text NOT NULL,
    at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX login_failures_name_at ON login_failures (username, at);
