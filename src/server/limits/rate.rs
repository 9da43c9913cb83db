//! How often one user may submit (or resubmit) jobs and ask for a submit preview: each costs
//! database reads, a volume walk and a planner run before anything is refused, so a member looping
//! on either must be slowed down before the checks run, not after.
//!
//! One token bucket per user and action, in this process (each UI node bounds what it serves).
//! Admins are not limited, as they are not by `max_queued_per_user`.

use crate::model::{AppError, Role};
use crate::server::auth::CurrentUser;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use uuid::Uuid;

/// Submits (and resubmits) one user may make per minute by default (`--submit-rate-per-min`).
pub const DEFAULT_SUBMITS_PER_MIN: u32 = 120;
/// Submit previews one user may ask for per minute by default (`--preview-rate-per-min`).
pub const DEFAULT_PREVIEWS_PER_MIN: u32 = 120;

/// What is being rate-limited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// `POST /api/v1/jobs`, a resubmit, the submit page.
    Submit,
    /// The submit page's preview.
    Preview,
}

impl Action {
    fn noun(self) -> &'static str {
        match self {
            Action::Submit => "job submissions",
            Action::Preview => "submit previews",
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Action::Submit => "--submit-rate-per-min",
            Action::Preview => "--preview-rate-per-min",
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The per-user buckets of one process (cheap to clone: a handle).
#[derive(Debug, Clone)]
pub struct SubmitRate {
    submits_per_min: u32,
    previews_per_min: u32,
    buckets: Arc<Mutex<HashMap<(Uuid, Action), Bucket>>>,
}

impl Default for SubmitRate {
    fn default() -> Self {
        Self::new(DEFAULT_SUBMITS_PER_MIN, DEFAULT_PREVIEWS_PER_MIN)
    }
}

impl SubmitRate {
    /// Buckets of `submits_per_min` and `previews_per_min` (0: that action is not limited). A
    /// bucket holds a minute's worth, so a burst of that many passes, then one per
    /// `60 / per_min` seconds.
    pub fn new(submits_per_min: u32, previews_per_min: u32) -> Self {
        SubmitRate {
            submits_per_min,
            previews_per_min,
            buckets: Arc::default(),
        }
    }

    /// Takes one `action` of `user`'s bucket, or refuses with 429 and the seconds until the next
    /// token.
    pub fn take(&self, user: &CurrentUser, action: Action) -> Result<(), AppError> {
        if user.role.at_least(Role::Admin) {
            return Ok(());
        }
        self.take_at(user.id, action, Instant::now())
    }

    fn take_at(&self, user: Uuid, action: Action, now: Instant) -> Result<(), AppError> {
        let per_min = match action {
            Action::Submit => self.submits_per_min,
            Action::Preview => self.previews_per_min,
        };
        if per_min == 0 {
            return Ok(());
        }
        let capacity = f64::from(per_min);
        let per_s = capacity / 60.0;
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        // A full bucket says nothing a missing one would not: forget those now and then, so the
        // map holds only users who submitted within the last minute.
        if buckets.len() > 1024 {
            buckets.retain(|_, b| {
                b.tokens + now.duration_since(b.at).as_secs_f64() * per_s < capacity
            });
        }
        let b = buckets.entry((user, action)).or_insert(Bucket {
            tokens: capacity,
            at: now,
        });
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * per_s).min(capacity);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            return Ok(());
        }
        let wait = ((1.0 - b.tokens) / per_s).ceil().max(1.0) as u64;
        Err(AppError::OverCap {
            message: format!(
                "too many {}: at most {per_min} a minute per user ({})",
                action.noun(),
                action.flag()
            ),
            retry_after_s: wait,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_burst_of_a_minutes_worth_passes_then_one_per_interval() {
        let rate = SubmitRate::new(6, 0);
        let (alice, bob) = (Uuid::new_v4(), Uuid::new_v4());
        let t0 = Instant::now();
        for _ in 0..6 {
            assert!(rate.take_at(alice, Action::Submit, t0).is_ok());
        }
        match rate.take_at(alice, Action::Submit, t0) {
            Err(AppError::OverCap {
                message,
                retry_after_s,
            }) => {
                assert_eq!(retry_after_s, 10, "one token per 10 s at 6 a minute");
                assert!(message.contains("at most 6 a minute"), "{message}");
                assert!(message.contains("--submit-rate-per-min"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        // Another user and another action have their own buckets; 0 means unlimited.
        assert!(rate.take_at(bob, Action::Submit, t0).is_ok());
        for _ in 0..100 {
            assert!(rate.take_at(alice, Action::Preview, t0).is_ok());
        }
        // Ten seconds later one more passes, and only one.
        let later = t0 + Duration::from_secs(10);
        assert!(rate.take_at(alice, Action::Submit, later).is_ok());
        assert!(rate.take_at(alice, Action::Submit, later).is_err());
    }
}
