//! The launch policy as this runner last read it, used again for as long as the notifier's policy
//! epoch says nothing can have changed it ([`Notifier::policy_epoch`]): a launch reads no settings
//! row unless the policy changed, notes may have been missed, or the backstop ticked since the
//! last read. A change is heard before the note that admitted or woke anything after it, so the
//! next launch after a change uses the new policy.

use crate::model::LaunchPolicy;
use crate::server::db::settings;
use crate::server::notifier::Notifier;
use sqlx::PgPool;
use std::sync::{Arc, Mutex};

/// The policy last read and the epoch it was read in.
#[derive(Debug, Default)]
pub(super) struct PolicyCache {
    kept: Mutex<Option<(u64, Arc<LaunchPolicy>)>>,
}

impl PolicyCache {
    /// The launch policy now: the one kept if the epoch has not moved since it was read, else
    /// read again (and kept, while the notifier listens).
    pub(super) async fn get(
        &self,
        pool: &PgPool,
        notifier: &Notifier,
    ) -> sqlx::Result<Arc<LaunchPolicy>> {
        // Taken before the read: a change during the read moves the epoch past the one kept.
        let epoch = notifier.policy_epoch();
        if let Some(now) = epoch {
            let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((at, policy)) = kept.as_ref() {
                if *at == now {
                    return Ok(Arc::clone(policy));
                }
            }
        }
        let policy = Arc::new(settings::launch_policy(pool).await?);
        if let Some(now) = epoch {
            let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
            *kept = Some((now, Arc::clone(&policy)));
        }
        Ok(policy)
    }
}
