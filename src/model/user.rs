//! Users and roles as the UI and the API see them.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What a user may do. Ordered: each role includes the rights of those before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Submits and follows their own jobs; sees the shared queue.
    Member,
    /// A member who may also read everyone's jobs, logs and the usage charts.
    Manager,
    /// Edits the manifest, launch policy, cards and users.
    Admin,
}

impl Role {
    /// Every role, lowest first.
    pub const ALL: [Role; 3] = [Role::Member, Role::Manager, Role::Admin];

    /// The name stored in the database and shown to people.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Member => "member",
            Role::Manager => "manager",
            Role::Admin => "admin",
        }
    }

    /// Whether this role carries at least the rights of `min`.
    pub fn at_least(self, min: Role) -> bool {
        self >= min
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "member" => Ok(Role::Member),
            "manager" => Ok(Role::Manager),
            "admin" => Ok(Role::Admin),
            other => Err(format!(
                "unknown role `{other}`: expected member, manager or admin"
            )),
        }
    }
}

/// A login name: 1–64 characters, lowercase letters, digits, `_`, `.`, `-`, starting with a letter or
/// digit. Kept narrow so names are safe in logs, paths and container labels.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Username(String);

/// Whether `name` is a plain name, as user names, team names and workload types are: 1 to 64
/// characters of lowercase letters, digits, `_`, `.` and `-`, starting with a letter or digit.
pub fn is_plain_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 64
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_.-".contains(c))
}

impl Username {
    /// Parses a login name, saying what is wrong with it when it is not one.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let name = raw.trim();
        let mut chars = name.chars();
        let Some(first) = chars.next() else {
            return Err("username must not be empty".into());
        };
        if name.len() > 64 {
            return Err("username must be at most 64 characters".into());
        }
        let ok_first = first.is_ascii_lowercase() || first.is_ascii_digit();
        let ok_rest =
            chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_.-".contains(c));
        if !ok_first || !ok_rest {
            return Err(
                "username may contain only lowercase letters, digits, `_`, `.` and `-`, \
                 and must start with a letter or digit"
                    .into(),
            );
        }
        Ok(Username(name.to_owned()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Username {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Username::parse(&value)
    }
}

impl From<Username> for String {
    fn from(value: Username) -> Self {
        value.0
    }
}

impl fmt::Display for Username {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The signed-in user as pages and `GET /api/v1/me` show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
pub struct UserView {
    /// Stable identifier.
    pub id: uuid::Uuid,
    /// Login name.
    pub username: String,
    /// What the user may do.
    pub role: Role,
    /// Disabled by an admin: can no longer sign in, and sessions and tokens are refused.
    #[serde(default)]
    pub disabled: bool,
    /// The team the user belongs to (`default` until an admin moves them).
    #[serde(default = "default_team")]
    pub team: String,
    /// The user's share weight within their team (1 unless an admin set it).
    #[serde(default = "one")]
    pub weight: f64,
    /// The user's own GPU-hour budget, if they have one.
    #[serde(default)]
    pub budget: Option<super::Budget>,
}

fn default_team() -> String {
    super::DEFAULT_TEAM.to_owned()
}

fn one() -> f64 {
    1.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered_by_rights() {
        assert!(Role::Admin.at_least(Role::Manager));
        assert!(Role::Manager.at_least(Role::Member));
        assert!(!Role::Member.at_least(Role::Manager));
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>(), Ok(role));
        }
        assert!("root".parse::<Role>().is_err());
    }

    #[test]
    fn a_user_view_without_team_fields_reads_with_the_defaults() {
        let old = r#"{"id":"00000000-0000-0000-0000-000000000000","username":"a","role":"member"}"#;
        let v: UserView = serde_json::from_str(old).unwrap();
        assert_eq!(
            (v.team.as_str(), v.weight, v.budget),
            ("default", 1.0, None)
        );
    }

    #[test]
    fn usernames_are_narrow() {
        assert_eq!(Username::parse(" alice ").unwrap().as_str(), "alice");
        assert!(Username::parse("").is_err());
        assert!(Username::parse("Alice").is_err());
        assert!(Username::parse("-x").is_err());
        assert!(Username::parse("a b").is_err());
        assert!(Username::parse(&"a".repeat(65)).is_err());
        assert!(Username::parse("ml.team_1-x").is_ok());
    }
}
