-- Images on each node, as its puller last found them (issue 27): a queued job is placed on a node
-- only once its image is `present` there, so no card is held while an image is pulled.
--
-- `image_ref` is the full reference (`docker.io/library/busybox:latest`, see model::image_ref);
-- `resolved_at` is when the pull that made the image present began (the moment its tag was
-- resolved), so under `pull: always` a job is placed only on an image resolved after it was
-- queued; `updated_at` of a `failed` row says which jobs the failure judged (those queued before).
CREATE TABLE node_images (
    node           text        NOT NULL,
    image_ref      text        NOT NULL,
    digest         text,
    state          text        NOT NULL CHECK (state IN ('pulling', 'present', 'retrying', 'failed')),
    bytes_done     bigint      NOT NULL DEFAULT 0,
    bytes_total    bigint,
    error          text,
    attempts       integer     NOT NULL DEFAULT 0,
    retry_at       timestamptz,
    resolved_at    timestamptz,
    updated_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_used_at   timestamptz,
    pulled_by_gpuq boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (node, image_ref)
);

-- The nodes whose admission depends on node_images: each puller enters its node when it starts.
-- A node without a puller (an older gpuq, a node without a runner) is placed on as before, its
-- image checked at launch.
CREATE TABLE image_pullers (
    node       text        PRIMARY KEY,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The exact image a job ran (`repo@sha256:…`, or the image id of a local image without one).
ALTER TABLE jobs ADD COLUMN image_digest text;
