//! `GET /api/v1/events`: Server-Sent Events of job and card changes, for live pages.

use crate::server::auth::CurrentUser;
use crate::server::live::RESYNC;
use crate::server::AppState;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use std::convert::Infallible;
use tokio::sync::broadcast::error::RecvError;

/// Each event is named by its payload's `kind` (`job`, `pass`, `cards`, `changed`, `resync`) and
/// carries the payload as JSON data. A client that falls behind gets `resync` and should refetch.
#[utoipa::path(get, path = "/api/v1/events", tag = "live", security(("bearer" = [])), responses((status = 200, description = "text/event-stream of JSON payloads", content_type = "text/event-stream", body = String), (status = 401, body = super::error::ErrorBody)))]
pub(super) async fn events(
    State(state): State<AppState>,
    _user: CurrentUser,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = state.live.subscribe();
    let stream = stream::unfold(rx, |mut rx| async move {
        let payload = match rx.recv().await {
            Ok(p) => p,
            Err(RecvError::Lagged(_)) => RESYNC.to_owned(),
            Err(RecvError::Closed) => return None,
        };
        let kind = serde_json::from_str::<serde_json::Value>(&payload)
            .ok()
            .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_owned))
            .unwrap_or_else(|| "message".to_owned());
        Some((Ok(Event::default().event(kind).data(payload)), rx))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
