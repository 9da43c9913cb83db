//! Usage: the sampler and its retention, the report's figures against hand-computed ones, range
//! checks, the CSV exports and who may see any of it.

use crate::support::nvml::sim_source;
use crate::support::{true_job, TestApp, PASSWORD};
use chrono::{DateTime, Duration, TimeZone, Utc};
use gpuq::model::Role;
use gpuq::server::gpu::{observer, GpuInfo};
use gpuq::server::usage::{self, sampler, Sampling};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

const RTX: &str = "NVIDIA GeForce RTX 3090";

fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 1, 1, h, m, s).unwrap()
}

/// gpu_uuid, total, reserved, used, external, utilization.
type SampleCols = (Uuid, i64, i64, Option<i64>, Option<i64>, Option<i32>);

async fn count_samples(app: &TestApp) -> i64 {
    app.scalar("SELECT count(*) FROM gpu_samples").await
}

#[sqlx::test(migrations = false)]
async fn the_sampler_records_each_card_of_its_node_and_prunes_past_the_retention(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let cards = app.sim_cards(&format!("2x24576:{RTX}"), "node-s").await;
    app.sim_cards("1x81920:NVIDIA A100 80GB", "node-other")
        .await;
    let (admin, member) = app.admin_and_member("alice").await;
    app.submit_ok(&member, true_job(1000)).await;
    app.pass().await;
    let r = app
        .put(
            &format!("/api/v1/gpus/GPU-{}/sim", cards[1]),
            &admin,
            json!({ "external_mib": 512 }),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.text);

    // A simulated card: reserved from the ledger, foreign memory as set, no measured use.
    let snapshot = sim_source(&app.pool, &format!("2x24576:{RTX}"), "node-s")
        .read()
        .await;
    let now = Utc::now();
    let written = sampler::sample(&app.pool, "node-s", now, &snapshot)
        .await
        .unwrap();
    assert_eq!(written, 2, "one row per card of this node only");
    let rows: Vec<SampleCols> = sqlx::query_as(
        "SELECT gpu_uuid, total_mib, reserved_mib, used_mib, external_mib, utilization_pct \
         FROM gpu_samples ORDER BY reserved_mib DESC, gpu_uuid",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let reserved: i64 = rows.iter().map(|r| r.2).sum();
    assert_eq!(reserved, 1000, "{rows:?}");
    for r in &rows {
        assert_eq!(r.1, 24576);
        assert_eq!(r.3, None, "a simulated card's use is unknown, not 0");
        assert_eq!(r.5, None);
        let expected_external = if r.0 == cards[1] { 512 } else { 0 };
        assert_eq!(r.4, Some(expected_external), "{rows:?}");
    }

    // Readings a driver would give are stored as read.
    let reading = GpuInfo {
        uuid: cards[0],
        index: 0,
        model: RTX.into(),
        total_mib: 24576,
        used_mib: Some(3000),
        external_mib: Some(700),
        utilization_pct: Some(42),
        simulated: false,
    };
    let unknown = Uuid::new_v4();
    let stranger = GpuInfo {
        uuid: unknown,
        ..reading.clone()
    };
    let n = sampler::record(&app.pool, "node-s", now, &[reading, stranger])
        .await
        .unwrap();
    assert_eq!(
        n, 1,
        "a card the inventory sync has not registered is skipped"
    );
    let (used, busy): (Option<i64>, Option<i32>) = sqlx::query_as(
        "SELECT used_mib, utilization_pct FROM gpu_samples WHERE used_mib IS NOT NULL",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!((used, busy), (Some(3000), Some(42)));

    // Retention: samples older than the cut are deleted, newer ones stay.
    sqlx::query(
        "INSERT INTO gpu_samples (gpu_uuid, node, at, total_mib, reserved_mib) \
         VALUES ($1, 'node-s', $2, 24576, 0), ($1, 'node-s', $3, 24576, 0)",
    )
    .bind(cards[0])
    .bind(now - Duration::hours(721))
    .bind(now - Duration::hours(719))
    .execute(&app.pool)
    .await
    .unwrap();
    assert_eq!(count_samples(&app).await, 5);
    let pruned = sampler::prune(&app.pool, now - Duration::hours(720))
        .await
        .unwrap();
    assert_eq!(pruned, 1);
    assert_eq!(count_samples(&app).await, 4);
}

#[sqlx::test(migrations = false)]
async fn the_sampling_task_samples_until_stopped_and_records_its_settings(pool: PgPool) {
    let app = TestApp::new(pool).await;
    app.sim_cards(&format!("1x24576:{RTX}"), "node-t").await;
    let source = sim_source(&app.pool, &format!("1x24576:{RTX}"), "node-t");
    let (stop, rx) = tokio::sync::watch::channel(false);
    let sampling = Sampling {
        every: std::time::Duration::from_millis(50),
        retention: std::time::Duration::from_secs(48 * 3600),
    };
    let cards = observer::spawn(source, sampling.every).await;
    let task = tokio::spawn(sampler::run(
        app.pool.clone(),
        cards,
        "node-t".into(),
        sampling,
        rx,
    ));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while count_samples(&app).await < 3 {
        assert!(std::time::Instant::now() < deadline, "no samples written");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    stop.send(true).unwrap();
    task.await.unwrap();
    let recorded = usage::sampling(&app.pool).await.unwrap();
    assert_eq!(recorded.retention, sampling.retention);
    // The recorded retention bounds the ranges every process accepts.
    let manager = app.bearer("mia", Role::Manager).await;
    let r = app.get("/api/v1/usage?from=-49h", &manager).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["field"], "from");
    assert!(r.json()["error"].as_str().unwrap().contains("48 h"));
}

/// Sets a job's life times and status as if it had happened then.
async fn history(app: &TestApp, id: Uuid, status: &str, times: [Option<DateTime<Utc>>; 4]) {
    let [created, admitted, started, finished] = times;
    sqlx::query(
        "UPDATE jobs SET status = $2, created_at = $3, admitted_at = $4, started_at = $5, \
           finished_at = $6 WHERE id = $1",
    )
    .bind(id)
    .bind(status)
    .bind(created)
    .bind(admitted)
    .bind(started)
    .bind(finished)
    .execute(&app.pool)
    .await
    .unwrap();
}

/// Each total's key and job count, in the report's order.
fn jobs_by_key(totals: &[gpuq::model::UsageTotal]) -> Vec<(&str, i64)> {
    totals.iter().map(|t| (t.key.as_str(), t.jobs)).collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[sqlx::test(migrations = false)]
async fn the_report_matches_hand_computed_figures(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let cards = app.sim_cards(&format!("3x24576:{RTX}"), "node-r").await;
    let (admin, alice) = app.admin_and_member("alice").await;
    let bob = app.bearer("bob", Role::Member).await;
    app.workload(&admin, "train", json!({ RTX: 4096 })).await;
    let spec = |extra: serde_json::Value| {
        let mut s = json!({ "image": "gpuq-test/busybox:latest", "command": ["true"] });
        for (k, v) in extra.as_object().unwrap() {
            s[k] = v.clone();
        }
        s
    };
    let a = app
        .submit_ok(
            &alice,
            spec(json!({ "name": "job-a", "min_vram_mb": 1000 })),
        )
        .await;
    let b = app
        .submit_ok(&bob, spec(json!({ "workload": "train", "gpu_count": 2 })))
        .await;
    let c = app
        .submit_ok(&alice, spec(json!({ "min_vram_mb": 2048 })))
        .await;
    let e = app
        .submit_ok(&bob, spec(json!({ "min_vram_mb": 1000 })))
        .await;
    app.pass().await;
    let d = app
        .submit_ok(&alice, spec(json!({ "min_vram_mb": 1000 })))
        .await;
    // Range 10:00–12:00; "now" is 11:30.
    let t = |h, m, s| Some(at(h, m, s));
    for (id, status, times) in [
        (
            a,
            "succeeded",
            [t(9, 0, 0), t(9, 0, 30), t(9, 0, 30), t(10, 30, 0)],
        ),
        (b, "running", [t(10, 0, 0), t(10, 0, 5), t(11, 0, 0), None]),
        (
            c,
            "succeeded",
            [t(10, 0, 0), t(10, 20, 0), t(10, 20, 0), t(13, 0, 0)],
        ),
        (
            e,
            "succeeded",
            [t(8, 0, 0), t(8, 0, 0), t(8, 0, 0), t(9, 0, 0)],
        ),
        (d, "queued", [t(10, 0, 0), None, None, None]),
    ] {
        history(&app, id, status, times).await;
    }
    // Samples of one card: two in the first 15 s bucket, one in the next, two outside the range.
    for (t, reserved, used) in [
        (at(9, 59, 59), 9999, Some(9999)),
        (at(10, 0, 0), 1000, Some(1500)),
        (at(10, 0, 5), 2000, None),
        (at(10, 0, 20), 3000, Some(2500)),
        (at(12, 0, 0), 9999, Some(9999)),
    ] {
        sqlx::query(
            "INSERT INTO gpu_samples (gpu_uuid, node, at, total_mib, reserved_mib, used_mib) \
             VALUES ($1, 'node-r', $2, 24576, $3, $4)",
        )
        .bind(cards[0])
        .bind(t)
        .bind(reserved as i64)
        .bind(used.map(|u: i32| u as i64))
        .execute(&app.pool)
        .await
        .unwrap();
    }

    let report = usage::report(
        &app.pool,
        "2025-01-01T10:00:00Z",
        "2025-01-01T12:00",
        at(11, 30, 0),
    )
    .await
    .unwrap();
    assert_eq!(report.from, at(10, 0, 0));
    assert_eq!(report.to, at(12, 0, 0));

    // Cards: 7200 s / 500 points → 15 s buckets.
    assert_eq!(report.bucket_s, 15);
    assert_eq!(report.cards.len(), 1);
    let card = &report.cards[0];
    assert_eq!(card.uuid, format!("GPU-{}", cards[0]));
    assert_eq!(card.samples, 3);
    assert_eq!(
        (card.avg_reserved_mib, card.peak_reserved_mib),
        (2000, 3000)
    );
    assert_eq!(
        (card.avg_used_mib, card.peak_used_mib),
        (Some(2000), Some(2500))
    );
    assert_eq!(card.avg_external_mib, None, "never known, so unknown");
    let points: Vec<_> = card
        .points
        .iter()
        .map(|p| (p.at, p.reserved_mib, p.used_mib))
        .collect();
    assert_eq!(
        points,
        vec![
            (at(10, 0, 0), 1500, Some(1500)),
            (at(10, 0, 15), 3000, Some(2500))
        ]
    );

    // Waits of the jobs admitted in the range: b (5 s) and c (1200 s).
    let w = &report.wait;
    assert_eq!(w.jobs, 2);
    assert!(close(w.p50_s.unwrap(), 602.5), "{w:?}");
    assert!(close(w.p95_s.unwrap(), 5.0 + 0.95 * 1195.0), "{w:?}");
    assert!(close(w.max_s.unwrap(), 1200.0));
    let buckets: Vec<(&str, i64)> = w
        .buckets
        .iter()
        .map(|b| (b.label.as_str(), b.jobs))
        .collect();
    assert_eq!(
        buckets,
        vec![
            ("< 1 s", 0),
            ("< 10 s", 1),
            ("< 1 min", 0),
            ("< 10 min", 0),
            ("< 1 h", 1),
            ("≥ 1 h", 0)
        ]
    );

    // Run time in the range: a 10:00–10:30 on 1 card of 1000 MiB; c 10:20–12:00 on 1 card of
    // 2048 MiB; b 11:00–now (11:30) on 2 cards of 4096 MiB each; e ran before the range.
    let alice_gpu = 0.5 + 100.0 / 60.0;
    let alice_vram = 0.5 * 1000.0 / 1024.0 + 100.0 / 60.0 * 2.0;
    let users = jobs_by_key(&report.by_user);
    assert_eq!(users, vec![("alice", 2), ("bob", 1)]);
    assert!(
        close(report.by_user[0].gpu_hours, alice_gpu),
        "{:?}",
        report.by_user
    );
    assert!(
        close(report.by_user[0].vram_gib_hours, alice_vram),
        "{:?}",
        report.by_user
    );
    assert!(
        close(report.by_user[1].gpu_hours, 1.0),
        "{:?}",
        report.by_user
    );
    assert!(
        close(report.by_user[1].vram_gib_hours, 4.0),
        "{:?}",
        report.by_user
    );
    let workloads = jobs_by_key(&report.by_workload);
    assert_eq!(workloads, vec![("(custom VRAM)", 2), ("train", 1)]);
    assert!(close(report.by_workload[0].gpu_hours, alice_gpu));
    assert!(close(report.by_workload[1].vram_gib_hours, 4.0));

    // The per-job CSV carries the same figures, one row per job that ran in the range.
    let manager = app.bearer("mia", Role::Manager).await;
    let csv = app
        .get(
            "/api/v1/usage/jobs.csv?from=2025-01-01T10:00:00Z&to=2025-01-01T12:00:00Z",
            &manager,
        )
        .await;
    assert_eq!(csv.status, 200, "{}", csv.text);
    let lines: Vec<&str> = csv.text.lines().collect();
    assert_eq!(lines[0], usage::csv::JOBS_HEADER);
    assert_eq!(lines.len(), 4, "{}", csv.text);
    let row_a = lines
        .iter()
        .find(|l| l.starts_with(&a.to_string()))
        .unwrap();
    let cells: Vec<&str> = row_a.split(',').collect();
    assert_eq!(cells[2], "alice");
    assert_eq!(cells[3], "(custom VRAM)");
    assert_eq!(cells[11], "30.000", "wait seconds");
    assert_eq!(cells[13], "0.500000", "GPU-hours");
}

#[sqlx::test(migrations = false)]
async fn ranges_are_checked_and_name_their_field(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let manager = app.bearer("mia", Role::Manager).await;
    for (query, field) in [
        ("from=-1h&to=-2h", "from"),
        ("from=-1h&to=-1h", "from"),
        ("from=last+week", "from"),
        ("to=tomorrow", "to"),
        ("from=-31d", "from"),
        ("colour=red", "query"),
    ] {
        for path in [
            "/api/v1/usage",
            "/api/v1/usage/samples.csv",
            "/api/v1/usage/jobs.csv",
        ] {
            let r = app.get(&format!("{path}?{query}"), &manager).await;
            assert_eq!(r.status, 400, "{path}?{query}: {}", r.text);
            assert_eq!(r.json()["field"], field, "{path}?{query}: {}", r.text);
        }
    }
    let ok = app.get("/api/v1/usage?from=-30d", &manager).await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    assert_eq!(ok.json()["retention_h"], 720);
    assert_eq!(ok.json()["wait"]["buckets"].as_array().unwrap().len(), 6);
}

#[sqlx::test(migrations = false)]
async fn the_samples_csv_has_a_header_and_a_row_per_sample(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let cards = app.sim_cards(&format!("2x24576:{RTX}"), "node-c").await;
    let snapshot = sim_source(&app.pool, &format!("2x24576:{RTX}"), "node-c")
        .read()
        .await;
    let now = Utc::now();
    for back in [600, 300] {
        sampler::sample(
            &app.pool,
            "node-c",
            now - Duration::seconds(back),
            &snapshot,
        )
        .await
        .unwrap();
    }
    let manager = app.bearer("mia", Role::Manager).await;
    let r = app
        .get("/api/v1/usage/samples.csv?from=-1h", &manager)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/csv"));
    let disposition = r.headers["content-disposition"].to_str().unwrap();
    assert!(
        disposition.starts_with("attachment; filename=\"gpu-samples-")
            && disposition.ends_with(".csv\""),
        "{disposition}"
    );
    let lines: Vec<&str> = r.text.lines().collect();
    assert_eq!(lines[0], usage::csv::SAMPLES_HEADER);
    assert_eq!(lines.len(), 5, "{}", r.text);
    let first: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(first.len(), 10);
    assert_eq!(first[1], "node-c");
    assert_eq!(first[2], format!("GPU-{}", cards[0]));
    assert_eq!(first[4], RTX);
    assert_eq!(first[5], "24576");
    assert_eq!(first[7], "", "unknown use is an empty cell");
    assert_eq!(first[8], "0");
    // A range before the samples has the header only.
    let empty = app
        .get("/api/v1/usage/samples.csv?from=-3h&to=-2h", &manager)
        .await;
    assert_eq!(empty.text, format!("{}\n", usage::csv::SAMPLES_HEADER));
}

#[sqlx::test(migrations = false)]
async fn managers_and_admins_see_usage_and_members_are_refused(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let (member, manager, admin) = app.member_manager_admin("alice").await;
    for path in [
        "/api/v1/usage",
        "/api/v1/usage/samples.csv",
        "/api/v1/usage/jobs.csv",
    ] {
        assert_eq!(app.api("GET", path, None, None).await.status, 401, "{path}");
        let refused = app.get(path, &member).await;
        assert_eq!(refused.status, 403, "{path}");
        assert_eq!(refused.json()["kind"], "forbidden");
        assert_eq!(app.get(path, &manager).await.status, 200, "{path}");
        assert_eq!(app.get(path, &admin).await.status, 200, "{path}");
    }

    // The page's server function: the same rule.
    let member_cookie = app.login("alice", PASSWORD).await;
    let refused = app
        .server_fn("usage_report", "from=-1h&to=", Some(&member_cookie), &[])
        .await;
    assert!(refused.text.contains("forbidden"), "{}", refused.text);
    let manager_cookie = app.login("mia", PASSWORD).await;
    let ok = app
        .server_fn("usage_report", "from=-1h&to=", Some(&manager_cookie), &[])
        .await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    let view = ok.json();
    assert!(view["report"]["wait"]["buckets"].is_array(), "{view}");
    let wait_chart: serde_json::Value =
        serde_json::from_str(view["charts"]["wait"].as_str().unwrap()).unwrap();
    assert_eq!(wait_chart["series"][0]["type"], "bar");
    let bad = app
        .server_fn("usage_report", "from=soon&to=", Some(&manager_cookie), &[])
        .await;
    assert!(bad.text.contains("\"from\""), "{}", bad.text);

    // The page itself: members get the explanation, managers the charts.
    let page = app.page("/usage", Some(&member_cookie)).await;
    assert_eq!(page.status, 200);
    assert!(
        page.text.contains("managers and admins only"),
        "{}",
        page.text
    );
    let page = app.page("/usage", Some(&manager_cookie)).await;
    assert_eq!(page.status, 200);
    assert!(page.text.contains("data-chart-option"), "{}", page.text);
    assert!(page.text.contains("id=\"usage-waits\""), "{}", page.text);
}
