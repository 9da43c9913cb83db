//! The numeric uid/gid each user's jobs run as. Admins may set them (to match the site's Unix
//! accounts); otherwise one is allocated from the configured range when the user's first job
//! launches. Two users never share a uid (a unique index says so, and allocation takes a lock).

use sqlx::{PgExecutor, PgPool};
use std::fmt;
use std::str::FromStr;
use uuid::Uuid;

/// Advisory-lock key of uid allocation: "gpuq" in ASCII, then 2 ("job uids"), so two nodes never
/// hand out the same free uid at once.
pub const JOB_UID_LOCK: i64 = 0x6770_7571_0000_0002;

/// The uid and gid a user's jobs run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobIds {
    /// Numeric user id inside the container (and owner of what it writes on mounted folders).
    pub uid: u32,
    /// Numeric group id.
    pub gid: u32,
}

/// The uids gpuq allocates from, both ends included (`--job-uid-range`, e.g. `200000-299999`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobUidRange {
    /// Lowest uid handed out.
    pub first: u32,
    /// Highest uid handed out.
    pub last: u32,
}

impl Default for JobUidRange {
    fn default() -> Self {
        JobUidRange {
            first: 200_000,
            last: 299_999,
        }
    }
}

impl fmt::Display for JobUidRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

impl FromStr for JobUidRange {
    type Err = String;

    /// `FIRST-LAST`: positive, `FIRST <= LAST`, below 2^31 (the column is a Postgres integer).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("`{s}` is not a uid range like 200000-299999");
        let (a, b) = s.trim().split_once('-').ok_or_else(bad)?;
        let first: u32 = a.trim().parse().map_err(|_| bad())?;
        let last: u32 = b.trim().parse().map_err(|_| bad())?;
        if first == 0 {
            return Err("the range must not include uid 0 (root)".into());
        }
        if first > last {
            return Err(format!("the range {first}-{last} is empty"));
        }
        if last > i32::MAX as u32 {
            return Err(format!("uids must be at most {}", i32::MAX));
        }
        Ok(JobUidRange { first, last })
    }
}

/// Why a uid could not be set.
#[derive(Debug, thiserror::Error)]
pub enum SetError {
    /// Another user already runs jobs as this uid.
    #[error("uid {uid} is already the job uid of `{owner}`")]
    Taken {
        /// The uid asked for.
        uid: u32,
        /// Who has it.
        owner: String,
    },
    /// The database failed.
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// The ids the owner of `job` runs as, allocating a uid from `range` (gid = uid) if the owner has
/// none yet. `Ok(None)` when the range is exhausted.
pub async fn for_job(pool: &PgPool, job: Uuid, range: JobUidRange) -> sqlx::Result<Option<JobIds>> {
    let owner: Uuid = sqlx::query_scalar("SELECT owner_id FROM jobs WHERE id = $1")
        .bind(job)
        .fetch_one(pool)
        .await?;
    if let Some(ids) = of_user(pool, owner).await? {
        return Ok(Some(ids));
    }
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(JOB_UID_LOCK)
        .execute(&mut *tx)
        .await?;
    // The lowest free uid of the range; an admin-set gid is kept.
    let row: Option<(i32, i32)> = sqlx::query_as(
        "UPDATE users SET job_uid = free.uid, job_gid = coalesce(users.job_gid, free.uid)
         FROM (SELECT s AS uid FROM generate_series($2::integer, $3::integer) s
               WHERE NOT EXISTS (SELECT 1 FROM users u WHERE u.job_uid = s)
               ORDER BY s LIMIT 1) free
         WHERE users.id = $1 AND users.job_uid IS NULL
         RETURNING users.job_uid, users.job_gid",
    )
    .bind(owner)
    .bind(range.first as i32)
    .bind(range.last as i32)
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    match row {
        Some((uid, gid)) => Ok(Some(ids(uid, gid))),
        // Either the range is full, or someone set the uid meanwhile: read again.
        None => of_user(pool, owner).await,
    }
}

/// The ids a user's jobs run as, if they have a uid yet (gid defaults to the uid).
pub async fn of_user(db: impl PgExecutor<'_>, user: Uuid) -> sqlx::Result<Option<JobIds>> {
    let row: Option<(Option<i32>, Option<i32>)> =
        sqlx::query_as("SELECT job_uid, job_gid FROM users WHERE id = $1")
            .bind(user)
            .fetch_optional(db)
            .await?;
    Ok(match row {
        Some((Some(uid), gid)) => Some(ids(uid, gid.unwrap_or(uid))),
        _ => None,
    })
}

/// Sets a user's uid and/or gid (an admin's choice). A gid given without a uid needs the user to
/// have a uid already, or it is kept for when one is allocated.
pub async fn set(
    tx: &mut sqlx::PgConnection,
    user: Uuid,
    uid: Option<u32>,
    gid: Option<u32>,
) -> Result<(), SetError> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(JOB_UID_LOCK)
        .execute(&mut *tx)
        .await?;
    if let Some(uid) = uid {
        let owner: Option<String> =
            sqlx::query_scalar("SELECT username FROM users WHERE job_uid = $1 AND id <> $2")
                .bind(uid as i32)
                .bind(user)
                .fetch_optional(&mut *tx)
                .await?;
        if let Some(owner) = owner {
            return Err(SetError::Taken { uid, owner });
        }
    }
    sqlx::query(
        "UPDATE users SET job_uid = coalesce($2, job_uid), job_gid = coalesce($3, job_gid)
         WHERE id = $1",
    )
    .bind(user)
    .bind(uid.map(|u| u as i32))
    .bind(gid.map(|g| g as i32))
    .execute(&mut *tx)
    .await?;
    Ok(())
}

fn ids(uid: i32, gid: i32) -> JobIds {
    JobIds {
        uid: uid.unsigned_abs(),
        gid: gid.unsigned_abs(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_with_clear_errors() {
        assert_eq!(
            "200000-299999".parse::<JobUidRange>(),
            Ok(JobUidRange::default())
        );
        assert_eq!(JobUidRange::default().to_string(), "200000-299999");
        assert!("0-10".parse::<JobUidRange>().unwrap_err().contains("root"));
        assert!("10-5".parse::<JobUidRange>().unwrap_err().contains("empty"));
        assert!("abc"
            .parse::<JobUidRange>()
            .unwrap_err()
            .contains("200000-299999"));
        assert!("1-4294967295"
            .parse::<JobUidRange>()
            .unwrap_err()
            .contains("at most"));
    }
}
