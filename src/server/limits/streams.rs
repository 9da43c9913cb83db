//! How many live streams (SSE pages and log follows) one user may hold open at once.

use crate::model::AppError;
use crate::server::auth::CurrentUser;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// Live streams (event streams and log follows) one user may hold open at once.
pub const STREAMS_PER_USER: usize = 16;

/// The open live streams per user, shared by a process's handlers.
#[derive(Clone, Debug, Default)]
pub struct StreamSlots {
    open: Arc<Mutex<HashMap<Uuid, usize>>>,
}

/// One open stream; dropping it (the client went away, the stream ended) frees the slot.
#[derive(Debug)]
pub struct StreamSlot {
    open: Arc<Mutex<HashMap<Uuid, usize>>>,
    user: Uuid,
}

impl StreamSlots {
    /// Takes a slot for `user`, or refuses with 429 when they hold [`STREAMS_PER_USER`] already.
    pub fn take(&self, user: &CurrentUser) -> Result<StreamSlot, AppError> {
        self.take_for(user.id)
    }

    /// Takes a slot for the user with id `user` (a follow forwarded from another node, whose
    /// grant names the user).
    pub fn take_for(&self, user: Uuid) -> Result<StreamSlot, AppError> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(user).or_default();
        if *n >= STREAMS_PER_USER {
            return Err(AppError::OverCap {
                message: format!(
                    "you already have {STREAMS_PER_USER} live streams open (log follows and live \
                     pages), the most one user may hold; close one"
                ),
                retry_after_s: 5,
            });
        }
        *n += 1;
        Ok(StreamSlot {
            open: Arc::clone(&self.open),
            user,
        })
    }

    /// Streams `user` holds now.
    pub fn held_by(&self, user: Uuid) -> usize {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(&user).copied().unwrap_or(0)
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.user) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.user);
            }
        }
    }
}
