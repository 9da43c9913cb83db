//! How errors become HTTP answers: a JSON body with a safe message, the field at fault, the right
//! status. Internal causes are logged here and never sent.

use crate::model::AppError;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// An [`AppError`] answered over HTTP.
#[derive(Debug)]
pub struct ApiError(pub AppError);

impl From<AppError> for ApiError {
    fn from(e: AppError) -> Self {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let err = self.0;
        let status =
            StatusCode::from_u16(err.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        // The field travels separately, so the message does not repeat it.
        let message = match &err {
            AppError::Invalid { message, .. } => message.clone(),
            other => other.to_string(),
        };
        let mut body = json!({ "error": message, "kind": kind(&err) });
        if let Some(field) = err.field() {
            body["field"] = json!(field);
        }
        let mut res = (status, Json(body)).into_response();
        if let Some(retry_after_s) = err.retry_after_s() {
            if let Ok(v) = HeaderValue::from_str(&retry_after_s.to_string()) {
                res.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        res
    }
}

fn kind(err: &AppError) -> String {
    serde_json::to_value(err)
        .ok()
        .and_then(|v| v.get("kind").and_then(|k| k.as_str().map(str::to_owned)))
        .unwrap_or_else(|| "internal".into())
}

/// The body of every error answer (for the OpenAPI document).
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong, in plain words.
    pub error: String,
    /// Machine-readable kind (`invalid`, `unauthorized`, `forbidden`, `not_found`, …).
    pub kind: String,
    /// The request field at fault, for `invalid`.
    pub field: Option<String>,
}

/// Server functions answer every error with 500; this gives them the status the error stands for
/// (401, 403, 400, 404, 409, 429…), so logs, proxies and tests see what happened. The browser
/// decodes any 4xx/5xx body as the error either way.
pub async fn server_fn_status(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let is_server_fn =
        req.uri().path().starts_with("/api/") && !req.uri().path().starts_with("/api/v1/");
    let res = next.run(req).await;
    if !is_server_fn || res.status() != axum::http::StatusCode::INTERNAL_SERVER_ERROR {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 64 * 1024).await else {
        parts.status = axum::http::StatusCode::INTERNAL_SERVER_ERROR;
        return Response::from_parts(parts, axum::body::Body::empty());
    };
    if let Ok(err) = serde_json::from_slice::<AppError>(&bytes) {
        if let Ok(status) = axum::http::StatusCode::from_u16(err.status()) {
            parts.status = status;
        }
    }
    Response::from_parts(parts, axum::body::Body::from(bytes))
}
