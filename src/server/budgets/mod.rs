//! Budgets in GPU-hours per week or month, for a team (its members use it up together) or one
//! user: where a user stands, and, for each admission pass, whose jobs go last (past a soft
//! budget) or wait (past a hard one). See docs/admission.md#budgets.

use crate::model::{AppError, BudgetKind, BudgetPeriod, BudgetUse};
use crate::server::db::budgets::{self, Defined};
use crate::server::db::gpu_hours;
use crate::server::error::OrInternal;
use chrono::{DateTime, Utc};
use std::collections::{HashMap, HashSet};
use uuid::Uuid;

/// The owners past a budget, as one admission pass reads them.
#[derive(Debug, Clone, Default)]
pub struct Over {
    /// Owners past a soft budget: their jobs go after the others of their priority.
    pub soft: HashSet<Uuid>,
    /// Owners past a hard budget, with the budget (the first used up, team's before own): their
    /// new jobs wait until it resets or is raised.
    pub hard: HashMap<Uuid, BudgetUse>,
}

impl Over {
    /// The used-up hard budget that holds `owner`'s job of `gpu_count` cards, if one does (a job
    /// without GPUs uses no GPU-hours, and is never held).
    pub fn holds(&self, owner: Uuid, gpu_count: i32) -> Option<&BudgetUse> {
        if gpu_count == 0 {
            return None;
        }
        self.hard.get(&owner)
    }
}

/// Every budget that applies to `user` at `now` (their team's, then their own), with what the
/// current period has used.
pub async fn standing(
    conn: &mut sqlx::PgConnection,
    user: Uuid,
    now: DateTime<Utc>,
) -> sqlx::Result<Vec<BudgetUse>> {
    let defined = budgets::defined(&mut *conn, Some(user)).await?;
    used(conn, &defined, now).await
}

/// Whose budgets are used up at `now`: one read of the budgets, and one of the GPU-hours per
/// period kind in use (none at all when no budget is set).
pub async fn over(conn: &mut sqlx::PgConnection, now: DateTime<Utc>) -> sqlx::Result<Over> {
    let defined = budgets::defined(&mut *conn, None).await?;
    let mut out = Over::default();
    for (d, u) in defined.iter().zip(used(conn, &defined, now).await?) {
        if !u.exhausted {
            continue;
        }
        for &m in &d.members {
            match u.budget.kind {
                BudgetKind::Soft => {
                    out.soft.insert(m);
                }
                BudgetKind::Hard => {
                    out.hard.entry(m).or_insert_with(|| u.clone());
                }
            }
        }
    }
    Ok(out)
}

/// The figures of `defined` at `now`, in its order: each summed over its members from its
/// period's start.
async fn used(
    conn: &mut sqlx::PgConnection,
    defined: &[Defined],
    now: DateTime<Utc>,
) -> sqlx::Result<Vec<BudgetUse>> {
    let mut per_period: HashMap<BudgetPeriod, HashMap<Uuid, f64>> = HashMap::new();
    for d in defined {
        let p = d.budget.period;
        if let std::collections::hash_map::Entry::Vacant(slot) = per_period.entry(p) {
            slot.insert(gpu_hours::since(&mut *conn, p.start_of(now), now).await?);
        }
    }
    Ok(defined
        .iter()
        .map(|d| {
            let hours = per_period.get(&d.budget.period);
            let used: f64 = d
                .members
                .iter()
                .filter_map(|m| hours.and_then(|h| h.get(m)))
                .sum();
            BudgetUse::new(d.scope, d.name.clone(), d.budget, used, now)
        })
        .collect())
}

/// The caller's own standing (`GET /api/v1/me/budget`, the submit page, `gpuq budget`): every
/// budget that applies to `user` now. There is no way to ask for another user's.
pub async fn mine(pool: &sqlx::PgPool, user: Uuid) -> Result<Vec<BudgetUse>, AppError> {
    let mut conn = pool.acquire().await.or_internal("reading budgets")?;
    standing(&mut conn, user, Utc::now())
        .await
        .or_internal("reading budgets")
}
