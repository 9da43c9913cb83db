//! Fair share: who is owed what part of the cards, and where each owner stands against it.
//!
//! A team is owed its weight over the weights of the teams that are *active* (with a member who
//! has a job queued or holding cards); a user is owed their team's share × their weight over the
//! weights of their active teammates. A user's standing is their decayed GPU-hours
//! (`db::gpu_hours::decayed`) over their owed share: the queue orders the jobs of one priority by
//! it, lowest first ([`crate::model::queue_key`]). Counting only active teams and users keeps an
//! idle team's weight from shrinking everyone else's share, and a crowded team's idle members
//! from shrinking the share of the one who works.
//!
//! The pass computes the standings once per pass from two queries (usage and weights) and the
//! owners it already read, then each job looks its owner up: nothing per job touches the
//! database.

mod report;

pub use report::{report, report_for, Only};

use crate::model::{Budget, BudgetKind, BudgetPeriod, LaunchPolicy, Standing};
use crate::server::db::gpu_hours;
use crate::server::db::jobs::QueueStandings;
use chrono::{DateTime, Utc};
use std::collections::{HashMap, HashSet};
use uuid::Uuid;

/// A user as fair share sees them: their team and both weights.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// The user.
    pub id: Uuid,
    /// Their login name.
    pub username: String,
    /// Their team.
    pub team: String,
    /// Their weight within the team.
    pub weight: f64,
    /// Their team's weight against the other teams.
    pub team_weight: f64,
    /// Their own budget.
    pub budget: Option<Budget>,
    /// Their team's budget.
    pub team_budget: Option<Budget>,
}

#[derive(sqlx::FromRow)]
struct MemberRow {
    id: Uuid,
    username: String,
    team: String,
    weight: f64,
    team_weight: f64,
    budget_gpu_hours: Option<f64>,
    budget_period: Option<String>,
    budget_kind: Option<String>,
    team_budget_gpu_hours: Option<f64>,
    team_budget_period: Option<String>,
    team_budget_kind: Option<String>,
}

/// A budget from its three columns (all or none, as the tables CHECK).
fn budget_of(h: Option<f64>, period: Option<&str>, kind: Option<&str>) -> Option<Budget> {
    Some(Budget {
        gpu_hours: h?,
        period: period?.parse::<BudgetPeriod>().ok()?,
        kind: kind?.parse::<BudgetKind>().ok()?,
    })
}

/// Every user with their team's weight and both budgets: one query.
pub async fn members(db: impl sqlx::PgExecutor<'_>) -> sqlx::Result<Vec<Member>> {
    let rows: Vec<MemberRow> = sqlx::query_as(
        "SELECT u.id, u.username, u.team, u.weight, t.weight AS team_weight, \
                u.budget_gpu_hours, u.budget_period, u.budget_kind, \
                t.budget_gpu_hours AS team_budget_gpu_hours, t.budget_period AS team_budget_period, \
                t.budget_kind AS team_budget_kind \
         FROM users u JOIN teams t ON t.name = u.team ORDER BY u.username",
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Member {
            budget: budget_of(
                r.budget_gpu_hours,
                r.budget_period.as_deref(),
                r.budget_kind.as_deref(),
            ),
            team_budget: budget_of(
                r.team_budget_gpu_hours,
                r.team_budget_period.as_deref(),
                r.team_budget_kind.as_deref(),
            ),
            id: r.id,
            username: r.username,
            team: r.team,
            weight: r.weight,
            team_weight: r.team_weight,
        })
        .collect())
}

/// The owners with a job queued or holding cards.
pub async fn active_owners(db: impl sqlx::PgExecutor<'_>) -> sqlx::Result<HashSet<Uuid>> {
    let ids: Vec<Uuid> = sqlx::query_scalar(
        "SELECT DISTINCT owner_id FROM jobs \
         WHERE status IN ('queued', 'admitted', 'starting', 'running')",
    )
    .fetch_all(db)
    .await?;
    Ok(ids.into_iter().collect())
}

/// The sums owed shares divide by, over the active users.
#[derive(Debug, Clone, Default)]
pub struct Shares {
    /// Σ the weights of the active teams.
    teams: f64,
    /// Per active team, Σ the weights of its active members.
    members: HashMap<String, f64>,
}

impl Shares {
    /// The sums over `members` who are in `active`.
    pub fn new(members: &[Member], active: &HashSet<Uuid>) -> Shares {
        let mut shares = Shares::default();
        for m in members.iter().filter(|m| active.contains(&m.id)) {
            let sum = shares.members.entry(m.team.clone()).or_insert(0.0);
            // Weights are positive: a sum of 0 is the team's first active member.
            if *sum == 0.0 {
                shares.teams += m.team_weight;
            }
            *sum += m.weight;
        }
        shares
    }

    /// The part of the cards owed to the team `team` of weight `weight`, counting it active.
    pub fn of_team(&self, team: &str, weight: f64) -> f64 {
        let teams = if self.members.contains_key(team) {
            self.teams
        } else {
            self.teams + weight
        };
        ratio(weight, teams)
    }

    /// The part of the cards owed to `m`, counting them active (as they are whenever they have
    /// a job queued).
    pub fn of_user(&self, m: &Member, active: bool) -> f64 {
        let mates = self.members.get(&m.team).copied().unwrap_or(0.0);
        let mates = if active { mates } else { mates + m.weight };
        self.of_team(&m.team, m.team_weight) * ratio(m.weight, mates)
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        (a / b).clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// Each active owner's standing: decayed GPU-hours over owed share. Owners missing from
/// `members` (none should be) stand with no usage.
pub fn standings(
    members: &[Member],
    usage: &HashMap<Uuid, f64>,
    active: &HashSet<Uuid>,
) -> Standings {
    let shares = Shares::new(members, active);
    let by_owner = members
        .iter()
        .filter(|m| active.contains(&m.id))
        .map(|m| {
            let used = usage.get(&m.id).copied().unwrap_or(0.0);
            (m.id, Standing::of(used, shares.of_user(m, true)))
        })
        .collect();
    Standings { by_owner }
}

/// Owners' standings as one pass computed them; [`Standing::EVEN`] for anyone absent (and for
/// everyone with fair share off).
#[derive(Debug, Clone, Default)]
pub struct Standings {
    by_owner: HashMap<Uuid, Standing>,
}

impl Standings {
    /// Everyone even: submit order decides (fair share off).
    pub fn even() -> Standings {
        Standings::default()
    }

    /// `owner`'s standing.
    pub fn of(&self, owner: Uuid) -> Standing {
        self.by_owner.get(&owner).copied().unwrap_or(Standing::EVEN)
    }

    /// The standings, with the owners past a soft budget in `soft`, as SQL's
    /// [`crate::model::QUEUE_ORDER_SQL`] reads them (`db::jobs::list`).
    pub fn columns(&self, soft: &HashSet<Uuid>) -> QueueStandings {
        let mut owners: Vec<Uuid> = self.by_owner.keys().chain(soft).copied().collect();
        owners.sort_unstable();
        owners.dedup();
        let values = owners.iter().map(|o| self.of(*o).value()).collect();
        let soft = owners.iter().map(|o| soft.contains(o)).collect();
        QueueStandings {
            owners,
            values,
            soft,
        }
    }
}

/// The standings the queue orders by at `now` under `policy`, for the owners in `active` (the
/// caller read them already: the pass has its queue and running counts): two queries, none when
/// fair share is off.
pub async fn read_standings(
    db: &mut sqlx::PgConnection,
    policy: &LaunchPolicy,
    active: &HashSet<Uuid>,
    now: DateTime<Utc>,
) -> sqlx::Result<Standings> {
    if !policy.fair_share || active.len() < 2 {
        // One owner (or none) stands alone: nothing to order against.
        return Ok(Standings::even());
    }
    let usage = gpu_hours::decayed(&mut *db, now, policy.fair_share_half_life_h).await?;
    let members = members(&mut *db).await?;
    Ok(standings(&members, &usage, active))
}

/// The queue's order columns as a pass would order it at `now` (the read side's queue order):
/// each owner's standing and whether a soft budget puts them last, read on one connection.
pub async fn queue_columns(
    pool: &sqlx::PgPool,
    now: DateTime<Utc>,
) -> sqlx::Result<QueueStandings> {
    let mut conn = pool.acquire().await?;
    let policy = crate::server::db::settings::launch_policy(&mut *conn).await?;
    let active = active_owners(&mut *conn).await?;
    let standings = read_standings(&mut conn, &policy, &active, now).await?;
    let soft = crate::server::budgets::over(&mut conn, now).await?.soft;
    Ok(standings.columns(&soft))
}

#[cfg(test)]
mod tests;
