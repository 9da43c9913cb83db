//! The scheduler loop: a pass whenever something pokes `gpuq_wake`, and on a timer as a backstop.

use super::pass::{run_pass, PassConfig};
use crate::server::db::events::WAKE_CHANNEL;
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use std::time::Duration;
use tokio::sync::watch;

/// Runs passes until `stop` turns true. Errors are logged and retried at the next tick: while the
/// database is unreachable nothing is admitted and nothing is freed.
pub async fn run(pool: PgPool, cfg: PassConfig, tick: Duration, mut stop: watch::Receiver<bool>) {
    let mut listener = connect(&pool).await;
    let mut timer = tokio::time::interval(tick);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = timer.tick() => {
                if listener.is_none() {
                    listener = connect(&pool).await;
                }
            }
            note = recv(&mut listener) => {
                if let Err(e) = note {
                    tracing::warn!(error = %e, "LISTEN connection lost; reconnecting");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    listener = connect(&pool).await;
                }
                // Several pokes may be queued: one pass serves them all.
                if let Some(l) = listener.as_mut() {
                    while l.next_buffered().is_some() {}
                }
            }
        }
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
    }
}

async fn connect(pool: &PgPool) -> Option<PgListener> {
    match crate::server::db::events::listener(pool, WAKE_CHANNEL).await {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::warn!(error = %e, "cannot LISTEN; passes run on the timer only");
            None
        }
    }
}

async fn recv(listener: &mut Option<PgListener>) -> Result<(), sqlx::Error> {
    match listener {
        Some(l) => l.recv().await.map(|_| ()),
        None => std::future::pending().await,
    }
}
