//! Liveness and readiness probes.

use crate::model::Role;
use crate::server::auth::CurrentUser;
use crate::server::AppState;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};
use std::time::Duration;

/// `GET /healthz`: the process is alive and answering.
#[utoipa::path(get, path = "/healthz", tag = "probes", responses((status = 200, description = "alive")))]
pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// `GET /readyz`: the process can do its work (the database answers, and Docker on a runner node).
/// Everyone learns ready or not; only a signed-in admin also sees the checks and their errors
/// (which may name hosts, paths and versions).
#[utoipa::path(get, path = "/readyz", tag = "probes", responses((status = 200, description = "ready (admins also see `checks`)"), (status = 503, description = "not ready (admins also see the reasons in `checks`)")))]
pub async fn readyz(State(state): State<AppState>, req: Request) -> (StatusCode, Json<Value>) {
    let (status, body) = readiness(&state).await;
    let (parts, _) = req.into_parts();
    // A caller that cannot be resolved (the database is down) is shown no details.
    let admin = CurrentUser::resolve(&parts, &state.ctx.pool, state.ctx.session_lifetime)
        .await
        .ok()
        .flatten()
        .is_some_and(|u| u.role.at_least(Role::Admin));
    if admin {
        (status, Json(body))
    } else {
        (status, Json(json!({ "status": body["status"] })))
    }
}

/// The readiness answer with every check.
async fn readiness(state: &AppState) -> (StatusCode, Value) {
    let db = tokio::time::timeout(
        Duration::from_secs(2),
        sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(&state.ctx.pool),
    )
    .await;
    let database = match db {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("database error: {e}")),
        Err(_) => Err("database did not answer within 2 s".to_owned()),
    };
    let docker = state
        .ctx
        .docker
        .as_ref()
        .map(|h| h.problem().map_or(Ok(()), Err));
    let mut checks =
        json!({ "database": database.as_ref().err().map_or("ok".to_owned(), Clone::clone) });
    if let Some(d) = &docker {
        checks["docker"] = json!(d.as_ref().err().map_or("ok".to_owned(), Clone::clone));
    }
    if database.is_ok() && docker.is_none_or(|d| d.is_ok()) {
        (
            StatusCode::OK,
            json!({ "status": "ready", "checks": checks }),
        )
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "status": "not ready", "checks": checks }),
        )
    }
}
