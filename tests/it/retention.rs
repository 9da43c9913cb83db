//! Job logs do not fill the disk: finished jobs' logs go after `log_retention_days`, and past
//! `log_total_mib` the oldest finished jobs' go first. A running job's log is never removed.

use crate::support::{true_job, TestApp};
use gpuq::model::Role;
use gpuq::server::jobs::retention::{sweep, Swept};
use serde_json::json;
use sqlx::PgPool;

#[sqlx::test(migrations = false)]
async fn old_logs_go_then_the_oldest_past_the_size_cap(pool: PgPool) {
    let app = TestApp::with_one_card(pool.clone(), "logs").await;
    let admin = app.bearer("root", Role::Admin).await;
    let spec = true_job(1000);
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(app.submit_ok(&admin, spec.clone()).await);
    }
    // Ended 40, 20, 10 and 5 days ago; the last one still runs.
    for (id, days) in ids.iter().zip([40, 20, 10, 5]) {
        sqlx::query(
            "UPDATE jobs SET status = 'succeeded', finished_at = now() - make_interval(days => $2) \
             WHERE id = $1",
        )
        .bind(id)
        .bind(days)
        .execute(&pool)
        .await
        .unwrap();
    }
    sqlx::query("UPDATE jobs SET status = 'running', started_at = now() WHERE id = $1")
        .bind(ids[4])
        .execute(&pool)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mib = vec![b'x'; 1024 * 1024];
    for id in &ids {
        std::fs::write(dir.path().join(format!("{id}.log")), &mib).unwrap();
    }
    let stranger = dir.path().join("notes.txt");
    std::fs::write(&stranger, "not a job log").unwrap();
    let gone = |i: usize| !dir.path().join(format!("{}.log", ids[i])).exists();

    // Defaults: 30 days, a cap of a tenth of the disk and a quarter of that per user (far above
    // these 5 MiB). Only the 40-day-old log goes.
    let s = sweep(&pool, dir.path(), chrono::Utc::now()).await.unwrap();
    assert_eq!(
        s,
        Swept {
            expired: 1,
            over_cap: 0,
            over_quota: 0,
            bytes: 1024 * 1024
        }
    );
    assert!(gone(0) && !gone(1));

    // A 2 MiB cap on 4 MiB of logs: the two oldest finished go, the running job's stays. (One
    // user's share is set to the whole cap here; attacks::logs tests the share.)
    app.set_policy(
        &admin,
        json!({ "log_retention_days": 0, "log_total_mib": 2, "log_user_mib": 2 }),
    )
    .await;
    let s = sweep(&pool, dir.path(), chrono::Utc::now()).await.unwrap();
    assert_eq!(s.over_cap, 2, "{s:?}");
    assert!(gone(1) && gone(2) && !gone(3) && !gone(4));
    // Even a cap the running log alone exceeds leaves it be.
    std::fs::write(
        dir.path().join(format!("{}.log", ids[4])),
        vec![b'x'; 3 * 1024 * 1024],
    )
    .unwrap();
    app.set_policy(
        &admin,
        json!({ "log_total_mib": 1, "log_user_mib": 1, "log_retention_days": 0 }),
    )
    .await;
    sweep(&pool, dir.path(), chrono::Utc::now()).await.unwrap();
    assert!(gone(3) && !gone(4), "a running job's log is never removed");
    assert!(
        stranger.exists(),
        "files that are not job logs are left alone"
    );
}
