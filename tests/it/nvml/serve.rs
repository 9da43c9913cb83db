//! The inventory kept in the database while the driver comes and goes, and `gpuq serve` on the
//! fake NVML.

use super::{two_cards, A, A100, B, L4};
use crate::support::nvml::FakeNvml;
use crate::support::{
    api_as_admin, database_url, free_port, json_of, rows, start_server, text, TestApp,
};
use gpuq::model::Role;
use gpuq::server::gpu;
use serde_json::Value;
use sqlx::PgPool;
use std::time::{Duration, Instant};

/// Cards by uuid → (state, used_mib), as `GET /api/v1/gpus` shows them.
async fn cards_shown(app: &TestApp, bearer: &str) -> Vec<(String, String, Option<i64>)> {
    let gpus = app
        .api("GET", "/api/v1/gpus", Some(bearer), None)
        .await
        .json();
    rows(&gpus["gpus"], |g| {
        (text(g, "uuid"), text(g, "state"), g["used_mib"].as_i64())
    })
}

#[sqlx::test(migrations = false)]
async fn the_driver_vanishing_mid_run_leaves_gpuq_running_and_it_recovers(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let admin = app.bearer("root", Role::Admin).await;
    let fake = FakeNvml::new(&two_cards());
    let cards = fake.observe(&app.pool, "fake-node").await;
    let refresh = || {
        let (pool, cards) = (&app.pool, &cards);
        async move { gpu::sync::refresh(pool, "fake-node", &cards.fresh().await.unwrap()).await }
    };
    assert!(refresh().await.unwrap());
    let online = |used_a: i64, used_b: i64| {
        vec![
            (format!("GPU-{A}"), "online".to_owned(), Some(used_a)),
            (format!("GPU-{B}"), "online".to_owned(), Some(used_b)),
        ]
    };
    let mut shown = cards_shown(&app, &admin).await;
    shown.sort();
    assert_eq!(shown, online(1024, 0));

    // One card falls off the bus: it is shown missing, the other stays.
    fake.set(&format!("{}fail * GPU_IS_LOST gpu=0\n", two_cards()));
    refresh().await.unwrap();
    let mut shown = cards_shown(&app, &admin).await;
    shown.sort();
    assert_eq!(shown[0].1, "missing", "{shown:?}");
    assert_eq!(shown[1].1, "online", "{shown:?}");

    // The whole driver goes away: the refresh fails and says so, and no card is offered any more
    // (none can be vouched for): both are shown missing.
    fake.vanish();
    let e = refresh().await.unwrap_err();
    let why = format!("{e:#}");
    assert!(why.contains("NVIDIA driver is not loaded"), "{why}");
    let shown = cards_shown(&app, &admin).await;
    assert!(shown.iter().all(|c| c.1 == "missing"), "{shown:?}");
    let offered: i64 = app
        .scalar("SELECT count(*) FROM gpus WHERE node = 'fake-node' AND present")
        .await;
    assert_eq!(offered, 0);
    // It comes back with new figures: the same loaded library sees them; both cards are back.
    fake.set(&two_cards().replace("used_mib=1024", "used_mib=5000"));
    assert!(refresh().await.unwrap());
    let mut shown = cards_shown(&app, &admin).await;
    shown.sort();
    assert_eq!(shown, online(5000, 0));
}

/// Polls `GET /api/v1/gpus` until `check` holds for the answer (10 s at most).
async fn wait_for_cards(
    client: &reqwest::Client,
    port: u16,
    bearer: &str,
    what: &str,
    check: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let url = format!("http://127.0.0.1:{port}/api/v1/gpus");
        let r = json_of(client.get(url).header("authorization", bearer)).await;
        let cards = r["gpus"].as_array().cloned().unwrap_or_default();
        if check(&cards) {
            return cards;
        }
        assert!(Instant::now() < deadline, "{what}: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[sqlx::test(migrations = false)]
async fn gpuq_serve_runs_on_the_fake_nvml_end_to_end(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let url = database_url(&app.pool);
    let fake = FakeNvml::new(&two_cards());
    let port = free_port();
    let log = fake.dir().join("server.log");
    let lib = fake.lib().display().to_string();
    let mut server = start_server(
        &url,
        port,
        &log,
        &[
            "--gpu-source",
            "nvml",
            "--nvml-lib",
            &lib,
            "--gpu-refresh-s",
            "1",
        ],
    )
    .await;
    let (client, bearer) = api_as_admin(port).await;
    let cards = wait_for_cards(&client, port, &bearer, "the fake's cards", |c| c.len() == 2).await;
    let mut seen: Vec<(String, String, i64, Option<i64>, bool)> = cards
        .iter()
        .map(|g| {
            (
                text(g, "uuid"),
                text(g, "model"),
                g["total_mib"].as_i64().unwrap(),
                g["used_mib"].as_i64(),
                g["simulated"].as_bool().unwrap(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            (format!("GPU-{A}"), A100.into(), 81920, Some(1024), false),
            (format!("GPU-{B}"), L4.into(), 23034, Some(0), false),
        ]
    );

    // Rewritten while gpuq runs: the next refresh shows it.
    fake.set(&two_cards().replace("used_mib=1024", "used_mib=2048"));
    wait_for_cards(&client, port, &bearer, "new used memory", |c| {
        c.iter().any(|g| g["used_mib"] == 2048)
    })
    .await;

    // A malformed state: the fake names the file and line in gpuq's log; gpuq keeps serving.
    fake.set("gpu GPU-x \"X\" total_mib=oops\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains(":1: gpu: total_mib=oops is not key=number")
    {
        assert!(
            Instant::now() < deadline,
            "{}",
            std::fs::read_to_string(&log).unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The driver vanishes: gpuq keeps running and answering; it recovers when the driver is back.
    fake.vanish();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(server.0.try_wait().unwrap().is_none(), "gpuq exited");
    wait_for_cards(&client, port, &bearer, "still answering", |c| c.len() == 2).await;
    fake.set(&two_cards().replace("used_mib=1024", "used_mib=3000"));
    wait_for_cards(
        &client,
        port,
        &bearer,
        "back after the driver returned",
        |c| c.iter().any(|g| g["used_mib"] == 3000),
    )
    .await;
    assert!(server.0.try_wait().unwrap().is_none(), "gpuq exited");
}

#[sqlx::test(migrations = false)]
async fn a_wrong_nvml_lib_path_stops_serve_with_the_path_named(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let url = database_url(&app.pool);
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-libnvidia-ml.so.1");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpuq"))
        .args(["serve", "--listen", &format!("127.0.0.1:{}", free_port())])
        .args([
            "--database-url",
            &url,
            "--gpu-source",
            "nvml",
            "--runner",
            "false",
        ])
        .arg("--nvml-lib")
        .arg(&missing)
        .env("GPUQ_BOOTSTRAP_ADMIN_PASSWORD", crate::support::PASSWORD)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
    assert!(stderr.contains("--nvml-lib"), "{stderr}");
}

#[sqlx::test(migrations = false)]
async fn mig_devices_are_listed_as_not_scheduled_and_never_offered(pool: PgPool) {
    let app = TestApp::new(pool).await;
    let member = app.bearer("mia", Role::Member).await;
    let fake = FakeNvml::new(&format!(
        "gpu GPU-{A} \"{A100}\" total_mib=81920 mig=1\n\
         gpu MIG-{B} \"{A100} MIG 3g.40gb\" total_mib=40192\n"
    ));
    let cards = fake.observe(&app.pool, "mig-node").await;
    gpu::sync::refresh(&app.pool, "mig-node", &cards.latest())
        .await
        .unwrap();
    let list = app.api("GET", "/api/v1/gpus", Some(&member), None).await;
    assert_eq!(list.status, 200, "{}", list.text);
    let v = list.json();
    assert_eq!(v["gpus"], serde_json::json!([]), "nothing is offered: {v}");
    let skipped = v["skipped"].as_array().unwrap();
    let ids: Vec<&str> = skipped.iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![format!("GPU-{A}"), format!("MIG-{B}")]);
    assert_eq!(skipped[0]["node"], "mig-node");
    assert!(
        skipped[0]["reason"]
            .as_str()
            .unwrap()
            .contains("MIG mode enabled"),
        "{v}"
    );
    assert!(
        skipped[1]["reason"]
            .as_str()
            .unwrap()
            .contains("MIG device"),
        "{v}"
    );
    // A job cannot land on them.
    let r = app
        .submit(
            &member,
            serde_json::json!({ "image": "gpuq-test/busybox:latest", "command": ["true"], "min_vram_mb": 1000 }),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    // No card is offered, so no card count is possible.
    assert_eq!(r.json()["field"], "gpu_count", "{}", r.text);
    app.pass().await;
    let reserved: i64 = app.scalar("SELECT count(*) FROM reservations").await;
    assert_eq!(reserved, 0);
    // MIG turned off: the card is offered and the list empties.
    fake.set(&format!("gpu GPU-{A} \"{A100}\" total_mib=81920 mig=0\n"));
    assert!(
        gpu::sync::refresh(&app.pool, "mig-node", &cards.fresh().await.unwrap())
            .await
            .unwrap()
    );
    let v = app
        .api("GET", "/api/v1/gpus", Some(&member), None)
        .await
        .json();
    assert_eq!(v["gpus"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["skipped"], serde_json::json!([]));
}
