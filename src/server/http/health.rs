//! Liveness and readiness probes.

use crate::server::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};
use std::time::Duration;

/// `GET /healthz`: the process is alive and answering.
#[utoipa::path(get, path = "/healthz", tag = "probes", responses((status = 200, description = "alive")))]
pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// `GET /readyz`: the process can do its work (the database answers).
#[utoipa::path(get, path = "/readyz", tag = "probes", responses((status = 200, description = "ready"), (status = 503, description = "not ready, with the reason")))]
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    let db = tokio::time::timeout(
        Duration::from_secs(2),
        sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(&state.pool),
    )
    .await;
    let database = match db {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("database error: {e}")),
        Err(_) => Err("database did not answer within 2 s".to_owned()),
    };
    let docker = state
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
            Json(json!({ "status": "ready", "checks": checks })),
        )
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "not ready", "checks": checks })),
        )
    }
}
