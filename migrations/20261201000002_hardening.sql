-- A shared host stays safe (issue 10).

-- Each user's jobs run as a numeric uid/gid, never as the image's root. Admins may set them to
-- match the site's Unix accounts; otherwise gpuq allocates one from its configured range when the
-- user's first job launches. Two users never share a uid.
ALTER TABLE users ADD COLUMN job_uid integer CHECK (job_uid > 0),
                  ADD COLUMN job_gid integer CHECK (job_gid > 0);
CREATE UNIQUE INDEX users_job_uid ON users (job_uid) WHERE job_uid IS NOT NULL;

-- Tokens may expire.
ALTER TABLE api_tokens ADD COLUMN expires_at timestamptz;

-- Sign-in attempts, recorded before the password is checked so that parallel guesses count.
-- `ok` is set once the password proved right; `client` is the caller's address.
ALTER TABLE login_failures RENAME TO login_attempts;
ALTER INDEX login_failures_name_at RENAME TO login_attempts_name_at;
ALTER TABLE login_attempts ADD COLUMN client text NOT NULL DEFAULT '',
                           ADD COLUMN ok boolean NOT NULL DEFAULT false;
CREATE INDEX login_attempts_client_at ON login_attempts (client, at);
