//! The scheduler loop: a pass whenever someone asks for one (`gpuq_wake`), after notifications may
//! have been missed, and on the process's backstop timer.

use super::pass::{run_pass, PassConfig};
use crate::server::notifier::{Note, Subscription};
use sqlx::PgPool;
use tokio::sync::watch;

/// Runs a pass at once, then one per wake-up, until `stop` turns true. Errors are logged and retried at the next note: while the
/// database is unreachable nothing is admitted and nothing is freed.
pub async fn run(
    pool: PgPool,
    cfg: PassConfig,
    mut notes: Subscription,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        // Several pokes may be queued: one pass serves them all.
        notes.skip_queued();
        match run_pass(&pool, &cfg, chrono::Utc::now()).await {
            Ok(o) if o.admitted > 0 || o.reclaimed > 0 => tracing::info!(
                admitted = o.admitted,
                reclaimed = o.reclaimed,
                waiting = o.waiting,
                plan_us = o.plan_time.as_micros() as u64,
                pass_ms = o.total_time.as_millis() as u64,
                "admission pass"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = format!("{e:#}"), "admission pass failed"),
        }
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                note = notes.recv() => match note {
                    Note::Wake | Note::Missed | Note::Backstop => break,
                    Note::Event(_) => {}
                },
            }
        }
    }
}
