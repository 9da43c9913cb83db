//! What a live stream (an SSE page or a log follow) may carry, and how many one user may hold.

use crate::model::{AuditKind, LiveEvent, Role};
use crate::server::auth::CurrentUser;
use crate::server::db::users;
use crate::server::notifier::Note;
use sqlx::PgPool;
use std::collections::HashMap;

use uuid::Uuid;

/// Fits live events to one viewer: managers and admins get every job event; a member gets their
/// own jobs' changes, and for everyone else's only that the queue changed (so pages refetch the
/// shared queue without learning which job did what). Edits of a user are for admins and that
/// user alone. The viewer's account is read again whenever an edit of it is heard (and after a
/// gap): a stream of a user who was disabled ends, and one whose role changed is fitted to the new
/// role from then on (a demoted manager's stream stops carrying other members' jobs).
pub struct LiveFilter {
    viewer: CurrentUser,
    /// Whether a job is the viewer's (jobs never change owner).
    mine: HashMap<Uuid, bool>,
}

/// What a live stream does with one note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send this event.
    Send(LiveEvent),
    /// Nothing for this viewer.
    Skip,
    /// The viewer may no longer hold a stream (disabled, or their account could not be read):
    /// end it.
    End,
}

/// Audit kinds whose subject is a user (or one of their tokens): only admins, and the user the
/// edit is about, hear of them.
fn about_a_user(what: AuditKind) -> bool {
    matches!(
        what,
        AuditKind::UserCreate
            | AuditKind::UserUpdate
            | AuditKind::UserPassword
            | AuditKind::SignIn
            | AuditKind::SignInFailed
            | AuditKind::TokenCreate
            | AuditKind::TokenUse
            | AuditKind::TokenRevoke
    )
}

impl LiveFilter {
    /// A filter for `viewer`'s stream.
    pub fn new(viewer: CurrentUser) -> Self {
        LiveFilter {
            viewer,
            mine: HashMap::new(),
        }
    }

    /// What the viewer's stream does with `note`.
    pub async fn step(&mut self, pool: &PgPool, note: Note) -> Step {
        match note {
            Note::Event(LiveEvent::Changed { what, subject }) if about_a_user(what) => {
                let own = subject == self.viewer.username;
                let event = LiveEvent::Changed { what, subject };
                if own {
                    if !self.reread_viewer(pool).await {
                        return Step::End;
                    }
                    Step::Send(event)
                } else if self.viewer.role == Role::Admin {
                    Step::Send(event)
                } else {
                    Step::Skip
                }
            }
            Note::Event(event) => Step::Send(self.fit(pool, event).await),
            // Whatever was missed may have been an edit of the viewer.
            Note::Missed if self.reread_viewer(pool).await => Step::Send(LiveEvent::Resync),
            Note::Missed => Step::End,
            Note::Wake | Note::Backstop => Step::Skip,
        }
    }

    /// Reads the viewer's account again and takes its role; false when it is disabled or gone, or
    /// cannot be read (a stream is not kept open on a guess).
    async fn reread_viewer(&mut self, pool: &PgPool) -> bool {
        let row = match users::active_by_id(pool, self.viewer.id).await {
            Ok(Some(row)) => row,
            Ok(None) => return false,
            Err(e) => {
                tracing::warn!(user = %self.viewer.username, error = %e, "live stream: cannot read its user again; ending it");
                return false;
            }
        };
        match row.role() {
            Ok(role) => {
                self.viewer.role = role;
                true
            }
            Err(e) => {
                tracing::error!(user = %self.viewer.username, error = %e, "live stream: a user's role does not read; ending it");
                false
            }
        }
    }

    /// The event as this viewer may see it.
    pub async fn fit(&mut self, pool: &PgPool, event: LiveEvent) -> LiveEvent {
        let LiveEvent::Job { job_id, .. } = &event else {
            return event;
        };
        if self.viewer.role.at_least(Role::Manager) {
            return event;
        }
        let mine = match self.mine.get(job_id) {
            Some(m) => *m,
            None => {
                let owner: Option<Uuid> =
                    sqlx::query_scalar("SELECT owner_id FROM jobs WHERE id = $1")
                        .bind(job_id)
                        .fetch_optional(pool)
                        .await
                        .ok()
                        .flatten();
                let mine = owner == Some(self.viewer.id);
                if self.mine.len() >= 10_000 {
                    self.mine.clear();
                }
                self.mine.insert(*job_id, mine);
                mine
            }
        };
        if mine {
            event
        } else {
            LiveEvent::Queue
        }
    }
}
