//! GPU-hours charged to users against real Postgres: an ended run is folded into UTC-day buckets
//! once, split at midnight, by the share of each card it held; a running job is charged up to
//! the moment asked; the decayed figure weighs each hour by its age.

use crate::support::TestApp;
use chrono::{DateTime, TimeZone, Utc};
use gpuq::model::{JobStatus, Role};
use gpuq::server::db::{gpu_hours, lifecycle};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

fn at(d: u32, h: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, d, h, 0, 0).unwrap()
}

async fn card(pool: &PgPool, idx: i32) -> Uuid {
    let uuid = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO gpus (uuid, node, idx, model, total_mib) VALUES ($1, 'gh', $2, 'M', 24000)",
    )
    .bind(uuid)
    .bind(idx)
    .execute(pool)
    .await
    .unwrap();
    uuid
}

/// A job of `owner` holding `mib` of `card` (or the whole card), started at `start`.
async fn run(
    pool: &PgPool,
    owner: Uuid,
    card: Uuid,
    mib: i64,
    exclusive: bool,
    start: DateTime<Utc>,
) -> Uuid {
    let new = lifecycle::NewJob {
        owner_id: owner,
        name: "charged",
        spec: json!({}),
        image: "gpuq-test/busybox:latest",
        command: &[],
        gpu_count: 1,
        workload: None,
        min_vram_mib: Some(mib),
        exclusive,
        priority: 0,
        timeout_s: 60,
        status: JobStatus::Queued,
        status_reason: None,
    };
    let id = lifecycle::enter(pool, &new).await.unwrap();
    sqlx::query(
        "INSERT INTO reservations (job_id, gpu_uuid, vram_mib, exclusive, created_at) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(id)
    .bind(card)
    .bind(mib)
    .bind(exclusive)
    .bind(start)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("UPDATE jobs SET status = 'running', started_at = $2 WHERE id = $1")
        .bind(id)
        .bind(start)
        .execute(pool)
        .await
        .unwrap();
    id
}

async fn end(pool: &PgPool, job: Uuid, at: DateTime<Utc>) {
    for stmt in [
        "UPDATE reservations SET released_at = $2 WHERE job_id = $1",
        "UPDATE jobs SET status = 'succeeded', finished_at = $2, released_at = $2 WHERE id = $1",
    ] {
        sqlx::query(stmt)
            .bind(job)
            .bind(at)
            .execute(pool)
            .await
            .unwrap_or_else(|e| panic!("ending {job}: {e}"));
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[sqlx::test(migrations = false)]
async fn runs_are_charged_by_card_share_split_by_day_and_decayed_by_age(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let pool = app.pool.clone();
    let alice = app.add_user("alice", Role::Member).await;
    let bob = app.add_user("bob", Role::Member).await;
    let carol = app.add_user("carol", Role::Member).await;
    let (c0, c1) = (card(&pool, 0).await, card(&pool, 1).await);

    // Half a card from 22:00 to 02:00: one GPU-hour on each side of midnight.
    let a = run(&pool, alice, c0, 12000, false, at(5, 22)).await;
    end(&pool, a, at(6, 2)).await;
    let days: Vec<(chrono::NaiveDate, f64)> = sqlx::query_as(
        "SELECT day, gpu_hours FROM gpu_hours_daily WHERE user_id = $1 ORDER BY day",
    )
    .bind(alice)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(days.len(), 2, "{days:?}");
    assert!(close(days[0].1, 1.0) && close(days[1].1, 1.0), "{days:?}");
    // Ending it again (a stale writer) charges nothing more.
    sqlx::query("UPDATE jobs SET finished_at = $2 WHERE id = $1")
        .bind(a)
        .bind(at(6, 3))
        .execute(&pool)
        .await
        .unwrap();
    // The whole card, running since 10:00; a job that never started is never charged.
    let _b = run(&pool, bob, c1, 24000, true, at(6, 10)).await;
    let never = run(&pool, carol, c1, 0, false, at(6, 11)).await;
    sqlx::query("UPDATE jobs SET started_at = NULL WHERE id = $1")
        .bind(never)
        .execute(&pool)
        .await
        .unwrap();
    end(&pool, never, at(6, 11)).await;

    let now = at(6, 12);
    let today = gpu_hours::since(&pool, at(6, 0), now).await.unwrap();
    assert!(close(today[&alice], 1.0), "{today:?}");
    assert!(close(today[&bob], 2.0), "{today:?}");
    assert!(!today.contains_key(&carol), "{today:?}");
    let two_days = gpu_hours::since(&pool, at(5, 0), now).await.unwrap();
    assert!(close(two_days[&alice], 2.0), "{two_days:?}");

    let h = 24.0_f64;
    let decayed = gpu_hours::decayed(&pool, now, h).await.unwrap();
    // Alice's hours are centred on 23:00 and 01:00: 13 and 11 hours old.
    let want_alice = 2f64.powf(-13.0 / h) + 2f64.powf(-11.0 / h);
    assert!(
        close(decayed[&alice], want_alice),
        "{decayed:?} vs {want_alice}"
    );
    // Bob's two running hours, each weighed by its age.
    let want_bob = h / 2f64.ln() * (1.0 - 2f64.powf(-2.0 / h));
    assert!(close(decayed[&bob], want_bob), "{decayed:?} vs {want_bob}");
    assert!(decayed[&bob] < 2.0 && decayed[&bob] > 1.9);
    // Long after, nothing underflows: the old hours count (almost) nothing.
    let later = gpu_hours::decayed(&pool, at(6, 12) + chrono::Duration::days(3000), 1.0)
        .await
        .unwrap();
    assert!(
        later.get(&alice).copied().unwrap_or(0.0) < 1e-9,
        "{later:?}"
    );
}
