//! `gpuq team list|add|set` and `gpuq user set`: teams, share weights and budgets over the REST
//! API (listing: managers and admins; changes: admins).

use anyhow::{bail, Context, Result};
use reqwest::Method;
use serde_json::{json, Value};

use super::api::{path_segment, ApiClient};
use super::{credentials, ConnArgs};
use crate::model::{parse_weight, Budget, Secret, TeamView, UserView};

/// Arguments of `gpuq team`.
#[derive(Debug, Clone, clap::Args)]
pub struct TeamArgs {
    /// What to do
    #[command(subcommand)]
    pub action: TeamAction,
}

/// A budget and its removal, as `team set` and `user set` take them.
#[derive(Debug, Clone, clap::Args)]
pub struct BudgetFlags {
    /// A GPU-hour budget: GPU_HOURS/PERIOD/KIND, PERIOD week or month, KIND soft or hard
    /// (e.g. 50/week/hard)
    #[arg(long, value_name = "H/PERIOD/KIND", value_parser = budget, conflicts_with = "no_budget")]
    pub budget: Option<Budget>,
    /// Remove the budget
    #[arg(long)]
    pub no_budget: bool,
}

impl BudgetFlags {
    /// The `budget` field of a patch: absent, a budget, or `null`.
    fn field(&self) -> Option<Value> {
        if self.no_budget {
            Some(Value::Null)
        } else {
            self.budget.map(|b| json!(b))
        }
    }
}

/// What `gpuq team` does.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum TeamAction {
    /// The teams: weight, budget, members (managers and admins)
    List {
        /// Print the server's JSON
        #[arg(long)]
        json: bool,
    },
    /// Create a team (admins)
    Add {
        /// Team name (a-z, 0-9, `_`, `.`, `-`)
        name: String,
        /// Share weight against the other teams (more than 0; default 1)
        #[arg(long, value_parser = parse_weight)]
        weight: Option<f64>,
        /// A GPU-hour budget: GPU_HOURS/PERIOD/KIND (e.g. 50/week/hard)
        #[arg(long, value_name = "H/PERIOD/KIND", value_parser = budget)]
        budget: Option<Budget>,
    },
    /// Change a team's weight or budget (admins)
    Set {
        /// Team name
        name: String,
        /// New share weight
        #[arg(long, value_parser = parse_weight)]
        weight: Option<f64>,
        /// New budget, or its removal
        #[command(flatten)]
        budget: BudgetFlags,
    },
}

/// Arguments of `gpuq user set`.
#[derive(Debug, Clone, clap::Args)]
pub struct UserSetArgs {
    /// Login name of the user
    pub user: String,
    /// Move the user to this team (it must exist)
    #[arg(long)]
    pub team: Option<String>,
    /// The user's share weight within their team (more than 0)
    #[arg(long, value_parser = parse_weight)]
    pub weight: Option<f64>,
    /// The user's own budget, or its removal
    #[command(flatten)]
    pub budget: BudgetFlags,
}

fn budget(text: &str) -> Result<Budget, String> {
    text.parse()
}

/// Runs one `gpuq team` command; the text to print.
pub async fn run(api: &ApiClient, args: TeamArgs) -> Result<String> {
    match args.action {
        TeamAction::List { json } => {
            let answer = api.call(Method::GET, "/api/v1/teams", None).await?;
            if json {
                return super::pretty(&answer);
            }
            Ok(table(&super::typed::<Vec<TeamView>>(answer)?))
        }
        TeamAction::Add {
            name,
            weight,
            budget,
        } => {
            let mut body = json!({ "name": name });
            if let Some(w) = weight {
                body["weight"] = json!(w);
            }
            if let Some(b) = budget {
                body["budget"] = json!(b);
            }
            let answer = api.call(Method::POST, "/api/v1/teams", Some(&body)).await?;
            Ok(format!("created {}", line(&super::typed(answer)?)))
        }
        TeamAction::Set {
            name,
            weight,
            budget,
        } => {
            let mut body = json!({});
            if let Some(w) = weight {
                body["weight"] = json!(w);
            }
            if let Some(b) = budget.field() {
                body["budget"] = b;
            }
            if body == json!({}) {
                bail!("nothing to change: give --weight, --budget or --no-budget");
            }
            let path = format!("/api/v1/teams/{}", path_segment(&name));
            let answer = api.call(Method::PATCH, &path, Some(&body)).await?;
            Ok(format!("updated {}", line(&super::typed(answer)?)))
        }
    }
}

/// `gpuq user set USER …`: finds the user by name, then patches their team, weight or budget.
pub async fn user_set(args: UserSetArgs, conn: ConnArgs) -> Result<()> {
    let token = credentials::token_for(conn.token.as_ref().map(Secret::expose), &conn.url)?;
    let api = ApiClient::new(&conn.url, Some(token))?;
    let mut body = json!({});
    if let Some(team) = &args.team {
        body["team"] = json!(team);
    }
    if let Some(w) = args.weight {
        body["weight"] = json!(w);
    }
    if let Some(b) = args.budget.field() {
        body["budget"] = b;
    }
    if body == json!({}) {
        bail!("nothing to change: give --team, --weight, --budget or --no-budget");
    }
    let users: Vec<UserView> = super::typed(api.call(Method::GET, "/api/v1/users", None).await?)?;
    let user = users
        .iter()
        .find(|u| u.username == args.user)
        .with_context(|| format!("no user named `{}`", args.user))?;
    let path = format!("/api/v1/users/{}", user.id);
    api.call(Method::PATCH, &path, Some(&body)).await?;
    let text = format!("{}: updated\n", user.username);
    super::emit(&super::sanitize::strip_controls(&text))
}

fn budget_text(b: Option<&Budget>) -> String {
    b.map_or_else(|| "-".to_owned(), Budget::to_string)
}

fn line(t: &TeamView) -> String {
    format!(
        "team {} (weight {}, budget {})\n",
        t.name,
        t.weight,
        budget_text(t.budget.as_ref())
    )
}

/// The teams as a table.
pub fn table(list: &[TeamView]) -> String {
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                t.weight.to_string(),
                budget_text(t.budget.as_ref()),
                t.member_count.to_string(),
                t.members.join(", "),
            ]
        })
        .collect();
    super::render::table(
        &["TEAM", "WEIGHT", "BUDGET", "USERS", "MEMBERS"],
        &rows,
        &[1, 3],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: Cmd,
    }

    #[derive(clap::Subcommand)]
    enum Cmd {
        Team(TeamArgs),
        Set(UserSetArgs),
    }

    fn parse(args: &[&str]) -> Result<Cmd, clap::Error> {
        Cli::try_parse_from(std::iter::once("gpuq").chain(args.iter().copied())).map(|c| c.cmd)
    }

    #[test]
    fn team_flags_parse_and_bad_ones_name_the_flag() {
        let Ok(Cmd::Team(TeamArgs {
            action:
                TeamAction::Add {
                    name,
                    weight,
                    budget,
                },
        })) = parse(&[
            "team",
            "add",
            "ml",
            "--weight",
            "2",
            "--budget",
            "50/week/hard",
        ])
        else {
            panic!("team add parses");
        };
        assert_eq!((name.as_str(), weight), ("ml", Some(2.0)));
        assert_eq!(budget.map(|b| b.to_string()), Some("50/week/hard".into()));
        for (args, flag) in [
            (vec!["team", "add", "ml", "--weight=-1"], "--weight"),
            (vec!["team", "add", "ml", "--weight", "NaN"], "--weight"),
            (
                vec!["team", "add", "ml", "--budget", "50/day/hard"],
                "--budget",
            ),
            (vec!["team", "set", "ml", "--budget", "50/week"], "--budget"),
        ] {
            let e = parse(&args).err().expect("refused").to_string();
            assert!(e.contains(flag), "{args:?}: {e}");
        }
        let both = parse(&[
            "team",
            "set",
            "ml",
            "--budget",
            "1/week/soft",
            "--no-budget",
        ]);
        assert!(both.is_err());
    }

    #[test]
    fn user_set_sends_only_what_was_given() {
        let Ok(Cmd::Set(args)) = parse(&["set", "alice", "--team", "ml", "--no-budget"]) else {
            panic!("user set parses");
        };
        assert_eq!(args.team.as_deref(), Some("ml"));
        assert_eq!(args.weight, None);
        assert_eq!(args.budget.field(), Some(Value::Null));
        let Ok(Cmd::Set(args)) = parse(&["set", "alice", "--weight", "0.5"]) else {
            panic!("user set parses");
        };
        assert_eq!(args.budget.field(), None);
        assert_eq!(args.weight, Some(0.5));
    }

    #[test]
    fn the_table_shows_weights_budgets_and_members() {
        let t = TeamView {
            name: "ml".into(),
            weight: 2.0,
            budget: Some("50/week/hard".parse().unwrap()),
            member_count: 2,
            members: vec!["alice".into(), "bob".into()],
        };
        let text = table(&[t]);
        assert!(text.contains("50/week/hard"), "{text}");
        assert!(text.contains("alice, bob"), "{text}");
    }
}
