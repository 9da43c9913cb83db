//! Live events for browsers: one LISTEN connection per process forwards every `gpuq_events`
//! notification (from any gpuq process on the database) to the SSE streams of this process.

use crate::server::db::events::EVENTS_CHANNEL;
use sqlx::PgPool;
use std::time::Duration;
use tokio::sync::{broadcast, watch};

/// Payload sent to every stream after the listener reconnected: what happened meanwhile is unknown,
/// so pages should refetch.
pub const RESYNC: &str = r#"{"kind":"resync"}"#;

/// A channel of notification payloads (JSON text), fed by [`forward`].
pub fn channel() -> broadcast::Sender<String> {
    broadcast::channel(1024).0
}

/// Forwards notifications until `stop` turns true, reconnecting after a lost connection.
pub async fn forward(pool: PgPool, tx: broadcast::Sender<String>, mut stop: watch::Receiver<bool>) {
    let mut first = true;
    loop {
        let listener = crate::server::db::events::listener(&pool, EVENTS_CHANNEL);
        let mut listener = tokio::select! {
            _ = stop.changed() => return,
            l = listener => match l {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(error = %e, "live events: cannot LISTEN; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
        };
        if !first {
            let _ = tx.send(RESYNC.to_owned());
        }
        first = false;
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                note = listener.recv() => match note {
                    // No receivers is fine: nobody is watching right now.
                    Ok(n) => { let _ = tx.send(n.payload().to_owned()); }
                    Err(e) => {
                        tracing::warn!(error = %e, "live events: LISTEN connection lost; reconnecting");
                        break;
                    }
                },
            }
        }
    }
}
