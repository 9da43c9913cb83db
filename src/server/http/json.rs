//! A JSON body extractor whose refusals are our JSON errors naming what is wrong.

use crate::model::AppError;
use crate::server::http::ApiError;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;

/// Like `axum::Json`, but a bad body is a 400 `{"error", "field": "body"}` (or 413 when too large).
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(ApiError(refusal(&rejection))),
        }
    }
}

fn refusal(rejection: &JsonRejection) -> AppError {
    match rejection {
        JsonRejection::JsonDataError(e) => {
            let text = e.body_text();
            // serde names the field in "unknown field `x`" and "missing field `x`"; pass it on.
            // A bad value of a known field is named by the path axum puts before serde's words
            // ("…target type: pull: `sometimes` is not…").
            let field = text
                .split('`')
                .nth(1)
                .filter(|_| text.contains("field `"))
                .or_else(|| path_of(&text))
                .unwrap_or("body");
            AppError::invalid(field, text.clone())
        }
        JsonRejection::MissingJsonContentType(_) => AppError::invalid(
            "body",
            "send the body as JSON with Content-Type: application/json",
        ),
        other => AppError::invalid("body", other.body_text()),
    }
}

/// The path axum's data error names (`pull`, `volume_allowlist[0].path`), if it names one.
fn path_of(text: &str) -> Option<&str> {
    let (_, rest) = text.split_once("target type: ")?;
    let (path, _) = rest.split_once(": ")?;
    let plain = !path.is_empty()
        && path != "."
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.[]".contains(c));
    plain.then_some(path)
}
