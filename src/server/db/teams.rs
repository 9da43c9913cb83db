//! Repository for teams (`migrations/20261207000001_teams.sql`) and users' places in them: team,
//! share weight, budget.

use super::users::budget_of;
use crate::model::{Budget, BudgetKind, BudgetPeriod, NewTeam, TeamPatch, TeamView, UserShare};
use sqlx::{FromRow, PgExecutor};
use uuid::Uuid;

/// A `teams` row with the names of its members.
#[derive(Debug, Clone, FromRow)]
pub struct TeamRow {
    /// Key.
    pub name: String,
    /// Share weight against the other teams.
    pub weight: f64,
    /// The budget's GPU-hours per period (all three budget columns or none).
    pub budget_gpu_hours: Option<f64>,
    /// The budget's period.
    pub budget_period: Option<BudgetPeriod>,
    /// The budget's kind.
    pub budget_kind: Option<BudgetKind>,
    /// Its members' names, sorted.
    pub members: Vec<String>,
}

impl TeamRow {
    /// The wire view of the team.
    pub fn view(self) -> TeamView {
        TeamView {
            budget: budget_of(self.budget_gpu_hours, self.budget_period, self.budget_kind),
            member_count: self.members.len(),
            members: self.members,
            name: self.name,
            weight: self.weight,
        }
    }
}

const TEAMS: &str = "\
    SELECT t.name, t.weight, t.budget_gpu_hours, t.budget_period, t.budget_kind, \
           coalesce(array_agg(u.username ORDER BY u.username) FILTER (WHERE u.id IS NOT NULL), \
                    '{}') AS members \
    FROM teams t LEFT JOIN users u ON u.team = t.name";

/// Every team with its members, by name.
pub async fn list(db: impl PgExecutor<'_>) -> sqlx::Result<Vec<TeamRow>> {
    sqlx::query_as(&format!("{TEAMS} GROUP BY t.name ORDER BY t.name"))
        .fetch_all(db)
        .await
}

/// One team with its members.
pub async fn by_name(db: impl PgExecutor<'_>, name: &str) -> sqlx::Result<Option<TeamRow>> {
    sqlx::query_as(&format!("{TEAMS} WHERE t.name = $1 GROUP BY t.name"))
        .bind(name)
        .fetch_optional(db)
        .await
}

/// Whether a team of that name exists; locks its row against a rename until the transaction
/// ends (a user moved into it must find it there).
pub async fn exists(db: impl PgExecutor<'_>, name: &str) -> sqlx::Result<bool> {
    let found: Option<i32> =
        sqlx::query_scalar("SELECT 1 FROM teams WHERE name = $1 FOR KEY SHARE")
            .bind(name)
            .fetch_optional(db)
            .await?;
    Ok(found.is_some())
}

/// The three budget columns of an optional budget.
fn columns(b: Option<&Budget>) -> (Option<f64>, Option<BudgetPeriod>, Option<BudgetKind>) {
    (
        b.map(|b| b.gpu_hours),
        b.map(|b| b.period),
        b.map(|b| b.kind),
    )
}

/// Creates a team. Returns false, changing nothing, when the name is taken.
pub async fn insert(db: impl PgExecutor<'_>, team: &NewTeam) -> sqlx::Result<bool> {
    let (hours, period, kind) = columns(team.budget.as_ref());
    let res = sqlx::query(
        "INSERT INTO teams (name, weight, budget_gpu_hours, budget_period, budget_kind) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO NOTHING",
    )
    .bind(&team.name)
    .bind(team.weight)
    .bind(hours)
    .bind(period)
    .bind(kind)
    .execute(db)
    .await?;
    Ok(res.rows_affected() == 1)
}

/// Changes a team's weight and/or budget (fields left out stay). Returns whether it exists.
pub async fn update(db: impl PgExecutor<'_>, name: &str, patch: &TeamPatch) -> sqlx::Result<bool> {
    let (hours, period, kind) = columns(patch.budget.as_ref().and_then(Option::as_ref));
    let res = sqlx::query(
        "UPDATE teams SET weight = coalesce($2, weight), \
           budget_gpu_hours = CASE WHEN $3 THEN $4 ELSE budget_gpu_hours END, \
           budget_period = CASE WHEN $3 THEN $5 ELSE budget_period END, \
           budget_kind = CASE WHEN $3 THEN $6 ELSE budget_kind END \
         WHERE name = $1",
    )
    .bind(name)
    .bind(patch.weight)
    .bind(patch.budget.is_some())
    .bind(hours)
    .bind(period)
    .bind(kind)
    .execute(db)
    .await?;
    Ok(res.rows_affected() == 1)
}

/// Moves a user to a team and/or changes their weight and budget (fields left out stay). The
/// team must exist (a foreign key refuses it otherwise). Returns whether the user exists.
pub async fn place_user(
    db: impl PgExecutor<'_>,
    id: Uuid,
    share: &UserShare,
) -> sqlx::Result<bool> {
    let (hours, period, kind) = columns(share.budget.as_ref().and_then(Option::as_ref));
    let res = sqlx::query(
        "UPDATE users SET team = coalesce($2, team), weight = coalesce($3, weight), \
           budget_gpu_hours = CASE WHEN $4 THEN $5 ELSE budget_gpu_hours END, \
           budget_period = CASE WHEN $4 THEN $6 ELSE budget_period END, \
           budget_kind = CASE WHEN $4 THEN $7 ELSE budget_kind END \
         WHERE id = $1",
    )
    .bind(id)
    .bind(share.team.as_deref())
    .bind(share.weight)
    .bind(share.budget.is_some())
    .bind(hours)
    .bind(period)
    .bind(kind)
    .execute(db)
    .await?;
    Ok(res.rows_affected() == 1)
}
