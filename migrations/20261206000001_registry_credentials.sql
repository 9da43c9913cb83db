-- Registry credentials (issue 27): what each node's puller hands dockerd when it pulls an image
-- from `host`. Admins set them (REST, CLI, admin page); nobody reads the password back.
--
-- `sealed` is XChaCha20-Poly1305 (24-byte nonce, then ciphertext and tag) of the password, under
-- a 32-byte key kept outside the database (GPUQ_SECRETS_KEY, or <data-dir>/secrets.key), with
-- the host and the username as associated data: a row copied to another host, or given another
-- username, does not open. See server::registries.
CREATE TABLE registry_credentials (
    host     text        PRIMARY KEY,
    username text        NOT NULL CHECK (username <> ''),
    sealed   bytea       NOT NULL,
    set_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    set_by   text        NOT NULL
);
