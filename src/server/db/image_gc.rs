//! Repository of each node's image collector (`runner::image_gc`): the images gpuq pulled onto a
//! node and when a job last used each, the images active jobs name, and forgetting an image the
//! collector removed (so that a later job naming it has it pulled again).

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgExecutor};
use uuid::Uuid;

/// An image gpuq pulled onto a node, as the collector weighs it.
#[derive(Debug, Clone, FromRow)]
pub struct Pulled {
    /// The full reference.
    pub image_ref: String,
    /// What the node had under it when it was pulled.
    pub digest: Option<String>,
    /// When a job last used it there (its launch or its end); an image no job used yet counts
    /// from its pull.
    pub last_use: DateTime<Utc>,
}

/// The images gpuq pulled that are on `node`, least recently used first.
pub async fn pulled_on(db: impl PgExecutor<'_>, node: &str) -> sqlx::Result<Vec<Pulled>> {
    sqlx::query_as(
        "SELECT image_ref, digest, coalesce(last_used_at, resolved_at, updated_at) AS last_use \
         FROM node_images WHERE node = $1 AND state = 'present' AND pulled_by_gpuq \
         ORDER BY last_use, image_ref",
    )
    .bind(node)
    .fetch_all(db)
    .await
}

/// The images (as given) of every queued job, which may be placed on any node, and of the jobs
/// admitted, starting or running on `node`.
pub async fn named_by_active_jobs(
    db: impl PgExecutor<'_>,
    node: &str,
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(
        "SELECT DISTINCT image FROM jobs WHERE status = 'queued' \
            OR (status IN ('admitted', 'starting', 'running') AND node = $1)",
    )
    .bind(node)
    .fetch_all(db)
    .await
}

/// The image (as given) of `job`.
pub async fn image_of(db: impl PgExecutor<'_>, job: Uuid) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar("SELECT image FROM jobs WHERE id = $1")
        .bind(job)
        .fetch_optional(db)
        .await
}

/// A job used `image_ref` on `node` now.
pub async fn touch(db: impl PgExecutor<'_>, node: &str, image_ref: &str) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE node_images SET last_used_at = clock_timestamp() \
         WHERE node = $1 AND image_ref = $2",
    )
    .bind(node)
    .bind(image_ref)
    .execute(db)
    .await?;
    Ok(())
}

/// A row the collector took away, as it was (to put back if dockerd refuses the removal).
#[derive(Debug, Clone, FromRow)]
pub struct Forgotten {
    /// The full reference.
    pub image_ref: String,
    /// Its digest.
    pub digest: Option<String>,
    /// When its pull began.
    pub resolved_at: Option<DateTime<Utc>>,
    /// When a job last used it.
    pub last_used_at: Option<DateTime<Utc>>,
}

/// Takes the rows of `refs` on `node` away, if they are still images gpuq pulled and present:
/// from now on the admission pass places no job of theirs on `node` until its puller has the
/// image again. Returns the rows taken.
pub async fn forget(
    db: impl PgExecutor<'_>,
    node: &str,
    refs: &[String],
) -> sqlx::Result<Vec<Forgotten>> {
    sqlx::query_as(
        "DELETE FROM node_images WHERE node = $1 AND image_ref = ANY($2) \
           AND state = 'present' AND pulled_by_gpuq \
         RETURNING image_ref, digest, resolved_at, last_used_at",
    )
    .bind(node)
    .bind(refs)
    .fetch_all(db)
    .await
}

/// Puts back a row [`forget`] took, when its image could not be removed after all (unless the
/// puller has written a newer one since).
pub async fn restore(db: impl PgExecutor<'_>, node: &str, row: &Forgotten) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO node_images (node, image_ref, digest, state, resolved_at, last_used_at, \
           pulled_by_gpuq) VALUES ($1, $2, $3, 'present', $4, $5, true) \
         ON CONFLICT (node, image_ref) DO NOTHING",
    )
    .bind(node)
    .bind(&row.image_ref)
    .bind(&row.digest)
    .bind(row.resolved_at)
    .bind(row.last_used_at)
    .execute(db)
    .await?;
    Ok(())
}
