//! The submit page's budget line: the same domain call as `GET /api/v1/me/budget`, for the caller
//! only.

#[cfg(feature = "ssr")]
use crate::model::Role;
use crate::model::{AppError, BudgetUse};
use leptos::prelude::*;

/// The budgets that apply to the caller, with this period's use.
#[server(endpoint = "my_budget")]
pub async fn my_budget() -> Result<Vec<BudgetUse>, AppError> {
    use crate::api::context::server_fn_require;

    let (state, user) = server_fn_require(Role::Member).await?;
    crate::server::budgets::mine(&state.pool, user.id).await
}
