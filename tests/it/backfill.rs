//! Backfill against real Postgres: the pass reads the running jobs' deadlines and the queued
//! jobs' timeouts, keeps the head's card, lets a short job start before it and holds a long one
//! back; with the policy's `backfill` off, the old skip-and-continue.

use crate::support::{ledger_violations, pass_config, TestApp};
use chrono::Utc;
use gpuq::server::admission::pass;
use gpuq::server::admission::planner::WaitReason;
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

const RTX: &str = "NVIDIA GeForce RTX 3090";

fn job(mib: u32, timeout_s: u32) -> Value {
    json!({ "image": "gpuq-test/busybox:latest", "command": ["sleep", "1"],
            "min_vram_mb": mib, "timeout_s": timeout_s })
}

/// One 3090 (24576 MiB), 16000 of it held by a job that started 5 minutes ago with a one-hour
/// deadline; queued behind it: the head (20000 MiB), a short job (2000 MiB, 60 s) and a long one
/// (6000 MiB, 2 h: it fits now, but runs past the head's start and leaves less than the 4576 MiB
/// beside it).
async fn queue(app: &TestApp) -> (String, Uuid, Uuid, Uuid) {
    app.sim_cards(&format!("1x24576:{RTX}"), "node-a").await;
    let (admin, alice) = app.admin_and_member("alice").await;
    let running = app.submit_ok(&admin, job(16000, 3600)).await;
    assert_eq!(app.pass().await.admitted, 1);
    app.exec_with(
        "UPDATE jobs SET status = 'running', started_at = now() - interval '5 minutes' WHERE id = $1",
        running,
    )
    .await;
    let head = app.submit_ok(&alice, job(20000, 3600)).await;
    let short = app.submit_ok(&alice, job(2000, 60)).await;
    let long = app.submit_ok(&alice, job(6000, 7200)).await;
    (admin, head, short, long)
}

#[sqlx::test(migrations = false)]
async fn a_short_job_backfills_and_a_long_one_waits_for_the_head(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let (admin, head, short, long) = queue(&app).await;
    let (_, plan) = pass::dry_run(&app.pool, &pass_config(), Utc::now())
        .await
        .unwrap();
    let kept = plan.reserved.first().expect("the head's card is kept");
    assert_eq!(kept.head, head);
    // The running job's deadline is 55 minutes away, plus the 30 s slack.
    let in_s = (kept.start_ms - Utc::now().timestamp_millis()) / 1000;
    assert!((55 * 60..=56 * 60).contains(&in_s), "{in_s} s");
    let reason = plan
        .waiting
        .iter()
        .find(|w| w.job_id == long)
        .map(|w| w.reason.clone());
    assert!(
        matches!(reason, Some(WaitReason::ReservedForHead { head: h, .. }) if h == head),
        "{reason:?}"
    );

    app.pass().await;
    assert_eq!(app.job(&admin, short).await["status"], "admitted");
    for id in [head, long] {
        assert_eq!(app.job(&admin, id).await["status"], "queued");
    }
    let words = app.job(&admin, long).await["wait_reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        words.contains(&format!("kept for job {head}"))
            && (words.contains("a job with a timeout of at most 54m could start now")
                || words.contains("a job with a timeout of at most 55m could start now")),
        "{words}"
    );
    assert!(ledger_violations(&app.pool).await.is_empty());
}

#[sqlx::test(migrations = false)]
async fn with_backfill_off_a_later_job_takes_any_card_it_fits_on(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let (admin, head, short, long) = queue(&app).await;
    app.set_policy(&admin, json!({ "backfill": false })).await;
    assert_eq!(app.pass().await.admitted, 2);
    assert_eq!(app.job(&admin, short).await["status"], "admitted");
    assert_eq!(app.job(&admin, long).await["status"], "admitted");
    assert_eq!(app.job(&admin, head).await["status"], "queued");
    let (_, plan) = pass::dry_run(&app.pool, &pass_config(), Utc::now())
        .await
        .unwrap();
    assert!(plan.reserved.is_empty());
}
