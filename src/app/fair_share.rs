//! The usage page's fair-share tables: each user's and each team's weight, decayed GPU-hours,
//! share of the recent total, the share the weights owe them, and their budget with what is left
//! (the same figures as `GET /api/v1/fair-share`).

use super::alert::{loaded, Fetched};
use super::widgets::table_or_note;
use crate::model::{FairShareReport, FairShareRow};
use leptos::prelude::*;

fn percent(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

fn budget_cells(r: &FairShareRow) -> (String, String) {
    match (&r.budget, r.budget_left_gpu_hours) {
        (Some(b), Some(left)) => (b.to_string(), format!("{left:.1} GPU-h")),
        (Some(b), None) => (b.to_string(), String::new()),
        _ => ("none".into(), String::new()),
    }
}

fn rows(
    id: &'static str,
    first: &'static str,
    list: Vec<FairShareRow>,
    none: &'static str,
) -> impl IntoView {
    table_or_note(
        id,
        [
            first,
            "Team",
            "Weight",
            "Decayed GPU-h",
            "Share of recent use",
            "Owed share",
            "Budget",
            "Left",
        ],
        list,
        |r| {
            let (budget, left) = budget_cells(&r);
            view! {
                <tr data-name=r.name.clone()>
                    <td>{r.name.clone()}</td>
                    <td>{r.team.clone()}</td>
                    <td>{r.weight.to_string()}</td>
                    <td>{format!("{:.2}", r.decayed_gpu_hours)}</td>
                    <td>{percent(r.share_of_recent)}</td>
                    <td>{percent(r.owed_share)}</td>
                    <td>{budget}</td>
                    <td>{left}</td>
                </tr>
            }
        },
        none,
    )
}

/// The fair-share section of `/usage`.
#[component]
pub fn FairShareTables(report: Fetched<FairShareReport>) -> impl IntoView {
    view! {
        <section class="card">
            <h2>"Fair share"</h2>
            {loaded(report, move |r| {
                let state = if r.fair_share {
                    format!(
                        "On: among jobs of one priority, the owner with the least recent use for their \
                         share goes first. A GPU-hour counts half after {} h. Everyone's decayed use: {:.2} GPU-h.",
                        r.half_life_h, r.total_decayed_gpu_hours
                    )
                } else {
                    "Off: jobs of one priority go in submit order (the launch policy's fair_share).".to_owned()
                };
                view! {
                    <p id="fair-share-state" class="muted">{state}</p>
                    <h3>"Users"</h3>
                    {rows("fair-share-users", "User", r.users, "No user has used a card yet.")}
                    <h3>"Teams"</h3>
                    {rows("fair-share-teams", "Team", r.teams, "No team yet.")}
                }
            })}
        </section>
    }
}
