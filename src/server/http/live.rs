//! `GET /api/v1/events`: Server-Sent Events of job and card changes, for live pages.

use super::error::ApiError;
use crate::server::auth::CurrentUser;
use crate::server::jobs::live::{LiveFilter, Step};
use crate::server::AppState;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use std::convert::Infallible;

/// Each event is named by its payload's `kind` (`job`, `queue`, `pass`, `cards`, `changed`,
/// `resync`) and carries the payload as JSON data. Members get `job` events for their own jobs
/// only, and `queue` (no details) when someone else's job changed; edits of users reach admins
/// and the edited user only. The stream ends when its user is disabled, and follows a change of
/// their role at once. After a gap (the server's LISTEN connection was re-made, or this client
/// fell behind) the client gets `resync` and should refetch. One user may hold a bounded number of
/// live streams (429 past it).
#[utoipa::path(get, path = "/api/v1/events", tag = "live", security(("bearer" = [])), responses((status = 200, description = "text/event-stream of JSON payloads", content_type = "text/event-stream", body = String), (status = 401, body = super::error::ErrorBody), (status = 429, body = super::error::ErrorBody)))]
pub(super) async fn events(
    State(state): State<AppState>,
    user: CurrentUser,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let slot = state.ctx.streams.take(&user)?;
    let notes = state.ctx.notifier.subscribe();
    let filter = LiveFilter::new(user);
    let pool = state.ctx.pool.clone();
    let st = (notes, filter, pool, slot);
    let stream = stream::unfold(st, |(mut notes, mut filter, pool, slot)| async move {
        let event = loop {
            match filter.step(&pool, notes.recv().await).await {
                Step::Send(e) => break e,
                Step::Skip => continue,
                Step::End => return None,
            }
        };
        let payload = serde_json::to_value(&event).unwrap_or_default();
        let kind = payload["kind"].as_str().unwrap_or("message").to_owned();
        Some((
            Ok(Event::default().event(kind).data(payload.to_string())),
            (notes, filter, pool, slot),
        ))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}
