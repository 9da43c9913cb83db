//! Usage for the browser page: the same report the REST API serves, plus its chart options.

use crate::model::{AppError, UsageView};
use leptos::prelude::*;

/// The usage report of `[from, to)` (forms as for `GET /api/v1/usage`; empty means the last
/// 24 hours) with the charts' ECharts options. Managers and admins only.
#[server(endpoint = "usage_report")]
pub async fn usage_report(from: String, to: String) -> Result<UsageView, AppError> {
    use crate::api::context::server_fn_require;
    use crate::model::Role;

    let (state, _) = server_fn_require(Role::Manager).await?;
    crate::server::usage::view(&state.pool, &from, &to, chrono::Utc::now()).await
}

/// Where the caller stands in fair share (`GET /api/v1/fair-share`'s report): managers and admins
/// see every user and team, a member their own row and their team's.
#[server(endpoint = "fair_share_report")]
pub async fn fair_share_report() -> Result<crate::model::FairShareReport, AppError> {
    use crate::api::context::server_fn_require;
    use crate::model::Role;

    let (ctx, user) = server_fn_require(Role::Member).await?;
    crate::server::fairness::report_for(&ctx.pool, &user, chrono::Utc::now()).await
}
