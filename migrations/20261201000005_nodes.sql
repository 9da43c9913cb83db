-- The gpuq processes sharing this database, one row per node name. Each `gpuq serve` registers its
-- `--node` at start and heartbeats while it runs; whether a node is lost is derived from database
-- time (`now() - heartbeat_at > lost_after_s`), so the hosts' clocks never matter.
--
-- A node with no row here (an old database, cards written directly by tests) counts as up.
CREATE SEQUENCE node_epochs;

CREATE TABLE nodes (
    -- The node's name, as `--node` gives it; cards (`gpus.node`) and jobs (`jobs.node`) name it.
    name          text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 253),
    -- The gpuq version the node's process runs (its Cargo package version).
    version       text NOT NULL,
    -- Where other nodes and operators reach this node's HTTP edge (`--advertise-url`).
    advertise_url text NOT NULL,
    -- Whether the process launches jobs (`--runner`).
    runs_jobs     boolean NOT NULL,
    -- An admin's wish, held across restarts: `up` takes new work, `drained` runs its jobs out and
    -- takes no new ones. `lost` is never stored: it is derived from the heartbeat.
    state         text NOT NULL DEFAULT 'up' CHECK (state IN ('up', 'drained')),
    -- The node's last heartbeat, in database time.
    heartbeat_at  timestamptz NOT NULL DEFAULT now(),
    -- When the process holding the lease registered, in database time.
    started_at    timestamptz NOT NULL DEFAULT now(),
    -- Seconds without a heartbeat after which the node is lost (the process's
    -- `--node-lost-after-s`), stored so that every reader derives the same answer.
    lost_after_s  integer NOT NULL DEFAULT 15 CHECK (lost_after_s > 0),
    -- The lease: taken from `node_epochs` at every registration and at every forget, never reused.
    -- A heartbeat names the epoch it holds; when the row's epoch differs the process lost its lease
    -- (another process took the name, or an admin forgot the node) and must stop starting jobs.
    epoch         bigint NOT NULL DEFAULT nextval('node_epochs'),
    -- When an admin forgot the node (its jobs ended `node_lost`); cleared when it registers again.
    -- A forgotten node counts as lost until then.
    forgotten_at  timestamptz
);
