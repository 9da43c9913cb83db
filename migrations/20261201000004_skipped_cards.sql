-- Devices a node's inventory sees but does not schedule (a MIG-enabled card, a MIG device): kept so
-- that `GET /api/v1/gpus` and the dashboard show them as such. Each node replaces its own rows at
-- every inventory refresh.
CREATE TABLE gpu_skipped (
    node   text NOT NULL,
    id     text NOT NULL CHECK (length(id) BETWEEN 1 AND 128),
    idx    integer NOT NULL CHECK (idx >= 0),
    model  text,
    reason text NOT NULL,
    PRIMARY KEY (node, id)
);
