//! A member's budgets as one line each ("Your usage this week: 41.0 GPU-h of a 50 GPU-h budget
//! (team ml, hard; resets Mon 7 Dec)"): on the submit page before they submit, above the queue,
//! and on a queued job's page beside why it waits.

use crate::model::BudgetUse;
use leptos::prelude::*;

/// `text` with its first letter in capitals (a budget's line opens a paragraph).
fn capitalized(text: &str) -> String {
    let mut c = text.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// One paragraph per budget; a used-up one marked so.
pub fn budget_lines(uses: Vec<BudgetUse>) -> impl IntoView {
    uses.into_iter()
        .map(|u| {
            let class = if u.exhausted {
                "budget used-up"
            } else {
                "budget"
            };
            view! { <p class=class>{capitalized(&u.line())}</p> }
        })
        .collect_view()
}

/// The signed-in member's budgets, fetched once (nothing when they have none).
#[component]
pub fn MyBudgets() -> impl IntoView {
    let budget = Resource::new(|| (), |_| crate::api::my_budget());
    view! {
        <Transition fallback=|| ()>
            {move || Suspend::new(async move { budget_lines(budget.await.unwrap_or_default()) })}
        </Transition>
    }
}
