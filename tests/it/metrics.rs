//! `/metrics` of a real `gpuq serve` running a real job on simulated cards: parsed with a
//! Prometheus text parser and checked against the ledger; the token refuses everyone else; the
//! Grafana dashboard names only metrics that exist.

use crate::support::specs::one_card_job;
use crate::support::{
    api_as_admin, database_url, free_port, post_job, start_server, Serve, TestApp,
};
use gpuq::model::Role;
use gpuq::server::runtime::ensure_sim_devices;
use prometheus_parse::{Scrape, Value as PromValue};
use serde_json::{json, Value};
use sqlx::PgPool;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const IMAGE: &str = "gpuq-test/busybox:latest";
const TOKEN: &str = "scrape-secret-7f3a";
const MIB: f64 = 1024.0 * 1024.0;

/// Scrapes `/metrics` with the token and parses it; panics on a status other than 200.
async fn scrape(client: &reqwest::Client, port: u16, token: Option<&str>) -> (String, Scrape) {
    let mut req = client.get(format!("http://127.0.0.1:{port}/metrics"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.unwrap();
    assert_eq!(r.status(), 200, "scrape refused");
    let ct = r.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    let text = r.text().await.unwrap();
    let parsed = Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("parses");
    (text, parsed)
}

fn gauge(s: &Scrape, metric: &str, label: &str, value: &str) -> Option<f64> {
    s.samples
        .iter()
        .find(|x| x.metric == metric && x.labels.get(label) == Some(value))
        .map(|x| match x.value {
            PromValue::Gauge(v) | PromValue::Untyped(v) => v,
            ref other => panic!("{metric} is not a gauge: {other:?}"),
        })
}

fn histogram_count(s: &Scrape, metric: &str) -> f64 {
    let sample = s.samples.iter().find(|x| x.metric == metric);
    match sample.map(|x| &x.value) {
        Some(PromValue::Histogram(buckets)) => buckets.last().map_or(0.0, |b| b.count),
        other => panic!("{metric} is not a histogram: {other:?}"),
    }
}

/// The ledger (committed MiB per card of `node`) and the job counts, as Postgres says now.
async fn ledger(pool: &PgPool, node: &str) -> (BTreeMap<String, f64>, BTreeMap<String, f64>) {
    let cards: Vec<(uuid::Uuid, i64)> =
        sqlx::query_as("SELECT uuid, reserved_mib FROM gpus WHERE node = $1")
            .bind(node)
            .fetch_all(pool)
            .await
            .unwrap();
    let jobs: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, count(*) FROM jobs GROUP BY status")
            .fetch_all(pool)
            .await
            .unwrap();
    (
        cards
            .into_iter()
            .map(|(u, mib)| (format!("GPU-{u}"), mib as f64 * MIB))
            .collect(),
        jobs.into_iter().map(|(s, n)| (s, n as f64)).collect(),
    )
}

/// The same figures as the scrape says them.
fn scraped(s: &Scrape, node: &str) -> (BTreeMap<String, f64>, BTreeMap<String, f64>) {
    let cards = s
        .samples
        .iter()
        .filter(|x| {
            x.metric == "gpuq_gpu_memory_committed_bytes" && x.labels.get("node") == Some(node)
        })
        .map(|x| {
            let gpu = x.labels.get("gpu").unwrap().to_owned();
            (gpu.clone(), gauge(s, &x.metric, "gpu", &gpu).unwrap())
        })
        .collect();
    let jobs = s
        .samples
        .iter()
        .filter(|x| x.metric == "gpuq_jobs")
        .filter_map(|x| {
            let status = x.labels.get("status").unwrap().to_owned();
            let n = gauge(s, "gpuq_jobs", "status", &status).unwrap();
            (n > 0.0).then_some((status, n))
        })
        .collect();
    (cards, jobs)
}

#[sqlx::test(migrations = false)]
async fn metrics_agree_with_the_ledger_while_a_job_runs(pool: PgPool) {
    let app = TestApp::new(pool).await;
    ensure_sim_devices(4).unwrap();
    let url = database_url(&app.pool);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let data = dir.path().to_str().unwrap().to_owned();
    // A node of its own, so no other run's containers are reconciled by this server.
    let node = format!("m{port}");
    let args = [
        "--runner",
        "true",
        "--data-dir",
        &data,
        "--node",
        &node,
        "--stop-grace-s",
        "1",
        "--metrics-token",
        TOKEN,
        "--metrics-refresh-ms",
        "100",
        "--gpu-refresh-s",
        "3600",
    ];
    let _server = start_server(&url, port, &dir.path().join("s.log"), &args).await;
    observe_used(&app.pool, &node, 3000).await;
    let (client, bearer) = api_as_admin(port).await;
    let long = |vram: u32| json!({ "image": IMAGE, "command": ["sh", "-c", "sleep 30"], "min_vram_mb": vram });
    let a = post_job(&client, port, &bearer, &long(7000)).await;
    let b = post_job(&client, port, &bearer, &long(5000)).await;
    // One more than fits on the four cards at once is not needed: a queued one shows in the counts.
    let huge = json!({ "image": IMAGE, "command": ["true"], "min_vram_mb": 24000, "gpu_count": 4 });
    let c = post_job(&client, port, &bearer, &huge).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let running: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM jobs WHERE status = 'running' AND id = ANY($1)",
        )
        .bind(vec![a, b])
        .fetch_one(&app.pool)
        .await
        .unwrap();
        if running == 2 {
            break;
        }
        if Instant::now() > deadline {
            let statuses: Vec<(String, Option<String>)> =
                sqlx::query_as("SELECT status, status_reason FROM jobs ORDER BY seq")
                    .fetch_all(&app.pool)
                    .await
                    .unwrap();
            let log = std::fs::read_to_string(dir.path().join("s.log")).unwrap_or_default();
            panic!("jobs never started: {statuses:?}\n{log}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let c_status: String = sqlx::query_scalar("SELECT status FROM jobs WHERE id = $1")
        .bind(c)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(
        c_status, "queued",
        "the 4-card job waits behind the two running ones"
    );

    // The snapshot is refreshed every 100 ms: the scrape agrees with the ledger within a deadline.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (text, s) = loop {
        let want = ledger(&app.pool, &node).await;
        let (text, s) = scrape(&client, port, Some(TOKEN)).await;
        let got = scraped(&s, &node);
        if got == want {
            break (text, s);
        }
        assert!(
            Instant::now() < deadline,
            "scrape never agreed with the ledger:\n ledger {want:?}\n scrape {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (cards, jobs) = scraped(&s, &node);
    assert_eq!(cards.len(), 4, "{cards:?}");
    let committed: f64 = cards.values().sum();
    assert_eq!(committed, 12000.0 * MIB, "7000 + 5000 MiB committed");
    assert_eq!(jobs.get("running"), Some(&2.0), "{jobs:?}");
    assert_eq!(jobs.get("queued"), Some(&1.0), "{jobs:?}");
    for gpu in cards.keys() {
        assert_eq!(
            gauge(&s, "gpuq_gpu_memory_total_bytes", "gpu", gpu),
            Some(24576.0 * MIB)
        );
        assert!(gauge(&s, "gpuq_gpu_memory_foreign_bytes", "gpu", gpu).is_some());
        assert_eq!(
            gauge(&s, "gpuq_gpu_memory_used_bytes", "gpu", gpu),
            Some(3000.0 * MIB)
        );
        let model = s
            .samples
            .iter()
            .find(|x| x.metric == "gpuq_gpu_memory_total_bytes" && x.labels.get("gpu") == Some(gpu))
            .and_then(|x| x.labels.get("model").map(str::to_owned));
        assert_eq!(model.as_deref(), Some("NVIDIA GeForce RTX 3090"));
    }
    assert_eq!(gauge(&s, "gpuq_node_up", "node", &node), Some(1.0));
    assert!(histogram_count(&s, "gpuq_admission_wait_seconds") >= 2.0);
    assert!(histogram_count(&s, "gpuq_admission_pass_seconds") >= 1.0);
    assert!(histogram_count(&s, "gpuq_container_start_seconds") >= 2.0);
    // The image collector's counters are served from the start, both reasons at 0 or more.
    for reason in ["unused", "disk"] {
        assert!(
            text.contains(&format!(
                "gpuq_images_removed_total{{reason=\"{reason}\"}} "
            )),
            "{text}"
        );
    }
    assert!(text.contains("gpuq_image_bytes_removed_total "), "{text}");
    for process in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
    ] {
        assert!(
            s.samples.iter().any(|x| x.metric == process),
            "{process} missing"
        );
    }
    // No personal data: neither the admin's name nor any job's command appears anywhere.
    assert!(
        !text.contains("admin") && !text.contains("sleep 30"),
        "{text}"
    );
    // Every label a metric carries is one of the few fixed ones (`reason`: the image
    // collector's, `unused` or `disk`).
    let allowed: BTreeSet<&str> = ["node", "gpu", "model", "status", "le", "reason"].into();
    for x in &s.samples {
        for (k, _) in x.labels.iter() {
            assert!(allowed.contains(k.as_str()), "label {k} on {}", x.metric);
        }
    }
    // Cancel the long jobs, and wait until they are: a server dropped before its runner stopped
    // them left their containers behind on the host's dockerd.
    for id in [a, b, c] {
        crate::support::cancel_and_wait(&app, &bearer, id).await;
    }
}

#[sqlx::test(migrations = false)]
async fn with_a_token_nobody_else_reads_metrics(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let serve = Serve::new(&app.pool, &["--metrics-token", TOKEN]);
    let _server = serve.start("s.log").await;
    let port = serve.port;
    let member = app.bearer("mallory", Role::Member).await;
    let (client, admin) = api_as_admin(port).await;
    let attempts: Vec<(&str, Option<String>)> = vec![
        ("no credentials", None),
        ("a member's API token", Some(member.clone())),
        ("an admin's API token", Some(admin)),
        ("a wrong token", Some("Bearer scrape-secret-7f3b".into())),
        ("a prefix of the token", Some("Bearer scrape-secret".into())),
        ("the token plus more", Some(format!("Bearer {TOKEN}x"))),
        ("the token without Bearer", Some(TOKEN.into())),
        ("the token as Basic", Some(format!("Basic {TOKEN}"))),
        ("an empty bearer", Some("Bearer ".into())),
    ];
    for (what, header) in attempts {
        let mut req = client.get(format!("http://127.0.0.1:{port}/metrics"));
        if let Some(h) = &header {
            req = req.header("authorization", h);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 401, "{what} was let in");
        let body = r.text().await.unwrap();
        assert!(!body.contains("gpuq_"), "{what}: {body}");
    }
    // A member's signed-in browser session is refused too.
    let cookie = app.login("mallory", crate::support::PASSWORD).await;
    let r = client
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "a member's session was let in");
    let (_, s) = scrape(&client, port, Some(TOKEN)).await;
    assert!(s.samples.iter().any(|x| x.metric == "gpuq_node_up"));
}

#[sqlx::test(migrations = false)]
async fn metrics_listen_moves_metrics_off_the_main_port(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let mport = free_port();
    let serve = Serve::new(
        &app.pool,
        &["--metrics-listen", &format!("127.0.0.1:{mport}")],
    );
    let _server = serve.start("s.log").await;
    let port = serve.port;
    let client = reqwest::Client::new();
    let main = client
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(main.status(), 404, "the main port still serves /metrics");
    let (_, s) = scrape(&client, mport, None).await;
    assert!(s.samples.iter().any(|x| x.metric == "gpuq_jobs"));
}

#[test]
fn an_empty_metrics_token_is_refused_at_start() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpuq"))
        .args(["serve", "--metrics-token", " ", "--listen", "127.0.0.1:1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--metrics-token"), "{err}");
}

/// Records `mib` used on every card of `node`, as an NVML inventory refresh would.
async fn observe_used(pool: &PgPool, node: &str, mib: i64) {
    sqlx::query("UPDATE gpus SET used_mib = $2 WHERE node = $1")
        .bind(node)
        .bind(mib)
        .execute(pool)
        .await
        .unwrap();
}

/// Every metric name in the dashboard's queries and variables.
fn dashboard_metrics() -> BTreeSet<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/packaging/grafana/gpuq.json");
    let dash: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut queries = Vec::new();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            queries.push(t["expr"].as_str().unwrap().to_owned());
        }
    }
    for v in dash["templating"]["list"].as_array().unwrap() {
        if v["type"] == "query" {
            queries.push(v["query"].as_str().unwrap().to_owned());
        }
    }
    let mut names = BTreeSet::new();
    for q in queries {
        let mut word = String::new();
        for ch in q.chars().chain([' ']) {
            if ch.is_ascii_alphanumeric() || ch == '_' {
                word.push(ch);
            } else {
                if word.starts_with("gpuq_") || word.starts_with("process_") {
                    names.insert(std::mem::take(&mut word));
                }
                word.clear();
            }
        }
    }
    names
}

#[sqlx::test(migrations = false)]
async fn the_dashboard_queries_only_metrics_that_exist(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let args = ["--gpu-refresh-s", "3600", "--metrics-refresh-ms", "100"];
    let serve = Serve::new(&app.pool, &args);
    let _server = serve.start("s.log").await;
    let port = serve.port;
    // Simulated cards observe no used memory (unknown, so the series is absent); stand in for an
    // NVML node's observation so every series the dashboard draws is there.
    observe_used(&app.pool, "shared", 1000).await;
    // And for the sampler's reading of an admitted job's own use on its card.
    let (_, member) = app.admin_and_member("alice").await;
    let job = app.submit_ok(&member, one_card_job("observed")).await;
    app.pass().await;
    sqlx::query(
        "INSERT INTO job_vram (job_id, gpu_uuid, committed_mib, used_mib, peak_mib, sampled_at) \
         SELECT job_id, gpu_uuid, vram_mib, vram_mib + 1, vram_mib + 1, now() \
         FROM reservations WHERE job_id = $1",
    )
    .bind(job)
    .execute(&app.pool)
    .await
    .unwrap();
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let (text, _) = scrape(&client, port, None).await;
        if text.contains("gpuq_gpu_memory_used_bytes{")
            && text.contains("gpuq_gpu_memory_jobs_used_bytes{")
        {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "used memory never showed: {text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Every sample name in the scrape, histogram series included.
    let present: BTreeSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let wanted = dashboard_metrics();
    assert!(wanted.len() >= 10, "{wanted:?}");
    let missing: Vec<&String> = wanted
        .iter()
        .filter(|m| !present.contains(m.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard names metrics /metrics lacks: {missing:?}"
    );
}
