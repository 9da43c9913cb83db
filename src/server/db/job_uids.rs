//! The numeric uid/gid each user's jobs run as. Admins may set them (to match the site's Unix
//! accounts); otherwise one is allocated from the configured range when the user's first job
//! launches. Two users never share a uid (a unique index says so, and allocation takes a lock),
//! and a uid once given is never given to anyone else: every uid a user ever held is recorded in
//! the append-only `job_uids_issued`, because the files its jobs wrote still belong to it after an
//! admin moves the user to another uid.

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
///
/// The default, `2001000000-2099999999`, is where no one else on a typical host hands out ids:
/// above local accounts and groups (Debian's `UID_MAX` 60000, `nobody` 65534, systemd's dynamic
/// and homed users), `useradd`'s subordinate ranges for rootless containers (`/etc/subuid` from
/// 100000 up to `SUB_UID_MAX` 600100000), systemd's container ranges (524288-1879048191),
/// SSSD's and FreeIPA's id-mapped directory users (up to 2000200000); below systemd's foreign
/// range (2147352576) and 2^31, past which some tools read ids as negative (and the column is
/// a Postgres `integer`). The doctor checks the range against the host's account and
/// subordinate-id files. Uids given earlier from another range stay their users' (they are stored
/// with the user), so changing the range, or its default, moves no one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobUidRange {
    /// Lowest uid handed out.
    pub first: u32,
    /// Highest uid handed out.
    pub last: u32,
}

impl JobUidRange {
    /// The default range (see the type's documentation for why there).
    pub const DEFAULT: JobUidRange = JobUidRange {
        first: 2_001_000_000,
        last: 2_099_999_999,
    };
    /// The default before gpuq moved it clear of `useradd`'s subordinate ids: installations made
    /// then hold uids from it.
    pub const BEFORE: JobUidRange = JobUidRange {
        first: 200_000,
        last: 299_999,
    };
}

impl Default for JobUidRange {
    fn default() -> Self {
        JobUidRange::DEFAULT
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
    /// The uid was another user's job uid before: files their jobs wrote still belong to it.
    #[error(
        "uid {uid} was the job uid of `{owner}` before, and files their jobs wrote still belong \
         to it; a job uid is never given to anyone else"
    )]
    GivenBefore {
        /// The uid asked for.
        uid: u32,
        /// Who had it.
        owner: String,
    },
    /// The database failed.
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// The ids the owner of `job` runs as, allocating a uid from `range` (gid = uid) if the owner has
/// none yet: the lowest uid above every uid of the range given so far, else the lowest one never
/// given. `Ok(None)` when every uid of the range has been given.
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
    let Some(uid) = never_given(&mut tx, range).await? else {
        tx.commit().await?;
        return of_user(pool, owner).await;
    };
    // An admin-set gid is kept.
    let row: Option<(i32, i32)> = sqlx::query_as(
        "UPDATE users SET job_uid = $2, job_gid = coalesce(job_gid, $2)
         WHERE id = $1 AND job_uid IS NULL RETURNING job_uid, job_gid",
    )
    .bind(owner)
    .bind(uid)
    .fetch_optional(&mut *tx)
    .await?;
    if row.is_some() {
        record_issued(&mut tx, owner, uid).await?;
    }
    tx.commit().await?;
    match row {
        Some((uid, gid)) => Ok(Some(ids(uid, gid))),
        // Someone set the uid meanwhile: read again.
        None => of_user(pool, owner).await,
    }
}

/// A uid of `range` never given to anyone: the one above the highest given so far (so uids are
/// handed out in order, and finding one costs two index lookups), else the lowest gap, else
/// `None`. The caller holds [`JOB_UID_LOCK`].
async fn never_given(tx: &mut sqlx::PgConnection, range: JobUidRange) -> sqlx::Result<Option<i32>> {
    let (first, last) = (range.first as i32, range.last as i32);
    // As bigint: the range may end at the largest integer.
    let above: Option<i64> = sqlx::query_scalar(
        "SELECT max(uid)::bigint + 1 FROM job_uids_issued WHERE uid BETWEEN $1 AND $2",
    )
    .bind(first)
    .bind(last)
    .fetch_one(&mut *tx)
    .await?;
    if let Ok(next) = i32::try_from(above.unwrap_or(i64::from(first))) {
        let sql = format!("SELECT $1::integer WHERE {}", free("$1::integer"));
        let found: Option<i32> = sqlx::query_scalar(&sql)
            .bind(next)
            .fetch_optional(&mut *tx)
            .await?;
        if found.is_some_and(|uid| uid <= last) {
            return Ok(found);
        }
    }
    sqlx::query_scalar(&format!(
        "SELECT s FROM generate_series($1::integer, $2::integer) s WHERE {} ORDER BY s LIMIT 1",
        free("s")
    ))
    .bind(first)
    .bind(last)
    .fetch_optional(&mut *tx)
    .await
}

/// The SQL condition that the uid `uid` (an SQL expression) was never given and no user holds it.
fn free(uid: &str) -> String {
    format!(
        "NOT EXISTS (SELECT 1 FROM job_uids_issued i WHERE i.uid = {uid}) \
         AND NOT EXISTS (SELECT 1 FROM users u WHERE u.job_uid = {uid})"
    )
}

/// Records that `uid` was given to `user` (once: a uid is recorded with its first holder).
async fn record_issued(tx: &mut sqlx::PgConnection, user: Uuid, uid: i32) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO job_uids_issued (uid, user_id) VALUES ($1, $2) ON CONFLICT (uid) DO NOTHING",
    )
    .bind(uid)
    .bind(user)
    .execute(&mut *tx)
    .await?;
    Ok(())
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
/// have a uid already, or it is kept for when one is allocated. A new uid without a gid takes the
/// gid along when the gid was the old uid's (the default pairing), so the old gid is left to no one;
/// a gid the admin set apart from the uid stays. A uid another user holds, or held before, is
/// refused.
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
        let before: Option<String> = sqlx::query_scalar(
            "SELECT u.username FROM job_uids_issued i JOIN users u ON u.id = i.user_id
             WHERE i.uid = $1 AND i.user_id <> $2",
        )
        .bind(uid as i32)
        .bind(user)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(owner) = before {
            return Err(SetError::GivenBefore { uid, owner });
        }
    }
    sqlx::query(
        "UPDATE users SET job_uid = coalesce($2, job_uid),
           job_gid = CASE WHEN $3::integer IS NOT NULL THEN $3
                          WHEN $2::integer IS NOT NULL AND job_gid = job_uid THEN $2
                          ELSE job_gid END
         WHERE id = $1",
    )
    .bind(user)
    .bind(uid.map(|u| u as i32))
    .bind(gid.map(|g| g as i32))
    .execute(&mut *tx)
    .await?;
    if let Some(uid) = uid {
        record_issued(tx, user, uid as i32).await?;
    }
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
            "2001000000-2099999999".parse::<JobUidRange>(),
            Ok(JobUidRange::default())
        );
        assert_eq!(JobUidRange::default().to_string(), "2001000000-2099999999");
        assert_eq!(
            "200000-299999".parse::<JobUidRange>(),
            Ok(JobUidRange::BEFORE)
        );
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
