//! Teams as the admin page, the CLI and `GET/POST/PATCH /api/v1/teams` exchange them, and a
//! user's place in one (team, share weight, budget).

use super::budget::{check_team_name, check_weight, Budget, BudgetKind, BudgetPeriod};
use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;
use std::str::FromStr;

/// A team with its share weight, its budget and its members.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct TeamView {
    /// The team's name.
    pub name: String,
    /// Its share weight against the other teams (1 unless an admin set it).
    pub weight: f64,
    /// Its GPU-hour budget, if it has one.
    pub budget: Option<Budget>,
    /// How many users belong to it.
    pub member_count: usize,
    /// Their names, sorted.
    pub members: Vec<String>,
}

/// `POST /api/v1/teams`: a new team.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewTeam {
    /// 1 to 64 of a-z, 0-9, `_`, `.`, `-`, starting with a letter or digit.
    pub name: String,
    /// Share weight, more than 0 and at most 1,000,000 (default 1).
    #[serde(default = "one")]
    pub weight: f64,
    /// A GPU-hour budget (none when left out).
    #[serde(default)]
    pub budget: Option<Budget>,
}

/// `PATCH /api/v1/teams/{name}`: what to change; a field left out stays as it is.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TeamPatch {
    /// A new share weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    /// A new budget; `null` removes it.
    #[serde(
        default,
        deserialize_with = "present_field",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "ssr", schema(value_type = Option<Budget>, nullable))]
    pub budget: Option<Option<Budget>>,
}

/// Where a user stands among the teams, as an admin changes it (`PATCH /api/v1/users/{id}`'s
/// `team`, `weight`, `budget`); a field left out stays as it is.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserShare {
    /// The team to move the user to (it must exist).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// The user's share weight within their team.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    /// The user's own budget; `null` removes it.
    #[serde(
        default,
        deserialize_with = "present_field",
        skip_serializing_if = "Option::is_none"
    )]
    pub budget: Option<Option<Budget>>,
}

impl UserShare {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.team.is_none() && self.weight.is_none() && self.budget.is_none()
    }

    /// Checks the weight and the budget (whether the team exists is the server's to say).
    pub fn check(&self) -> Result<(), (String, String)> {
        if let Some(team) = &self.team {
            check_team_name(team).map_err(|(_, m)| ("team".to_owned(), m))?;
        }
        check_patch(self.weight, self.budget.as_ref())
    }
}

impl NewTeam {
    /// Checks the name, the weight and the budget, naming the field at fault.
    pub fn check(&self) -> Result<(), (String, String)> {
        check_team_name(&self.name)?;
        check_patch(Some(self.weight), Some(&self.budget))
    }
}

impl TeamPatch {
    /// Checks the weight and the budget, naming the field at fault.
    pub fn check(&self) -> Result<(), (String, String)> {
        check_patch(self.weight, self.budget.as_ref())
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.weight.is_none() && self.budget.is_none()
    }
}

fn check_patch(
    weight: Option<f64>,
    budget: Option<&Option<Budget>>,
) -> Result<(), (String, String)> {
    if let Some(w) = weight {
        check_weight("weight", w)?;
    }
    if let Some(Some(b)) = budget {
        b.check("budget")?;
    }
    Ok(())
}

fn one() -> f64 {
    1.0
}

/// Reads a field that is present (as `Some`, `null` included), so that a missing field (`None`,
/// through `#[serde(default)]`) and a `null` one (`Some(None)`) differ: `#[serde(default,
/// deserialize_with = "present_field")]` on an `Option<Option<T>>`.
pub fn present_field<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// A budget written the short way, `GPU_HOURS/PERIOD/KIND` (`50/week/hard`), as the CLI and the
/// admin page take it.
impl FromStr for Budget {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.trim().split('/').map(str::trim).collect();
        let [hours, period, kind] = parts[..] else {
            return Err(format!(
                "`{s}` is not a budget: write GPU_HOURS/PERIOD/KIND, e.g. 50/week/hard"
            ));
        };
        let gpu_hours: f64 = hours
            .parse()
            .map_err(|_| format!("`{hours}` is not a number of GPU-hours"))?;
        let budget = Budget {
            gpu_hours,
            period: period.parse::<BudgetPeriod>()?,
            kind: kind.parse::<BudgetKind>()?,
        };
        budget.check("budget").map_err(|(_, m)| m)?;
        Ok(budget)
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.gpu_hours, self.period, self.kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_tells_a_missing_budget_from_a_null_one() {
        let keep: TeamPatch = serde_json::from_str(r#"{"weight":2}"#).unwrap();
        assert_eq!(keep.budget, None);
        let remove: TeamPatch = serde_json::from_str(r#"{"budget":null}"#).unwrap();
        assert_eq!(remove.budget, Some(None));
        let set: TeamPatch =
            serde_json::from_str(r#"{"budget":{"gpu_hours":5,"period":"week","kind":"soft"}}"#)
                .unwrap();
        assert_eq!(set.budget.unwrap().unwrap().gpu_hours, 5.0);
        assert!(serde_json::from_str::<TeamPatch>(r#"{"colour":"red"}"#).is_err());
        let back: TeamPatch =
            serde_json::from_str(&serde_json::to_string(&remove).unwrap()).unwrap();
        assert_eq!(back, remove);
    }

    #[test]
    fn checks_name_the_field_at_fault() {
        let team = |name: &str, weight: f64| NewTeam {
            name: name.into(),
            weight,
            budget: None,
        };
        assert!(team("ml", 2.0).check().is_ok());
        assert_eq!(
            team("x'; DROP TABLE teams;--", 1.0).check().unwrap_err().0,
            "name"
        );
        assert_eq!(team("<b>", 1.0).check().unwrap_err().0, "name");
        for w in [0.0, -1.0, f64::NAN, 1e300] {
            assert_eq!(team("ml", w).check().unwrap_err().0, "weight", "{w}");
        }
        let share = UserShare {
            team: Some("Bad Team".into()),
            ..UserShare::default()
        };
        assert_eq!(share.check().unwrap_err().0, "team");
        let patch = TeamPatch {
            budget: Some(Some(Budget {
                gpu_hours: -3.0,
                period: BudgetPeriod::Week,
                kind: BudgetKind::Soft,
            })),
            ..TeamPatch::default()
        };
        assert_eq!(patch.check().unwrap_err().0, "budget.gpu_hours");
    }

    #[test]
    fn budgets_read_and_write_the_short_form() {
        let b: Budget = "50/week/hard".parse().unwrap();
        assert_eq!(b.gpu_hours, 50.0);
        assert_eq!(b.period, BudgetPeriod::Week);
        assert_eq!(b.kind, BudgetKind::Hard);
        assert_eq!(b.to_string(), "50/week/hard");
        assert_eq!(
            "2.5/month/soft".parse::<Budget>().unwrap().to_string(),
            "2.5/month/soft"
        );
        for bad in [
            "50",
            "50/day/hard",
            "x/week/soft",
            "50/week/firm",
            "-1/week/soft",
            "1/2/3/4",
        ] {
            assert!(bad.parse::<Budget>().is_err(), "{bad}");
        }
    }
}
