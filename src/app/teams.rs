//! Teams on the admin page (list with weights and budgets, add a team, edit a team's weight and
//! budget; a user's team, weight and budget in the users list) and, read-only, on the usage page
//! for managers. Every change goes through the same service functions as the REST API.

use super::alert::{action_error, loaded, Fetched};
use super::widgets::{table_or_note, text_input};
use crate::api::{CreateTeam, PlaceUser, UpdateTeam};
use crate::model::{Budget, NewTeam, TeamPatch, TeamView, UserShare, UserView};
use leptos::prelude::*;

/// A weight as typed: a number more than 0 and at most 1,000,000; the error names `field`.
pub fn parse_weight(field: &str, text: &str) -> Result<f64, String> {
    crate::model::parse_weight(text).map_err(|e| format!("{field}: {e}"))
}

/// A budget as typed, `GPU_HOURS/PERIOD/KIND` (`50/week/hard`); empty is no budget. The error
/// names `field`.
pub fn parse_budget(field: &str, text: &str) -> Result<Option<Budget>, String> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    text.parse::<Budget>()
        .map(Some)
        .map_err(|e| format!("{field}: {e}"))
}

/// A budget as the page shows it (and takes it back): `50/week/hard`, or empty.
fn budget_text(b: Option<&Budget>) -> String {
    b.map(Budget::to_string).unwrap_or_default()
}

/// The admin page's Teams section, with its actions and list (made by the page, once per page).
#[component]
pub fn Teams(
    create: ServerAction<CreateTeam>,
    update: ServerAction<UpdateTeam>,
    teams: Fetched<Vec<TeamView>>,
) -> impl IntoView {
    view! {
        <section class="card">
            <h2>"Teams"</h2>
            <p class="muted">"A team's weight is its share of the cards against the other teams; a user's weight is their share within their team (both 1 unless set). A budget caps GPU-hours per week or month: soft (past it, the owner's jobs go after the others of their priority) or hard (past it, they wait). Write a budget as GPU-hours/period/kind, e.g. 50/week/hard; leave it empty for none."</p>
            {move || action_error(update.value().get())}
            {loaded(teams, move |list| table_or_note("teams", ["Team", "Weight", "Budget", "Members", ""], list, move |t| {
                view! { <TeamRow t update /> }
            }, "No team yet."))}
            <h3>"Add a team"</h3>
            <NewTeamForm create />
        </section>
    }
}

#[component]
fn TeamRow(t: TeamView, update: ServerAction<UpdateTeam>) -> impl IntoView {
    let weight = RwSignal::new(t.weight.to_string());
    let budget = RwSignal::new(budget_text(t.budget.as_ref()));
    let error = RwSignal::new(None::<String>);
    let name = t.name.clone();
    let save = move |_| {
        let patch = (|| -> Result<TeamPatch, String> {
            Ok(TeamPatch {
                weight: Some(parse_weight("weight", &weight.get_untracked())?),
                budget: Some(parse_budget("budget", &budget.get_untracked())?),
            })
        })();
        match patch {
            Ok(patch) => {
                error.set(None);
                update.dispatch(UpdateTeam {
                    name: name.clone(),
                    patch,
                });
            }
            Err(e) => error.set(Some(e)),
        }
    };
    let members = if t.members.is_empty() {
        "none".to_owned()
    } else {
        t.members.join(", ")
    };
    view! {
        <tr data-team=t.name.clone()>
            <td>{t.name.clone()}</td>
            <td>
                <input type="number" min="0" step="any" aria-label=format!("Weight of team {}", t.name)
                    prop:value=move || weight.get() on:input=move |ev| weight.set(event_target_value(&ev)) />
            </td>
            <td>
                <input type="text" placeholder="none" aria-label=format!("Budget of team {}", t.name)
                    prop:value=move || budget.get() on:input=move |ev| budget.set(event_target_value(&ev)) />
            </td>
            <td>{format!("{} ({members})", t.member_count)}</td>
            <td>
                <button type="button" class="small" on:click=save>{format!("Save {}", t.name)}</button>
                {move || error.get().map(|e| view! { <p class="error" role="alert">{e}</p> })}
            </td>
        </tr>
    }
}

#[component]
fn NewTeamForm(create: ServerAction<CreateTeam>) -> impl IntoView {
    let name = RwSignal::new(String::new());
    let weight = RwSignal::new("1".to_owned());
    let budget = RwSignal::new(String::new());
    let error = RwSignal::new(None::<String>);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let team = (|| -> Result<NewTeam, String> {
            Ok(NewTeam {
                name: name.get_untracked().trim().to_owned(),
                weight: parse_weight("weight", &weight.get_untracked())?,
                budget: parse_budget("budget", &budget.get_untracked())?,
            })
        })();
        match team {
            Ok(team) => {
                error.set(None);
                create.dispatch(CreateTeam { team });
            }
            Err(e) => error.set(Some(e)),
        }
    };
    let created = move || {
        create.value().get().and_then(|r| r.ok()).map(
            |t| view! { <p role="status">{format!("Created team {} (weight {}).", t.name, t.weight)}</p> },
        )
    };
    view! {
        <form id="new-team" class="row" on:submit=submit>
            {text_input("new-team-name", "New team", "ml-research", name)}
            <div class="field">
                <label for="new-team-weight">"Weight"</label>
                <input id="new-team-weight" type="number" min="0" step="any"
                    prop:value=move || weight.get() on:input=move |ev| weight.set(event_target_value(&ev)) />
            </div>
            {text_input("new-team-budget", "Budget (GPU-hours/period/kind)", "50/week/hard", budget)}
            <div class="field"><button type="submit">"Add team"</button></div>
        </form>
        {move || error.get().map(|e| view! { <p class="error" role="alert">{e}</p> })}
        {move || action_error(create.value().get())}
        {created}
    }
}

/// The cells of a user's row that place them (team, weight, budget), with a Save button.
#[component]
pub fn ShareCells(u: UserView, place: ServerAction<PlaceUser>) -> impl IntoView {
    let team = RwSignal::new(u.team.clone());
    let weight = RwSignal::new(u.weight.to_string());
    let budget = RwSignal::new(budget_text(u.budget.as_ref()));
    let error = RwSignal::new(None::<String>);
    let id = u.id;
    let save = move |_| {
        let share = (|| -> Result<UserShare, String> {
            Ok(UserShare {
                team: Some(team.get_untracked().trim().to_owned()),
                weight: Some(parse_weight("weight", &weight.get_untracked())?),
                budget: Some(parse_budget("budget", &budget.get_untracked())?),
            })
        })();
        match share {
            Ok(share) => {
                error.set(None);
                place.dispatch(PlaceUser { id, share });
            }
            Err(e) => error.set(Some(e)),
        }
    };
    let name = u.username.clone();
    view! {
        <td>
            <input type="text" aria-label=format!("Team of {name}")
                prop:value=move || team.get() on:input=move |ev| team.set(event_target_value(&ev)) />
        </td>
        <td>
            <input type="number" min="0" step="any" aria-label=format!("Weight of {name}")
                prop:value=move || weight.get() on:input=move |ev| weight.set(event_target_value(&ev)) />
        </td>
        <td>
            <input type="text" placeholder="none" aria-label=format!("Budget of {name}")
                prop:value=move || budget.get() on:input=move |ev| budget.set(event_target_value(&ev)) />
        </td>
        <td>
            <button type="button" class="small" on:click=save>{format!("Save share of {name}")}</button>
            {move || error.get().map(|e| view! { <p class="error" role="alert">{e}</p> })}
        </td>
    }
}

/// The teams, read-only (the usage page, for managers).
#[component]
pub fn TeamsReadOnly(teams: Fetched<Vec<TeamView>>) -> impl IntoView {
    view! {
        <section class="card">
            <h2>"Teams"</h2>
            <p class="muted">"Each team's share weight, GPU-hour budget and members. Admins change them on the admin page."</p>
            {loaded(teams, move |list| table_or_note("teams", ["Team", "Weight", "Budget", "Members"], list, move |t| view! {
                <tr data-team=t.name.clone()>
                    <td>{t.name.clone()}</td>
                    <td>{t.weight.to_string()}</td>
                    <td>{t.budget.map(|b| b.to_string()).unwrap_or_else(|| "none".into())}</td>
                    <td>{format!("{} ({})", t.member_count, t.members.join(", "))}</td>
                </tr>
            }, "No team yet."))}
        </section>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_are_positive_numbers_and_errors_name_the_field() {
        assert_eq!(parse_weight("weight", " 2.5 "), Ok(2.5));
        for bad in ["0", "-1", "NaN", "inf", "lots", "", "1e300"] {
            let e = parse_weight("weight", bad).unwrap_err();
            assert!(e.starts_with("weight: "), "{bad}: {e}");
        }
    }

    #[test]
    fn an_empty_budget_is_none_and_a_bad_one_names_the_field() {
        assert_eq!(parse_budget("budget", "  "), Ok(None));
        let b = parse_budget("budget", "50/week/hard").unwrap().unwrap();
        assert_eq!(budget_text(Some(&b)), "50/week/hard");
        assert_eq!(budget_text(None), "");
        for bad in ["50", "50/day/hard", "x/week/soft", "-5/month/soft"] {
            let e = parse_budget("budget", bad).unwrap_err();
            assert!(e.starts_with("budget: "), "{bad}: {e}");
        }
    }
}
