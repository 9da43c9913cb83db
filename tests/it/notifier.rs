//! One LISTEN connection per process, fanned out: a cancellation and a followed log wake on
//! notifications (shown with a backstop timer too slow to explain them), a lost connection makes
//! every subscriber refetch, and a whole `gpuq serve` holds exactly one LISTEN connection.

use crate::support::{get_with, json_of, wait_status, Node, Serve, TestApp};
use gpuq::model::Role;
use gpuq::server::runtime::{ensure_sim_devices, LaunchMode};
use serde_json::json;
use sqlx::PgPool;
use std::time::{Duration, Instant};

/// Longer than any wait below: whatever happens within it was woken by a notification.
const SLOW_BACKSTOP: Duration = Duration::from_secs(120);

async fn listen_connections(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND query ILIKE 'LISTEN%'",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn until_listening(pool: &PgPool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while listen_connections(pool).await == 0 {
        assert!(Instant::now() < deadline, "nothing ever LISTENed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn slow_node(pool: PgPool, node: &str) -> (TestApp, Node, String) {
    let app = TestApp::with_backstop(pool, SLOW_BACKSTOP).await;
    ensure_sim_devices(1).unwrap();
    app.sim_cards("1x24576:NVIDIA GeForce RTX 3090", node).await;
    let member = app.bearer("alice", Role::Member).await;
    let node = Node::start(&app, node, LaunchMode::Fenced).await;
    until_listening(&app.pool).await;
    (app, node, member)
}

fn sh(script: &str) -> serde_json::Value {
    json!({ "image": "gpuq-test/busybox:latest", "command": ["sh", "-c", script],
            "min_vram_mb": 1000 })
}

#[sqlx::test(migrations = false)]
async fn one_gpuq_serve_holds_one_listen_connection(pool: PgPool) {
    let app = TestApp::with_sim_devices(pool, 4).await;
    // Everything that listens is on: scheduler, runner, live pages, log follows.
    let serve = Serve::runner(&app.pool, "one-listen", &[]);
    let _server = serve.start("s.log").await;
    let port = serve.port;
    until_listening(&app.pool).await;
    let client = reqwest::Client::new();
    let (_, bearer) = crate::support::api_as_admin(port).await;
    // A live stream open and a job run to its end: still one connection.
    let events_url = format!("http://127.0.0.1:{port}/api/v1/events");
    let mut events = get_with(&client, &events_url, &bearer).await;
    assert_eq!(events.status(), 200);
    let id = crate::support::post_job(&client, port, &bearer, &sh("echo hi")).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let url = format!("http://127.0.0.1:{port}/api/v1/jobs/{id}");
        let v = json_of(client.get(url).header("authorization", &bearer)).await;
        if v["status"] == "succeeded" {
            break;
        }
        assert!(Instant::now() < deadline, "job never finished: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        events.chunk().await.unwrap().is_some(),
        "the stream carried events"
    );
    assert_eq!(listen_connections(&app.pool).await, 1);
}

#[sqlx::test(migrations = false)]
async fn cancelling_a_running_job_wakes_its_runner_through_a_notification(pool: PgPool) {
    let (app, node, member) = slow_node(pool, "n-cancel").await;
    let id = app
        .submit_ok(&member, sh("trap 'exit 0' TERM; echo up; sleep 60 & wait"))
        .await;
    wait_status(&app, &member, id, &["running"], 30).await;
    let asked = Instant::now();
    let c = app
        .post(&format!("/api/v1/jobs/{id}/cancel"), &member)
        .await;
    assert_eq!(c.status, 200, "{}", c.text);
    let v = wait_status(&app, &member, id, &["cancelled"], 30).await;
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "stopped in {:?}: the cancel was not heard until a timer fired",
        asked.elapsed()
    );
    assert_eq!(v["exit_code"], 0, "it got SIGTERM and its trap ran: {v}");
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn a_followed_log_wakes_on_new_lines_and_ends_with_its_job(pool: PgPool) {
    let (app, node, member) = slow_node(pool, "n-follow").await;
    let id = app
        .submit_ok(
            &member,
            sh("for i in 1 2 3 4; do echo tick $i; sleep 0.3; done"),
        )
        .await;
    wait_status(&app, &member, id, &["running", "succeeded"], 30).await;
    let started = Instant::now();
    let r = app
        .get(&format!("/api/v1/jobs/{id}/logs?follow=true"), &member)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let expected: Vec<String> = (1..=4).map(|i| format!("tick {i}")).collect();
    assert_eq!(r.text.lines().collect::<Vec<_>>(), expected);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the follow ended {:?} after it began: its end was not heard",
        started.elapsed()
    );
    node.stop().await;
}

#[sqlx::test(migrations = false)]
async fn a_lost_listen_connection_makes_every_subscriber_refetch(pool: PgPool) {
    let app = TestApp::with_backstop(pool, SLOW_BACKSTOP).await;
    let member = app.bearer("alice", Role::Member).await;
    let (stop, notifier) = app.start_notifier();
    until_listening(&app.pool).await;
    let (status, mut body) = app.stream("/api/v1/events", &member).await;
    assert_eq!(status, 200);
    // The database drops the notifier's connection (a restart, a proxy, an admin).
    let killed: i64 = sqlx::query_scalar(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE datname = current_database() AND query ILIKE 'LISTEN%'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(killed, 1);
    let seen = crate::support::read_stream_until(&mut body, "event: resync", 20).await;
    assert!(seen.contains("\"kind\":\"resync\""), "{seen}");
    // And it listens again: a change made after the reconnect arrives.
    until_listening(&app.pool).await;
    app.sim_cards("1x24576:NVIDIA GeForce RTX 3090", "n-lost")
        .await;
    crate::support::read_stream_until(&mut body, "event: cards", 20).await;
    stop.send(true).unwrap();
    notifier.await.unwrap();
}
