//! Where everyone stands: the figures of `GET /api/v1/fair-share`, the usage page and `gpuq
//! fair-share`.

use super::{active_owners, members, Member, Shares};
use crate::model::{AppError, Budget, FairShareReport, FairShareRow, Role};
use crate::server::auth::CurrentUser;
use crate::server::db::{gpu_hours, settings};
use crate::server::error::OrInternal;
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, HashMap};
use uuid::Uuid;

/// Whose rows a report holds.
#[derive(Debug, Clone, Copy)]
pub enum Only {
    /// Everyone's (managers and admins).
    Everyone,
    /// This user's row and their team's (a member).
    User(Uuid),
}

/// GPU-hours used since each budget's period began, per user (one read per period in use).
async fn used_in_periods(
    pool: &sqlx::PgPool,
    mut periods: Vec<crate::model::BudgetPeriod>,
    now: DateTime<Utc>,
) -> sqlx::Result<HashMap<(Uuid, crate::model::BudgetPeriod), f64>> {
    periods.sort_by_key(|p| p.as_str());
    periods.dedup();
    let mut out = HashMap::new();
    for p in periods {
        for (user, h) in gpu_hours::since(pool, p.start_of(now), now).await? {
            out.insert((user, p), h);
        }
    }
    Ok(out)
}

/// The report `viewer` may read at `now`: managers and admins everyone's rows, a member their own
/// and their team's.
pub async fn report_for(
    pool: &sqlx::PgPool,
    viewer: &CurrentUser,
    now: DateTime<Utc>,
) -> Result<FairShareReport, AppError> {
    let only = if viewer.role.at_least(Role::Manager) {
        Only::Everyone
    } else {
        Only::User(viewer.id)
    };
    report(pool, only, now)
        .await
        .or_internal("reading the fair-share report")
}

/// The report at `now`, holding the rows `only` allows.
pub async fn report(
    pool: &sqlx::PgPool,
    only: Only,
    now: DateTime<Utc>,
) -> sqlx::Result<FairShareReport> {
    let policy = settings::launch_policy(pool).await?;
    let usage = gpu_hours::decayed(pool, now, policy.fair_share_half_life_h).await?;
    let members = members(pool).await?;
    let active = active_owners(pool).await?;
    let shares = Shares::new(&members, &active);
    let mut periods = Vec::new();
    for m in &members {
        periods.extend(m.budget.map(|b| b.period));
        periods.extend(m.team_budget.map(|b| b.period));
    }
    let used = used_in_periods(pool, periods, now).await?;
    let used_by = |ms: &[&Member], b: Budget| -> f64 {
        ms.iter()
            .map(|m| used.get(&(m.id, b.period)).copied().unwrap_or(0.0))
            .sum()
    };
    let total: f64 = usage.values().sum();
    let part = |h: f64| if total > 0.0 { h / total } else { 0.0 };
    let mut teams: BTreeMap<&str, Vec<&Member>> = BTreeMap::new();
    for m in &members {
        teams.entry(m.team.as_str()).or_default().push(m);
    }
    let users = members.iter().map(|m| {
        let decayed = usage.get(&m.id).copied().unwrap_or(0.0);
        FairShareRow {
            name: m.username.clone(),
            team: m.team.clone(),
            weight: m.weight,
            decayed_gpu_hours: decayed,
            share_of_recent: part(decayed),
            owed_share: shares.of_user(m, active.contains(&m.id)),
            budget: m.budget,
            budget_left_gpu_hours: m.budget.map(|b| b.gpu_hours - used_by(&[m], b)),
        }
    });
    let team_rows = teams.iter().map(|(name, ms)| {
        let decayed: f64 = ms
            .iter()
            .map(|m| usage.get(&m.id).copied().unwrap_or(0.0))
            .sum();
        let first = ms.first();
        let weight = first.map_or(1.0, |m| m.team_weight);
        let budget = first.and_then(|m| m.team_budget);
        FairShareRow {
            name: (*name).to_owned(),
            team: (*name).to_owned(),
            weight,
            decayed_gpu_hours: decayed,
            share_of_recent: part(decayed),
            owed_share: shares.of_team(name, weight),
            budget,
            budget_left_gpu_hours: budget.map(|b| b.gpu_hours - used_by(ms, b)),
        }
    });
    let (users, teams): (Vec<FairShareRow>, Vec<FairShareRow>) = match only {
        Only::Everyone => (users.collect(), team_rows.collect()),
        Only::User(id) => {
            let me = members.iter().find(|m| m.id == id);
            let team = me.map(|m| m.team.as_str());
            let name = me.map(|m| m.username.as_str());
            (
                users.filter(|r| Some(r.name.as_str()) == name).collect(),
                team_rows
                    .filter(|r| Some(r.name.as_str()) == team)
                    .collect(),
            )
        }
    };
    Ok(FairShareReport {
        fair_share: policy.fair_share,
        half_life_h: policy.fair_share_half_life_h,
        total_decayed_gpu_hours: total,
        users,
        teams,
    })
}
