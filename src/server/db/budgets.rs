//! The budgets set on teams and users (columns of `teams` and `users`, see
//! `migrations/20261207000001_teams.sql`): reading them with the members they apply to, and
//! setting one (admins' edits and tests).

use crate::model::{Budget, BudgetKind, BudgetPeriod, BudgetScope};
use uuid::Uuid;

/// A budget as stored, with the users whose GPU-hours count against it.
#[derive(Debug, Clone)]
pub struct Defined {
    /// A team's or a user's.
    pub scope: BudgetScope,
    /// The team's name or the user's.
    pub name: String,
    /// The budget.
    pub budget: Budget,
    /// Whose GPU-hours count: the team's members, or the user alone.
    pub members: Vec<Uuid>,
}

#[derive(sqlx::FromRow)]
struct Row {
    scope: BudgetScope,
    name: String,
    gpu_hours: f64,
    period: BudgetPeriod,
    kind: BudgetKind,
    members: Vec<Uuid>,
}

/// Every budget set (`user`: only those that apply to that user: their own and their team's),
/// the team's first.
pub async fn defined<'e>(
    db: impl sqlx::PgExecutor<'e>,
    user: Option<Uuid>,
) -> sqlx::Result<Vec<Defined>> {
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT 'team' AS scope, t.name, t.budget_gpu_hours AS gpu_hours, \
                t.budget_period AS period, t.budget_kind AS kind, \
                coalesce((SELECT array_agg(m.id) FROM users m WHERE m.team = t.name), '{}') AS members \
         FROM teams t \
         WHERE t.budget_gpu_hours IS NOT NULL \
           AND ($1::uuid IS NULL OR t.name = (SELECT team FROM users WHERE id = $1)) \
         UNION ALL \
         SELECT 'user', u.username, u.budget_gpu_hours, u.budget_period, u.budget_kind, \
                ARRAY[u.id] \
         FROM users u \
         WHERE u.budget_gpu_hours IS NOT NULL AND ($1::uuid IS NULL OR u.id = $1) \
         ORDER BY 1, 2",
    )
    .bind(user)
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Defined {
            scope: r.scope,
            name: r.name,
            budget: Budget {
                gpu_hours: r.gpu_hours,
                period: r.period,
                kind: r.kind,
            },
            members: r.members,
        })
        .collect())
}
