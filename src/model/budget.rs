//! Teams, share weights and GPU-hour budgets: the wire types fair share, budgets and the usage
//! page share (see docs/admission.md#fair-share).

use super::vocab::vocabulary;
use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc};
use serde::{Deserialize, Serialize};

/// The team every user belongs to until an admin moves them.
pub const DEFAULT_TEAM: &str = "default";
/// The largest share weight (teams and users): beyond it the figure is surely a typo.
pub const MAX_WEIGHT: f64 = 1_000_000.0;
/// The largest budget, GPU-hours per period.
pub const MAX_BUDGET_GPU_HOURS: f64 = 100_000_000.0;

vocabulary! {
    /// How long one budget lasts before it starts again (weeks from Monday 00:00 UTC, months
    /// from the 1st 00:00 UTC).
    pub enum BudgetPeriod {
        /// Monday 00:00 UTC to the next.
        Week = "week",
        /// The 1st of a month 00:00 UTC to the next.
        Month = "month",
    }
}

vocabulary! {
    /// What a used-up budget does.
    pub enum BudgetKind {
        /// Past it, the owner's jobs go after every other job of their priority.
        Soft = "soft",
        /// Past it, the owner's jobs wait (`budget_exhausted`) until the period resets or an
        /// admin raises it.
        Hard = "hard",
    }
}

impl BudgetPeriod {
    /// When the period holding `now` began: the Monday, or the 1st of the month, 00:00 UTC.
    pub fn start_of(self, now: DateTime<Utc>) -> DateTime<Utc> {
        let day = now.date_naive();
        let first = match self {
            BudgetPeriod::Week => {
                day - Duration::days(i64::from(day.weekday().num_days_from_monday()))
            }
            BudgetPeriod::Month => day.with_day(1).unwrap_or(day),
        };
        midnight(first)
    }

    /// When the period holding `now` ends and the budget starts again.
    pub fn reset_after(self, now: DateTime<Utc>) -> DateTime<Utc> {
        let start = self.start_of(now).date_naive();
        let next = match self {
            BudgetPeriod::Week => start + Duration::days(7),
            BudgetPeriod::Month => {
                let (y, m) = if start.month() == 12 {
                    (start.year() + 1, 1)
                } else {
                    (start.year(), start.month() + 1)
                };
                NaiveDate::from_ymd_opt(y, m, 1).unwrap_or(start + Duration::days(31))
            }
        };
        midnight(next)
    }
}

fn midnight(day: NaiveDate) -> DateTime<Utc> {
    Utc.from_utc_datetime(&day.and_hms_opt(0, 0, 0).unwrap_or_default())
}

/// A budget in GPU-hours per period, for a team or a user.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// GPU-hours allowed per period: a card held whole for an hour is one; a job holding half a
    /// card's VRAM for an hour is half.
    pub gpu_hours: f64,
    /// When it starts again.
    pub period: BudgetPeriod,
    /// What happens past it.
    pub kind: BudgetKind,
}

impl Budget {
    /// Checks the figure, naming the field at fault (`field` is where the budget sits).
    pub fn check(&self, field: &str) -> Result<(), (String, String)> {
        if !self.gpu_hours.is_finite() || !(0.0..=MAX_BUDGET_GPU_HOURS).contains(&self.gpu_hours) {
            return Err((
                format!("{field}.gpu_hours"),
                format!("must be between 0 and {MAX_BUDGET_GPU_HOURS} GPU-hours"),
            ));
        }
        Ok(())
    }
}

/// Checks a share weight (a team's or a user's), naming the field at fault.
pub fn check_weight(field: &str, weight: f64) -> Result<(), (String, String)> {
    if !weight.is_finite() || weight <= 0.0 || weight > MAX_WEIGHT {
        return Err((
            field.into(),
            format!("must be more than 0 and at most {MAX_WEIGHT}"),
        ));
    }
    Ok(())
}

/// A weight as typed (a form's field, a CLI flag): a number [`check_weight`] accepts.
pub fn parse_weight(text: &str) -> Result<f64, String> {
    let w: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number"))?;
    check_weight("weight", w).map_err(|(_, m)| m)?;
    Ok(w)
}

/// Checks a team's name: the same alphabet as user names.
pub fn check_team_name(name: &str) -> Result<(), (String, String)> {
    if super::user::is_plain_name(name) {
        Ok(())
    } else {
        Err((
            "name".into(),
            format!(
                "`{name}` is not a team name: 1 to 64 of a-z, 0-9, `_`, `.`, `-`, \
                 starting with a letter or digit"
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_start_on_monday_or_the_first_and_reset_at_the_next() {
        let t = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        // 2026-12-06 is a Sunday.
        let now = t("2026-12-06T15:30:00Z");
        assert_eq!(BudgetPeriod::Week.start_of(now), t("2026-11-30T00:00:00Z"));
        assert_eq!(
            BudgetPeriod::Week.reset_after(now),
            t("2026-12-07T00:00:00Z")
        );
        assert_eq!(BudgetPeriod::Month.start_of(now), t("2026-12-01T00:00:00Z"));
        assert_eq!(
            BudgetPeriod::Month.reset_after(now),
            t("2027-01-01T00:00:00Z")
        );
        let monday = t("2026-12-07T00:00:00Z");
        assert_eq!(BudgetPeriod::Week.start_of(monday), monday);
        let feb = t("2027-02-28T23:59:59Z");
        assert_eq!(
            BudgetPeriod::Month.reset_after(feb),
            t("2027-03-01T00:00:00Z")
        );
    }

    #[test]
    fn weights_names_and_budgets_are_checked_naming_the_field() {
        assert!(check_weight("weight", 1.0).is_ok());
        for w in [0.0, -1.0, f64::NAN, f64::INFINITY, MAX_WEIGHT * 2.0] {
            assert_eq!(check_weight("weight", w).unwrap_err().0, "weight", "{w}");
        }
        for ok in ["default", "ml-infra", "team_2", "a"] {
            assert!(check_team_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Team", "-x", "a b", &"x".repeat(65)] {
            assert!(check_team_name(bad).is_err(), "{bad}");
        }
        let b = Budget {
            gpu_hours: 50.0,
            period: BudgetPeriod::Week,
            kind: BudgetKind::Hard,
        };
        assert!(b.check("budget").is_ok());
        let bad = Budget {
            gpu_hours: -1.0,
            ..b
        };
        assert_eq!(bad.check("budget").unwrap_err().0, "budget.gpu_hours");
        let parsed: Budget =
            serde_json::from_str(r#"{"gpu_hours":10,"period":"month","kind":"soft"}"#).unwrap();
        assert_eq!(parsed.period, BudgetPeriod::Month);
        let e = serde_json::from_str::<Budget>(r#"{"gpu_hours":10,"period":"day","kind":"soft"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("day") && e.contains("week"), "{e}");
    }
}
