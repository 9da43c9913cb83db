//! Repository for the images on each node (`node_images`) and the nodes that pull them
//! (`image_pullers`): written by each node's puller, read by the admission pass.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgExecutor};
use uuid::Uuid;

/// Where an image stands on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageState {
    /// Being pulled now.
    Pulling,
    /// On the node: jobs naming it may be placed there.
    Present,
    /// The registry did not answer; pulled again at `retry_at`.
    Retrying,
    /// It cannot be had here (not found, refused, never pulled, retries spent): jobs queued
    /// before `updated_at` fail with `error`.
    Failed,
}

impl ImageState {
    fn as_str(self) -> &'static str {
        match self {
            ImageState::Pulling => "pulling",
            ImageState::Present => "present",
            ImageState::Retrying => "retrying",
            ImageState::Failed => "failed",
        }
    }

    fn parse(s: &str) -> Option<ImageState> {
        [
            ImageState::Pulling,
            ImageState::Present,
            ImageState::Retrying,
            ImageState::Failed,
        ]
        .into_iter()
        .find(|st| st.as_str() == s)
    }
}

/// One `node_images` row.
#[derive(Debug, Clone, FromRow)]
pub struct NodeImage {
    /// The node.
    pub node: String,
    /// The full image reference.
    pub image_ref: String,
    /// What the node has under that reference (`repo@sha256:…` or an image id).
    pub digest: Option<String>,
    /// Its state, as stored (see [`NodeImage::state`]).
    #[sqlx(rename = "state")]
    pub state_text: String,
    /// Bytes fetched by the pull in progress.
    pub bytes_done: i64,
    /// Bytes the pull in progress fetches in all, once the registry said.
    pub bytes_total: Option<i64>,
    /// Why the last pull failed.
    pub error: Option<String>,
    /// Pulls tried since the last success.
    pub attempts: i32,
    /// When a `retrying` image is pulled again.
    pub retry_at: Option<DateTime<Utc>>,
    /// When the pull that made it present began.
    pub resolved_at: Option<DateTime<Utc>>,
    /// The row's last change.
    pub updated_at: DateTime<Utc>,
}

impl NodeImage {
    /// The row's state (`None` for a spelling this gpuq does not know: treated as absent).
    pub fn state(&self) -> Option<ImageState> {
        ImageState::parse(&self.state_text)
    }
}

const COLUMNS: &str = "node, image_ref, digest, state, bytes_done, bytes_total, error, attempts, \
    retry_at, resolved_at, updated_at";

/// Enters `node` among the nodes that pull their images (idempotent).
pub async fn register_puller(db: impl PgExecutor<'_>, node: &str) -> sqlx::Result<()> {
    sqlx::query("INSERT INTO image_pullers (node) VALUES ($1) ON CONFLICT (node) DO NOTHING")
        .bind(node)
        .execute(db)
        .await?;
    Ok(())
}

/// The nodes that pull their images.
pub async fn pullers(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar("SELECT node FROM image_pullers ORDER BY node")
        .fetch_all(db)
        .await
}

/// Every row of every node (small: one per node and image in use).
pub async fn all(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<NodeImage>> {
    sqlx::query_as(&format!("SELECT {COLUMNS} FROM node_images"))
        .fetch_all(db)
        .await
}

/// The rows of one node.
pub async fn on_node(db: impl PgExecutor<'_>, node: &str) -> sqlx::Result<Vec<NodeImage>> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM node_images WHERE node = $1"
    ))
    .bind(node)
    .fetch_all(db)
    .await
}

/// A queued job as the puller reads it.
#[derive(Debug, Clone, FromRow)]
pub struct WantedBy {
    /// The job.
    pub id: Uuid,
    /// Its image as given.
    pub image: String,
    /// Its cards.
    pub gpu_count: i32,
    /// When it was queued.
    pub created_at: DateTime<Utc>,
}

/// Every queued job's image.
pub async fn queued(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<WantedBy>> {
    sqlx::query_as("SELECT id, image, gpu_count, created_at FROM jobs WHERE status = 'queued'")
        .fetch_all(db)
        .await
}

/// The number of cards of `node` (present or not: a job sized for them may wait for them).
pub async fn cards_on(db: impl PgExecutor<'_>, node: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM gpus WHERE node = $1")
        .bind(node)
        .fetch_one(db)
        .await
}

/// A pull of `image` on `node` begins now (its tag is resolved from this moment on); `attempts`
/// counts it.
pub async fn set_pulling(
    db: impl PgExecutor<'_>,
    node: &str,
    image: &str,
    attempts: i32,
) -> sqlx::Result<DateTime<Utc>> {
    sqlx::query_scalar(
        "INSERT INTO node_images (node, image_ref, state, attempts) VALUES ($1, $2, 'pulling', $3) \
         ON CONFLICT (node, image_ref) DO UPDATE SET state = 'pulling', bytes_done = 0, \
           bytes_total = NULL, error = NULL, attempts = $3, retry_at = NULL, \
           updated_at = clock_timestamp() \
         RETURNING updated_at",
    )
    .bind(node)
    .bind(image)
    .bind(attempts)
    .fetch_one(db)
    .await
}

/// How far the pull of `image` on `node` has come.
pub async fn set_progress(
    db: impl PgExecutor<'_>,
    node: &str,
    image: &str,
    done: i64,
    total: Option<i64>,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE node_images SET bytes_done = $3, bytes_total = $4, updated_at = clock_timestamp() \
         WHERE node = $1 AND image_ref = $2 AND state = 'pulling'",
    )
    .bind(node)
    .bind(image)
    .bind(done)
    .bind(total)
    .execute(db)
    .await?;
    Ok(())
}

/// `image` is on `node` as `digest`; `pulled_at` is when gpuq's pull of it began (`None`: it was
/// there already, loaded by someone else, and gpuq never removes it).
pub async fn set_present(
    db: impl PgExecutor<'_>,
    node: &str,
    image: &str,
    digest: &str,
    pulled_at: Option<DateTime<Utc>>,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO node_images (node, image_ref, digest, state, resolved_at, pulled_by_gpuq) \
         VALUES ($1, $2, $3, 'present', coalesce($4, clock_timestamp()), $4 IS NOT NULL) \
         ON CONFLICT (node, image_ref) DO UPDATE SET digest = $3, state = 'present', error = NULL, \
           attempts = 0, retry_at = NULL, resolved_at = coalesce($4, clock_timestamp()), \
           pulled_by_gpuq = node_images.pulled_by_gpuq OR $4 IS NOT NULL, \
           bytes_done = coalesce(node_images.bytes_total, node_images.bytes_done), \
           updated_at = clock_timestamp()",
    )
    .bind(node)
    .bind(image)
    .bind(digest)
    .bind(pulled_at)
    .execute(db)
    .await?;
    Ok(())
}

/// The registry of `image` did not answer `node`: pulled again at `retry_at`.
pub async fn set_retrying(
    db: impl PgExecutor<'_>,
    node: &str,
    image: &str,
    error: &str,
    retry_at: DateTime<Utc>,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE node_images SET state = 'retrying', error = $3, retry_at = $4, \
           updated_at = clock_timestamp() WHERE node = $1 AND image_ref = $2",
    )
    .bind(node)
    .bind(image)
    .bind(error)
    .bind(retry_at)
    .execute(db)
    .await?;
    Ok(())
}

/// `image` cannot be had on `node`, for `error`: the jobs queued until now fail with it.
pub async fn set_failed(
    db: impl PgExecutor<'_>,
    node: &str,
    image: &str,
    error: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO node_images (node, image_ref, state, error) VALUES ($1, $2, 'failed', $3) \
         ON CONFLICT (node, image_ref) DO UPDATE SET state = 'failed', error = $3, \
           retry_at = NULL, digest = NULL, updated_at = clock_timestamp()",
    )
    .bind(node)
    .bind(image)
    .bind(error)
    .execute(db)
    .await?;
    Ok(())
}
