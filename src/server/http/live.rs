//! `GET /api/v1/events`: Server-Sent Events of job and card changes, for live pages.

use crate::model::LiveEvent;
use crate::server::auth::CurrentUser;
use crate::server::notifier::Note;
use crate::server::AppState;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use std::convert::Infallible;

/// Each event is named by its payload's `kind` (`job`, `pass`, `cards`, `changed`, `resync`) and
/// carries the payload as JSON data. After a gap (the server's LISTEN connection was re-made, or
/// this client fell behind) the client gets `resync` and should refetch.
#[utoipa::path(get, path = "/api/v1/events", tag = "live", security(("bearer" = [])), responses((status = 200, description = "text/event-stream of JSON payloads", content_type = "text/event-stream", body = String), (status = 401, body = super::error::ErrorBody)))]
pub(super) async fn events(
    State(state): State<AppState>,
    _user: CurrentUser,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let notes = state.notifier.subscribe();
    let stream = stream::unfold(notes, |mut notes| async move {
        let event = loop {
            match notes.recv().await {
                Note::Event(e) => break e,
                Note::Missed => break LiveEvent::Resync,
                Note::Wake | Note::Backstop => continue,
            }
        };
        let payload = serde_json::to_value(&event).unwrap_or_default();
        let kind = payload["kind"].as_str().unwrap_or("message").to_owned();
        Some((
            Ok(Event::default().event(kind).data(payload.to_string())),
            notes,
        ))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
