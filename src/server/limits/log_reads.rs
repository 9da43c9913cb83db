//! How many log reads (whole logs and tails) one node serves at once, and one user may have.

use crate::model::AppError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

/// Log reads one user may have in progress at once, on one node.
pub const READS_PER_USER: usize = 4;
/// Log reads one node serves at once unless `--log-reads` says otherwise.
pub const DEFAULT_LOG_READS: usize = 16;
/// How long a read waits for a place when every place is taken, before it is refused.
const WAIT: Duration = Duration::from_secs(3);
/// The bound on log reads (whole logs and tails) in progress on this node: `size` at once, of
/// which [`READS_PER_USER`] per user, so one member cannot take every place.
#[derive(Clone, Debug)]
pub struct LogReads {
    places: Arc<Semaphore>,
    size: usize,
    per_user: Arc<Mutex<HashMap<Uuid, usize>>>,
}

/// A place under [`LogReads`], held for as long as the read streams; dropping it frees it.
#[derive(Debug)]
pub struct ReadPlace {
    _place: OwnedSemaphorePermit,
    _mine: UserPlace,
}

#[derive(Debug)]
struct UserPlace {
    per_user: Arc<Mutex<HashMap<Uuid, usize>>>,
    user: Uuid,
}

impl Drop for UserPlace {
    fn drop(&mut self) {
        let mut held = self.per_user.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.user) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.user);
            }
        }
    }
}

impl Default for LogReads {
    fn default() -> Self {
        LogReads::new(DEFAULT_LOG_READS)
    }
}

impl LogReads {
    /// A bound of `size` reads at once (at least one).
    pub fn new(size: usize) -> Self {
        let size = size.max(1);
        LogReads {
            places: Arc::new(Semaphore::new(size)),
            size,
            per_user: Arc::default(),
        }
    }

    /// A place for a read by `user`: refused at once (429) when they have [`READS_PER_USER`] in
    /// progress, and (503) when no place frees up within a few seconds.
    pub async fn enter(&self, user: Uuid) -> Result<ReadPlace, AppError> {
        let mine = {
            let mut held = self.per_user.lock().unwrap_or_else(|e| e.into_inner());
            let n = held.entry(user).or_default();
            if *n >= READS_PER_USER {
                return Err(AppError::OverCap {
                    message: format!(
                        "you already have {READS_PER_USER} log reads in progress, the most one \
                         user may have at once; wait for one to end"
                    ),
                    retry_after_s: 1,
                });
            }
            *n += 1;
            UserPlace {
                per_user: Arc::clone(&self.per_user),
                user,
            }
        };
        match tokio::time::timeout(WAIT, Arc::clone(&self.places).acquire_owned()).await {
            Ok(Ok(place)) => Ok(ReadPlace {
                _place: place,
                _mine: mine,
            }),
            Ok(Err(_)) => Err(AppError::Internal),
            Err(_) => Err(AppError::Busy {
                message: format!(
                    "this node is serving {} log reads, the most it serves at once",
                    self.size
                ),
                retry_after_s: 2,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_past_the_bounds_are_refused_until_places_free_up() {
        let reads = LogReads::new(2);
        let (alice, bob) = (Uuid::new_v4(), Uuid::new_v4());
        let per_user = LogReads::new(100);
        let mut held = Vec::new();
        for _ in 0..READS_PER_USER {
            held.push(per_user.enter(alice).await.unwrap());
        }
        let e = per_user.enter(alice).await.unwrap_err();
        assert_eq!((e.status(), e.retry_after_s()), (429, Some(1)), "{e}");
        assert!(
            per_user.enter(bob).await.is_ok(),
            "another user still reads"
        );
        held.pop();
        assert!(
            per_user.enter(alice).await.is_ok(),
            "a place freed is taken again"
        );

        let a = reads.enter(alice).await.unwrap();
        let _b = reads.enter(bob).await.unwrap();
        let e = reads.enter(Uuid::new_v4()).await.unwrap_err();
        assert_eq!((e.status(), e.retry_after_s()), (503, Some(2)), "{e}");
        drop(a);
        assert!(reads.enter(Uuid::new_v4()).await.is_ok());
    }
}
