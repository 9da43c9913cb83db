//! The loop of a background task that works on a timer: now, then every period, until stopped.

use std::future::Future;
use std::time::Duration;
use tokio::sync::watch;

/// Runs `tick` now and then every `period` until `stop` turns true. A tick that overruns the period
/// delays the next one instead of bunching them up.
pub async fn every<F, Fut>(period: Duration, mut stop: watch::Receiver<bool>, mut tick: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut timer = tokio::time::interval(period);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = timer.tick() => tick().await,
        }
    }
}
