//! Where a member stands against their budgets: the wire type of `GET /api/v1/me/budget`, the
//! submit page and `gpuq budget`, and the words the queue uses for a budget (see
//! docs/admission.md#budgets).

use super::budget::{Budget, BudgetKind, BudgetPeriod};
use super::vocab::vocabulary;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

vocabulary! {
    /// Whose budget it is.
    pub enum BudgetScope {
        /// A team's: its members use it up together.
        Team = "team",
        /// One user's own.
        User = "user",
    }
}

/// One budget that applies to a user, and how much of it the current period has used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct BudgetUse {
    /// A team's budget (shared by its members) or the user's own.
    pub scope: BudgetScope,
    /// The team's name, or the user's.
    pub name: String,
    /// The budget: GPU-hours per period, and what happens past it.
    pub budget: Budget,
    /// GPU-hours used since the period began (for a team, by all its members; running jobs
    /// counted up to now).
    pub used_gpu_hours: f64,
    /// What is left of it (never below 0).
    pub left_gpu_hours: f64,
    /// When the current period began (Monday, or the 1st of the month, 00:00 UTC).
    pub period_start: DateTime<Utc>,
    /// When it resets: the end of the current period.
    pub resets_at: DateTime<Utc>,
    /// Used up: at or past the budget.
    pub exhausted: bool,
}

impl BudgetUse {
    /// The figures for `budget` with `used` GPU-hours charged since `period_start`.
    pub fn new(
        scope: BudgetScope,
        name: String,
        budget: Budget,
        used: f64,
        now: DateTime<Utc>,
    ) -> BudgetUse {
        let used = used.max(0.0);
        BudgetUse {
            scope,
            name,
            budget,
            used_gpu_hours: used,
            left_gpu_hours: (budget.gpu_hours - used).max(0.0),
            period_start: budget.period.start_of(now),
            resets_at: budget.period.reset_after(now),
            exhausted: used >= budget.gpu_hours,
        }
    }

    /// Whose it is, as people read it: `team ml`, `user alice`.
    pub fn whose(&self) -> String {
        format!("{} {}", self.scope, self.name)
    }

    /// One line for its member: `your usage this week: 41.0 GPU-h of a 50 GPU-h budget (team ml,
    /// hard; resets Mon 7 Dec)`, and what being past it does when it is used up.
    pub fn line(&self) -> String {
        let mut text = format!(
            "your usage {}: {} GPU-h of a {} GPU-h budget ({}, {}; resets {})",
            this_period(self.budget.period),
            used_hours(self.used_gpu_hours),
            budget_hours(self.budget.gpu_hours),
            self.whose(),
            self.budget.kind,
            self.resets_at.format("%a %-d %b"),
        );
        if self.exhausted {
            text.push_str(match self.budget.kind {
                BudgetKind::Hard => "; used up: new jobs wait until it resets",
                BudgetKind::Soft => "; used up: your jobs go after the others of their priority",
            });
        }
        text
    }

    /// The budget as a used-up one is named: `team ml's hard budget of 50 GPU-h per week is
    /// used up (51.2 GPU-h); it resets Mon 7 Dec 00:00 UTC`.
    pub fn used_up(&self) -> String {
        used_up(
            self.scope,
            &self.name,
            self.budget,
            self.used_gpu_hours,
            self.resets_at,
        )
    }
}

/// The words for a used-up budget (see [`BudgetUse::used_up`]), from its parts.
pub fn used_up(
    scope: BudgetScope,
    name: &str,
    budget: Budget,
    used: f64,
    resets_at: DateTime<Utc>,
) -> String {
    format!(
        "{scope} {name}'s {} budget of {} GPU-h per {} is used up ({} GPU-h); it resets {}",
        budget.kind,
        budget_hours(budget.gpu_hours),
        budget.period,
        used_hours(used),
        resets_at.format("%a %-d %b %H:%M UTC"),
    )
}

/// `this week`, `this month`.
fn this_period(p: BudgetPeriod) -> &'static str {
    match p {
        BudgetPeriod::Week => "this week",
        BudgetPeriod::Month => "this month",
    }
}

/// GPU-hours used, to a tenth.
fn used_hours(h: f64) -> String {
    format!("{h:.1}")
}

/// A budget's figure: whole when it is whole (`50`), else to a tenth.
fn budget_hours(h: f64) -> String {
    if h.fract() == 0.0 && h.abs() < 1e15 {
        format!("{h:.0}")
    } else {
        format!("{h:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn a_budget_is_worded_with_its_owner_figures_and_reset() {
        let budget = Budget {
            gpu_hours: 50.0,
            period: BudgetPeriod::Week,
            kind: BudgetKind::Hard,
        };
        // 2026-12-06 is a Sunday: the week resets on Monday 7 December.
        let now = t("2026-12-06T15:30:00Z");
        let u = BudgetUse::new(BudgetScope::Team, "ml".into(), budget, 41.04, now);
        assert!(!u.exhausted);
        assert!((u.left_gpu_hours - 8.96).abs() < 1e-9);
        assert_eq!(u.period_start, t("2026-11-30T00:00:00Z"));
        assert_eq!(u.resets_at, t("2026-12-07T00:00:00Z"));
        assert_eq!(
            u.line(),
            "your usage this week: 41.0 GPU-h of a 50 GPU-h budget (team ml, hard; resets Mon 7 Dec)"
        );
        let over = BudgetUse::new(BudgetScope::Team, "ml".into(), budget, 51.23, now);
        assert!(over.exhausted);
        assert_eq!(over.left_gpu_hours, 0.0);
        assert_eq!(
            over.used_up(),
            "team ml's hard budget of 50 GPU-h per week is used up (51.2 GPU-h); it resets \
             Mon 7 Dec 00:00 UTC"
        );
        assert!(over
            .line()
            .ends_with("used up: new jobs wait until it resets"));
        let soft = Budget {
            gpu_hours: 2.5,
            period: BudgetPeriod::Month,
            kind: BudgetKind::Soft,
        };
        let s = BudgetUse::new(BudgetScope::User, "alice".into(), soft, 3.0, now);
        assert_eq!(s.resets_at, t("2027-01-01T00:00:00Z"));
        assert!(s.line().starts_with(
            "your usage this month: 3.0 GPU-h of a 2.5 GPU-h budget (user alice, soft; resets Fri 1 Jan)"
        ));
        assert!(s.line().ends_with("go after the others of their priority"));
        // A budget of 0 is used up from the start.
        let zero = Budget {
            gpu_hours: 0.0,
            ..budget
        };
        assert!(BudgetUse::new(BudgetScope::User, "bob".into(), zero, 0.0, now).exhausted);
    }
}
